"""The reference the attention-statistics figure titles each panel with: uniform attention
over the keys a layer sees, which a sliding window or a chunk (model.windows, model.chunks)
changes. Checked by counting keys by hand and against a model whose attention is uniform."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from posenc_cli.encodings import PositionalEncoding
from posenc_cli.inspection.attention_stats import collect
from posenc_cli.inspection.figures.attention import uniform_note, uniform_value
from posenc_cli.model.transformer import TransformerLM


def counted(field: str, n: int, window: int | None, chunk: int | None) -> float:
    """Uniform weights over the keys j ≤ i with i − j < window and ⌊i/c⌋ = ⌊j/c⌋, listed."""
    total = 0.0
    for i in range(n):
        seen = [
            j
            for j in range(i + 1)
            if (window is None or i - j < window) and (chunk is None or i // chunk == j // chunk)
        ]
        p = 1 / len(seen)
        total += (
            -len(seen) * p * math.log(p) if field == "entropy" else sum(p * (i - j) for j in seen)
        )
    return total / n


@pytest.mark.parametrize("field", ["mean_distance", "entropy"])
@pytest.mark.parametrize(("window", "chunk"), [(None, None), (4, None), (None, 8), (5, 8)])
def test_the_reference_counts_the_keys_each_query_sees(
    field: str, window: int | None, chunk: int | None
) -> None:
    want = counted(field, 37, window, chunk)
    assert uniform_value(field, 37, window, chunk) == pytest.approx(want, rel=1e-12)


def test_a_model_with_uniform_attention_has_the_reference_statistics() -> None:
    """Queries zeroed: every logit 0, attention uniform over what each layer's mask leaves."""
    torch.manual_seed(0)
    windows, chunks = [None, 4, None, 5], [None, None, 8, 8]
    nope = PositionalEncoding(16, 2, 8, 4)
    model = TransformerLM(30, 16, 4, 2, None, nope, windows=windows, chunks=chunks)
    for block in model.blocks:
        torch.nn.init.zeros_(block.attn.q_proj.weight)
    stats = collect(model.eval(), torch.randint(0, 30, (2, 37)), 16)
    for layer, local in enumerate(zip(windows, chunks, strict=True)):
        for field in ("mean_distance", "entropy"):
            want = uniform_value(field, 37, *local)
            assert getattr(stats, field)[layer] == pytest.approx([want, want], rel=1e-5)


def test_the_title_names_each_group_of_layers() -> None:
    def subject(windows: list, chunks: list) -> SimpleNamespace:
        return SimpleNamespace(model=SimpleNamespace(windows=windows, chunks=chunks))

    assert uniform_note(subject([None] * 2, [None] * 2), "mean_distance", 4) == (
        "(uniform causal: 0.8)"
    )
    note = uniform_note(subject([2, 2, None], [None] * 3), "mean_distance", 4)
    assert note.replace("\N{NO-BREAK SPACE}", " ") == (
        "\n(uniform over the keys seen:\n0.4 (layers 1, 2); 0.8 (layer 3))"
    )
