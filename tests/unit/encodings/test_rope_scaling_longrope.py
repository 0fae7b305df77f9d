"""LongRoPE is what Hugging Face transformers computes (``_compute_longrope_parameters``, with
the long/short switch of ``dynamic_rope_update``): the frequencies and the attention factor at
lengths just below, at and above the original length L, against a plain-Python formula and,
where transformers is installed, against transformers itself, within 1e-6 relative."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from posenc_cli.encodings.rope import rotary_frequencies
from posenc_cli.encodings.rope_scaling import longrope_attention, scaled_frequencies
from posenc_cli.evals.context_extension import longrope_factors, longrope_set

#: (rotated dimensions E, base, original length L): a small head and a Llama-like one.
SHAPES = [(16, 10000.0, 128), (64, 500000.0, 512)]
FACTORS = [2.0, 4.0, 16.0]


def rescale_sets(E: int, S: float) -> tuple[list[float], list[float]]:
    """A long set rising from 1 to S·1.1 over the pairs (monotone, as the paper's search keeps
    them) and a short set near 1: values unlike any other method's, so a mix-up shows."""
    n = E // 2
    long = [1.0 + (S * 1.1 - 1.0) * (k / (n - 1)) ** 1.5 for k in range(n)]
    short = [1.0 + 0.03 * k for k in range(n)]
    return long, short


def lengths(L: int, S: float) -> list[int]:
    """Below, at and just above L, and the longest context."""
    return [L // 2, L - 1, L, L + 1, int(S * L)]


def reference(E: int, b: float, L: int, S: float, length: int) -> tuple[list[float], float]:
    """transformers' formula term by term: 1 / (f_k · b^(2k/E)) with f the long set when the
    sequence is longer than L, else the short one; attention sqrt(1 + ln S / ln L)."""
    long, short = rescale_sets(E, S)
    f = long if length > L else short
    inv = [1.0 / (f[k] * b ** (2 * k / E)) for k in range(E // 2)]
    return inv, 1.0 if S <= 1 else math.sqrt(1 + math.log(S) / math.log(L))


def posenc(E: int, b: float, L: int, S: float, length: int) -> tuple[Tensor, float]:
    inv, _ = rotary_frequencies(E, b, 1.0, 1.0)
    long, short = rescale_sets(E, S)
    rescale = longrope_factors(long, short, length, L)
    return scaled_frequencies("longrope", inv, b, E, S, L, rescale=rescale)


def close(got: Tensor, want: list[float]) -> None:
    torch.testing.assert_close(
        got.double(), torch.tensor(want, dtype=torch.float64), rtol=1e-6, atol=0
    )


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factor", FACTORS)
def test_longrope_follows_transformers_formula_at_every_length(
    factor: float, shape: tuple[int, float, int]
) -> None:
    E, b, L = shape
    for length in lengths(L, factor):
        inv, attention = posenc(E, b, L, factor, length)
        want, want_attention = reference(E, b, L, factor, length)
        close(inv, want)
        assert attention == pytest.approx(want_attention, rel=1e-6)


def test_the_switch_is_at_the_original_length() -> None:
    assert [longrope_set(n, 16) for n in (1, 15, 16, 17, 64)] == ["short"] * 3 + ["long"] * 2
    assert longrope_factors([2.0], [1.0], 16, 16) == [1.0]
    assert longrope_factors([2.0], [1.0], 17, 16) == [2.0]


def test_the_attention_factor_by_hand() -> None:
    assert longrope_attention(1.0, 4096) == 1.0 and longrope_attention(0.5, 4096) == 1.0
    # Phi-3-mini-128k: S = 131072 / 4096 = 32, L = 4096: sqrt(1 + 5/12)
    assert longrope_attention(32.0, 4096) == pytest.approx(math.sqrt(17 / 12), rel=1e-12)


def test_unrotated_pairs_stay_unrotated_and_need_no_factor() -> None:
    inv, rotary_dims = rotary_frequencies(16, 10000.0, 0.5, 1.0)  # 4 of 8 pairs rotate
    out, _ = scaled_frequencies("longrope", inv, 10000.0, rotary_dims, 4.0, 32, rescale=[2.0] * 4)
    close(out[:4], [t / 2 for t in inv[:4].tolist()])
    assert out[4:].abs().sum() == 0
    with pytest.raises(ValueError, match="needs 4 rescale factors, got 8"):
        scaled_frequencies("longrope", inv, 10000.0, rotary_dims, 4.0, 32, rescale=[2.0] * 8)


def test_longrope_rescales_even_without_an_extension_factor() -> None:
    """S only sets the attention factor: at S = 1 the short factors still apply."""
    inv, _ = rotary_frequencies(4, 10000.0, 1.0, 1.0)
    out, attention = scaled_frequencies("longrope", inv, 10000.0, 4, 1.0, 16, rescale=[1.0, 4.0])
    close(out, [1.0, 0.01 / 4])
    assert attention == 1.0


def hf_config(E: int, b: float, L: int, S: float) -> object:
    """A LlamaConfig of that shape with transformers 5's rope_parameters for LongRoPE."""
    hf = pytest.importorskip("transformers")
    long, short = rescale_sets(E, S)
    params: dict[str, object] = {
        "rope_type": "longrope",
        "rope_theta": b,
        "long_factor": long,
        "short_factor": short,
        "original_max_position_embeddings": L,
    }
    return hf.LlamaConfig(
        hidden_size=2 * E,
        num_attention_heads=2,
        head_dim=E,
        max_position_embeddings=int(S * L),
        rope_parameters=params,
    )


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factor", FACTORS)
def test_longrope_equals_transformers_itself(factor: float, shape: tuple[int, float, int]) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    E, b, L = shape
    config = hf_config(E, b, L, factor)
    for length in lengths(L, factor):
        inv, attention = posenc(E, b, L, factor, length)
        want, want_attention = ROPE_INIT_FUNCTIONS["longrope"](config, "cpu", seq_len=length)
        close(inv, want.tolist())
        assert attention == pytest.approx(want_attention, rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("length", [15, 16, 17, 64])
def test_llamas_rotary_embedding_switches_where_posenc_does(length: int) -> None:
    """The switch transformers makes in the forward (``dynamic_rope_update``), read from the
    cos and sin a LlamaRotaryEmbedding gives for positions 0 … length-1."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    E, b, L, S = 8, 10000.0, 16, 4.0
    rotary = LlamaRotaryEmbedding(hf_config(E, b, L, S))
    x = torch.zeros(1, length, E)
    cos, sin = rotary(x, torch.arange(length)[None])
    inv, attention = posenc(E, b, L, S, length)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv[None, :]
    want = torch.cat([angles, angles], dim=-1)  # transformers' halves layout
    torch.testing.assert_close(cos[0].double(), want.cos() * attention, rtol=0, atol=1e-5)
    torch.testing.assert_close(sin[0].double(), want.sin() * attention, rtol=0, atol=1e-5)
