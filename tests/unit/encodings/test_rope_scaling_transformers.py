"""RoPE scaling is what Hugging Face transformers computes: every method at factors 2, 4 and 8
against a plain-Python implementation of transformers' published formulas
(``modeling_rope_utils``), and, where transformers is installed, against that module itself.
Inverse frequencies and the attention factor agree within 1e-6 relative."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from posenc_cli.encodings.rope import rotary_frequencies
from posenc_cli.encodings.rope_scaling import scaled_frequencies
from posenc_cli.evals.context_extension import dynamic_ntk_factor

#: (rotated dimensions E, base, original length L): a small head and a Llama-like one.
SHAPES = [(16, 10000.0, 128), (64, 500000.0, 512)]
FACTORS = [2.0, 4.0, 8.0]
STATIC = ["pi", "ntk", "yarn", "llama3"]


def reference(method: str, E: int, b: float, L: int, S: float) -> tuple[list[float], float]:
    """transformers' formulas term by term (linear, default with NTK's base, yarn with
    truncate, llama3 with low 1 / high 4)."""
    theta = [b ** (-2 * k / E) for k in range(E // 2)]
    if method == "pi":
        return [t / S for t in theta], 1.0
    if method == "ntk":
        nb = b * S ** (E / (E - 2))
        return [nb ** (-2 * k / E) for k in range(E // 2)], 1.0
    if method == "llama3":
        out = []
        for t in theta:
            wavelen = 2 * math.pi / t
            smooth = (L / wavelen - 1) / (4 - 1)
            if wavelen < L / 4:
                out.append(t)
            elif wavelen > L:
                out.append(t / S)
            else:
                out.append((1 - smooth) * t / S + smooth * t)
        return out, 1.0

    def dim(rotations: float) -> float:
        return E * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(b))

    low = max(math.floor(dim(32)), 0)
    high = min(math.ceil(dim(1)), E - 1)
    high = high + 0.001 if low == high else high
    out = []
    for k, t in enumerate(theta):
        extrapolate = 1 - min(max((k - low) / (high - low), 0.0), 1.0)
        out.append(t / S * (1 - extrapolate) + t * extrapolate)
    return out, 0.1 * math.log(S) + 1.0


def dynamic_reference(E: int, b: float, L: int, S: float, length: int) -> list[float]:
    """transformers' dynamic NTK at sequence length ``length`` (max_position_embeddings L)."""
    seq = max(length, L)
    nb = b * ((S * seq / L) - (S - 1)) ** (E / (E - 2))
    return [nb ** (-2 * k / E) for k in range(E // 2)]


def posenc(method: str, E: int, b: float, L: int, S: float) -> tuple[Tensor, float]:
    inv, _ = rotary_frequencies(E, b, 1.0, 1.0)
    return scaled_frequencies(method, inv, b, E, S, L)


def close(got: Tensor, want: list[float]) -> None:
    torch.testing.assert_close(
        got.double(), torch.tensor(want, dtype=torch.float64), rtol=1e-6, atol=0
    )


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("method", STATIC)
def test_static_methods_follow_transformers_formulas(
    method: str, factor: float, shape: tuple[int, float, int]
) -> None:
    inv, attention = posenc(method, *shape, factor)
    want, want_attention = reference(method, *shape, factor)
    close(inv, want)
    assert attention == pytest.approx(want_attention, rel=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ratio", FACTORS)
@pytest.mark.parametrize("factor", [1.0, 2.0])
def test_dynamic_ntk_follows_transformers_formula(
    factor: float, ratio: float, shape: tuple[int, float, int]
) -> None:
    E, b, L = shape
    length = int(ratio * L)
    inv, attention = posenc("dynamic_ntk", E, b, L, dynamic_ntk_factor(factor, length / L))
    close(inv, dynamic_reference(E, b, L, factor, length))
    assert attention == 1.0


def test_dynamic_ntk_leaves_the_trained_length_alone() -> None:
    assert dynamic_ntk_factor(2.0, 1.0) == 1.0 and dynamic_ntk_factor(2.0, 0.5) == 1.0
    assert dynamic_ntk_factor(2.0, 4.0) == 7.0  # 2·4 - 1


def test_the_paper_ramp_differs_from_transformers_ramp() -> None:
    E, b, L = SHAPES[0]
    inv, _ = rotary_frequencies(E, b, 1.0, 1.0)
    paper, _ = scaled_frequencies("yarn", inv, b, E, 4.0, L, "paper")
    hf, _ = scaled_frequencies("yarn", inv, b, E, 4.0, L, "hf")
    r = [L * b ** (-2 * k / E) / (2 * math.pi) for k in range(E // 2)]
    gamma = [min(max((x - 1) / 31, 0.0), 1.0) for x in r]
    close(paper, [t / 4 * (1 - g) + t * g for t, g in zip(inv.tolist(), gamma, strict=True)])
    assert (paper - hf).abs().max() / hf.abs().max() > 1e-3


def transformers_frequencies(
    method: str, E: int, b: float, L: int, S: float, length: int
) -> tuple[Tensor, float]:
    """transformers' own computation for the method, on a LlamaConfig of that shape."""
    hf = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params: dict[str, object] = {"rope_type": "linear", "rope_theta": b, "factor": S}
    if method == "ntk":
        params.update(factor=1.0, rope_theta=b * S ** (E / (E - 2)))
    elif method == "dynamic_ntk":
        params["rope_type"] = "dynamic"
    elif method in ("yarn", "llama3"):
        params.update(rope_type=method, original_max_position_embeddings=L)
    if method == "llama3":
        params.update(low_freq_factor=1.0, high_freq_factor=4.0)
    config = hf.LlamaConfig(
        hidden_size=2 * E,
        num_attention_heads=2,
        head_dim=E,
        max_position_embeddings=L,
        rope_parameters=params,
    )
    return ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu", seq_len=length)


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("method", [*STATIC, "dynamic_ntk"])
def test_every_method_equals_transformers_itself(
    method: str, factor: float, shape: tuple[int, float, int]
) -> None:
    E, b, L = shape
    length = int(factor * L)
    for dynamic in [1.0, 2.0] if method == "dynamic_ntk" else [factor]:
        S = dynamic_ntk_factor(dynamic, factor) if method == "dynamic_ntk" else factor
        inv, attention = posenc(method, E, b, L, S)
        want, want_attention = transformers_frequencies(method, E, b, L, dynamic, length)
        close(inv, want.tolist())
        assert attention == pytest.approx(want_attention, rel=1e-6)
