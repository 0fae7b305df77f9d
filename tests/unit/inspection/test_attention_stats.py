"""Attention statistics against a hand-built attention matrix, and the probe against the
model: the probabilities it reports are the ones the layer's output is made of."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from posenc_cli.inspection import attention_stats
from posenc_cli.inspection.attention_stats import StatsAccumulator, collect, summarise
from posenc_cli.model.probe import LayerProbe
from posenc_cli.model.transformer import TransformerLM

#: Rows of a causal attention matrix over 3 tokens, chosen by hand.
P = [[1.0], [0.25, 0.75], [0.5, 0.25, 0.25]]


def hand_built() -> tuple[torch.Tensor, torch.Tensor]:
    raw = torch.full((1, 1, 3, 3), -30.0)
    bias = torch.full((1, 1, 3, 3), float("-inf"))
    for i, row in enumerate(P):
        for j, p in enumerate(row):
            raw[0, 0, i, j] = math.log(p)
            bias[0, 0, i, j] = 0.0
    return raw, bias


def test_distance_entropy_and_mass_beyond_L_of_a_hand_built_matrix() -> None:
    acc = StatsAccumulator(heads=1, length=3, train_length=2, biased=True)
    raw, bias = hand_built()
    acc.add(raw, bias, 0)
    stats = summarise([acc], T=3, L=2, B=1)
    distance = (0 + 0.25 * 1 + 0.5 * 2 + 0.25 * 1) / 3  # Σ_j p_ij (i - j), mean over rows
    entropy = (
        0
        - (0.25 * math.log(0.25) + 0.75 * math.log(0.75))
        - (0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    ) / 3
    assert stats.mean_distance[0, 0] == pytest.approx(distance)
    assert stats.entropy[0, 0] == pytest.approx(entropy)
    assert stats.beyond[0, 0] == pytest.approx(0.5)  # only row 2 reaches distance 2 = L
    assert stats.qk_by_distance[0].tolist() == pytest.approx(
        [(0 + math.log(0.75) + math.log(0.25)) / 3, (math.log(0.25) * 2) / 2, math.log(0.5)]
    )
    assert stats.bias_by_distance[0, 0].tolist() == [0.0, 0.0, 0.0]


def test_chunks_in_two_calls_give_the_same_sums() -> None:
    raw, bias = hand_built()
    whole, parts = (StatsAccumulator(1, 3, 2, True) for _ in range(2))
    whole.add(raw, bias, 0)
    parts.add(raw[:, :, :1, :1], bias[:, :, :1, :1], 0)
    parts.add(raw[:, :, 1:], bias[:, :, 1:], 1)
    a = summarise([whole], 3, 2, 1)
    b = summarise([parts], 3, 2, 1)
    for field in ("mean_distance", "entropy", "beyond", "qk_by_distance", "bias_by_distance"):
        assert getattr(a, field).flatten().tolist() == pytest.approx(
            getattr(b, field).flatten().tolist()
        )


@pytest.mark.encodings
def test_the_probe_reproduces_every_layers_output(
    name: str,
    make_model: Callable[..., TransformerLM],
    tokens: Callable[..., torch.Tensor],
    randomise_zero_params: Callable[[TransformerLM], None],
) -> None:
    model = make_model(name).eval()
    randomise_zero_params(model)
    ids = tokens(24)
    seen = []

    def hook(attn: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
        probe = LayerProbe(attn, *args)
        raw, bias = probe.logits(0, 24)
        y = model.encoding.attention_weights(raw + bias) @ probe.v
        B, H, T, E = y.shape
        seen.append((attn.output_proj(y.transpose(1, 2).reshape(B, T, H * E)), output))

    handles = [b.attn.register_forward_hook(hook) for b in model.layers]
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    assert len(seen) == len(model.layers)
    for mine, theirs in seen:
        torch.testing.assert_close(mine, theirs, atol=2e-5, rtol=1e-4)


@pytest.mark.encodings
def test_collect_is_the_same_in_small_chunks(
    name: str,
    make_model: Callable[..., TransformerLM],
    tokens: Callable[..., torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = make_model(name).eval()
    ids = tokens(32)
    whole = collect(model, ids, train_length=16)
    monkeypatch.setattr(attention_stats, "CHUNK_ELEMENTS", 1)  # 16-row chunks
    parts = collect(model, ids, train_length=16)
    assert whole.beyond is not None and whole.mean_distance.shape == (len(model.layers), 4)
    for field in ("mean_distance", "entropy", "beyond", "qk_by_distance"):
        assert getattr(parts, field) == pytest.approx(getattr(whole, field), rel=1e-4, abs=1e-5)
    assert (whole.mean_distance <= 31).all() and (whole.entropy <= math.log(32) + 1e-6).all()


def test_a_distance_bias_is_reported_exactly(
    make_model: Callable[..., TransformerLM], tokens: Callable[..., torch.Tensor]
) -> None:
    model = make_model("alibi").eval()
    stats = collect(model, tokens(24, batch=3), train_length=8)
    want = model.encoding.distance_bias(torch.arange(24)).double().numpy()
    for layer in range(len(model.layers)):
        assert stats.bias_by_distance[layer] == pytest.approx(want, abs=1e-5)


def test_a_content_bias_is_averaged_over_the_batch_and_the_pairs_at_each_distance(
    make_model: Callable[..., TransformerLM],
    tokens: Callable[..., torch.Tensor],
    randomise_zero_params: Callable[[TransformerLM], None],
) -> None:
    model = make_model("transformer_xl").eval()
    randomise_zero_params(model)
    ids = tokens(12, batch=3)
    biases = []

    def keep(attn: torch.nn.Module, args: tuple) -> None:
        biases.append(LayerProbe(attn, *args).logits(0, 12)[1])

    handles = [b.attn.register_forward_pre_hook(keep) for b in model.layers]
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    stats = collect(model, ids, train_length=4)
    for layer, bias in enumerate(biases):  # (B, H, T, T): the mean of each i - j = d, by loop
        for h in range(bias.shape[1]):
            for d in range(12):
                cells = [float(bias[b, h, i, i - d]) for b in range(3) for i in range(d, 12)]
                assert stats.bias_by_distance[layer, h, d] == pytest.approx(
                    sum(cells) / len(cells), abs=1e-5
                )
