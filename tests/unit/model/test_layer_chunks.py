"""model.chunks: Llama 4's chunked attention per layer, for any encoding. Checked against the
definition (a query of a one-layer chunked model gives what the same model gives it when it is
shown only the earlier tokens of its own chunk, at their own positions, as transformers' mask
q // c == k // c says), for stacked chunks (which never reach an earlier chunk, unlike stacked
windows), beside a window and NoPE layers, and through the config checks and the exporters."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import load
from posenc_cli.encodings import build_encoding
from posenc_cli.engine.build import build_model
from posenc_cli.model.transformer import TransformerLM

D, H, VOCAB, C, T = 32, 4, 50, 6, 20


def _model(
    encoding_config: Callable[[str], Any],
    name: str,
    layers: int,
    chunks: list[int | None],
    windows: list[int | None] | None = None,
    encoded: list[bool] | None = None,
) -> TransformerLM:
    torch.manual_seed(0)
    cfg = encoding_config(name)
    if name == "path":  # its short convolution reads tokens before a key's own (the window test)
        cfg.conv_width = 0
    enc = build_encoding(cfg, D, H, layers)
    return TransformerLM(
        VOCAB, D, layers, H, None, enc, encoded=encoded, windows=windows, chunks=chunks
    ).double()


def _shown_only_its_chunk(model: TransformerLM, ids: Tensor, window: int | None = None) -> Tensor:
    """Query i's logits from a model without chunks shown tokens C * (i // C) … i alone (and
    no more than ``window`` of them), at their own positions: what a chunk means, computed
    without any chunk."""
    rows = []
    for i in range(ids.shape[1]):
        start = (i // C) * C
        if window is not None:
            start = max(start, i - window + 1)
        rows.append(model(ids[:, start : i + 1], pos_offset=start)[:, -1])
    return torch.stack(rows, dim=1)


@pytest.mark.encodings
def test_a_chunked_query_sees_only_the_earlier_tokens_of_its_chunk(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor], name: str
) -> None:
    """One layer, chunks of C, every encoding: with autograd, and without it in small query
    chunks (the evaluation path), each query's logits are those of its chunk shown alone."""
    chunked = _model(encoding_config, name, 1, [C])
    plain = _model(encoding_config, name, 1, [None])
    plain.load_state_dict(chunked.state_dict())
    ids = tokens(T)
    expected = _shown_only_its_chunk(plain, ids).detach()
    # float32 inside them (the window test); KERPLE-power's float32 pow rounds a distance's
    # bias differently in a vectorised body and its scalar tail, which move with the length
    tol = 1e-5 if name in ("xpos", "path", "kerple_power") else 1e-9
    torch.testing.assert_close(chunked(ids), expected, rtol=tol, atol=tol)
    chunked.bias_budget_bytes = 4 * H * 16 * T  # a few rows per chunk of queries
    with torch.no_grad():
        torch.testing.assert_close(chunked(ids), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["rope", "alibi", "fox", "cope"])
def test_a_window_inside_a_chunk_keeps_the_nearer_limit(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor], name: str
) -> None:
    """A layer with a window of 4 and chunks of C = 6: query i sees back to the later of its
    chunk's start and i - 3."""
    both = _model(encoding_config, name, 1, [C], windows=[4])
    plain = _model(encoding_config, name, 1, [None])
    plain.load_state_dict(both.state_dict())
    ids = tokens(T)
    expected = _shown_only_its_chunk(plain, ids, window=4).detach()
    torch.testing.assert_close(both(ids), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "stick_breaking"])
def test_stacked_chunks_never_reach_an_earlier_chunk_and_a_global_layer_does(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor], name: str
) -> None:
    """Three chunked layers: the last query is unchanged by any token of an earlier chunk
    (stacked windows would reach further back, tests/unit/model/test_layer_windows.py); with
    Llama 4's layout, a global NoPE layer on top, the earlier chunks reach it."""
    ids = tokens(T)
    start = ((T - 1) // C) * C
    earlier = ids.clone()
    earlier[:, :start] = (earlier[:, :start] + 1) % VOCAB
    inside = ids.clone()
    inside[:, start] = (inside[:, start] + 1) % VOCAB
    chunked = _model(encoding_config, name, 3, [C, C, C])
    irope = _model(encoding_config, name, 4, [C, C, C, None], encoded=[True, True, True, False])
    with torch.no_grad():
        last = chunked(ids)[:, -1]
        torch.testing.assert_close(chunked(earlier)[:, -1], last, rtol=1e-12, atol=1e-12)
        assert not torch.allclose(chunked(inside)[:, -1], last)
        assert not torch.allclose(irope(earlier)[:, -1], irope(ids)[:, -1])


def test_the_config_builds_the_chunks_and_adds_no_weights() -> None:
    cfg = load(
        ["model=tiny", "encoding=rope", "model.layers=[encoding,none]", "model.chunks=[8,null]"]
    )
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB)
    assert model.chunks == [8, None] and model.windows == [None, None]
    plain = build_model(load(["model=tiny", "encoding=rope"]), VOCAB)
    assert set(model.state_dict()) == set(plain.state_dict())


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["model.chunks=[0]"], "model.chunks=[0] holds 0, not a number of tokens (1 or more)"),
        (["model.chunks=[null]"], "gives none of the 2 layers a chunk"),
        (["model.chunks=[]"], "model.chunks=[] gives no layer a chunk"),
        (["model.chunks=[16777217]"], "above posenc's longest context (16,777,216)"),
        (["model.chunks=[true]"], "wrong type for 'model.chunks[0]'"),
        (["model.chunks=8"], "it takes a list — write it in brackets, e.g. model.chunks=[...]"),
    ],
)
def test_chunks_that_cannot_mean_what_they_say_are_refused(overrides: list[str], says: str) -> None:
    with pytest.raises(PosencError) as caught:
        load(["model=tiny", *overrides])
    assert says in str(caught.value)


def test_chunks_go_with_an_encodings_own_window() -> None:
    """rnope_swa's window and a chunk are two limits, both kept (no second window)."""
    assert list(load(["model=tiny", "encoding=rnope_swa", "model.chunks=[8]"]).model.chunks) == [8]


def test_the_exporters_refuse_chunks(tmp_path: Path) -> None:
    """Neither CS336's model nor the Hugging Face formats posenc writes have chunked layers."""
    from posenc_cli.cs336.exporter import _check_rope
    from posenc_cli.hf.export_checks import check_exportable

    cfg = load(["model=tiny", "encoding=rope", "model.chunks=[8,null]"])
    with pytest.raises(PosencError, match=r"model\.chunks"):
        _check_rope(cfg, tmp_path)
    with pytest.raises(PosencError, match=r"model\.chunks"):
        check_exportable(cfg, tmp_path)


def test_an_imported_cs336_model_keeps_global_attention(tmp_path: Path) -> None:
    from posenc_cli.cs336.importer import import_cs336

    required = ["model.n_heads=2", "encoding.theta=10000", "train.context_length=16"]
    missing = tmp_path / "none.pt"
    with pytest.raises(PosencError, match="cannot set model.* on an imported CS336 model"):
        import_cs336(missing, missing, missing, [], [*required, "model.chunks=[4]"])
