"""RoPE context extension at evaluation time: new rotary frequencies (and an attention factor)
for a model trained at length L and evaluated at L' = S·L.

Every method maps the trained inverse frequencies θ_k = b^(-2k/E) (E the rotated dimensions)
to new ones; a frequency of 0 (a dimension RoPE leaves unrotated: partial rotary, p-RoPE)
stays 0 under all of them. Each function names the paper or code it implements. By default
every method is the one Hugging Face transformers computes (``modeling_rope_utils``, which vLLM
and most published checkpoints follow): a model configured there with ``rope_scaling`` is the
model posenc evaluates. YaRN's paper ramp (continuous in the rotations r) differs from that
code's ramp (over rounded pair indices) and stays available as ``encoding.yarn_ramp=paper``.
LongRoPE takes its per-pair factors from its caller: the long or the short set, whichever
transformers would use at the evaluated length (evals/context_extension.py), or both
(``RescaleSets``) for a model fine-tuned with them, which switches per forward (rope.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from posenc_cli.common.errors import PosencError
from posenc_cli.encodings.names import ROPE_SCALING_METHODS as METHODS
from posenc_cli.encodings.rope_regions import LLAMA3_HIGH, LLAMA3_LOW, YARN_ALPHA, YARN_BETA


def position_interpolation(inv_freq: Tensor, factor: float) -> Tensor:
    """PI (Chen et al. 2023, eq. 3): positions m·L/L' — the same as every θ_k divided by S."""
    return inv_freq / factor


def ntk_aware(inv_freq: Tensor, base: float, rotary_dims: int, factor: float) -> Tensor:
    """NTK-aware scaling (bloc97 2023; YaRN paper eq. 16): base b' = b·S^(E/(E-2)), so the
    highest frequency is kept and the lowest one is interpolated by exactly S (E the rotated
    dimensions; with p-RoPE the lowest pair still rotating is stretched by less than S)."""
    new_base = base * factor ** (rotary_dims / (rotary_dims - 2))
    return inv_freq ** (math.log(new_base) / math.log(base))  # b^(-2k/E) -> b'^(-2k/E)


def yarn_paper_ramp(inv_freq: Tensor, original_length: int) -> Tensor:
    """γ_k of the paper (Peng et al. 2023, eqs. 17-18): r_k = L/λ_k with λ_k = 2π/θ_k the
    wavelength; 0 below α = 1 rotation, 1 above β = 32 and (r - α)/(β - α) between."""
    r = original_length * inv_freq / (2 * math.pi)
    return ((r - YARN_ALPHA) / (YARN_BETA - YARN_ALPHA)).clamp(0.0, 1.0)


def yarn_correction_dim(rotations: float, rotary_dims: int, base: float, length: int) -> float:
    """The pair index k whose θ_k = b^(-2k/E) turns ``rotations`` times over ``length``:
    E·ln(L/(2π·r)) / (2·ln b) (transformers' ``find_correction_dim``)."""
    return rotary_dims * math.log(length / (rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_hf_ramp(inv_freq: Tensor, base: float, rotary_dims: int, original_length: int) -> Tensor:
    """γ_k of transformers' ``_compute_yarn_parameters`` (truncate=True, its default): linear
    in the pair index k from floor(k(β)) to ceil(k(α)), both clipped to [0, E-1] as that code
    clips them, the upper bound nudged by 0.001 when they meet."""
    low = math.floor(yarn_correction_dim(YARN_BETA, rotary_dims, base, original_length))
    high: float = math.ceil(yarn_correction_dim(YARN_ALPHA, rotary_dims, base, original_length))
    low = max(low, 0)
    high = min(high, rotary_dims - 1)
    if low == high:
        high += 0.001
    k = torch.arange(inv_freq.numel(), dtype=torch.float64)
    return 1 - ((k - low) / (high - low)).clamp(0.0, 1.0)


def yarn(inv_freq: Tensor, factor: float, ramp: Tensor) -> tuple[Tensor, float]:
    """YaRN (Peng et al. 2023, eqs. 19-21): NTK-by-parts with the ramp γ_k, then the
    attention factor. θ'_k = (1 - γ)·θ_k/S + γ·θ_k. The logits are divided by t with
    sqrt(1/t) = 0.1·ln S + 1, applied here as that factor on queries and keys each (as
    transformers multiplies cos and sin by it)."""
    scaled = (1 - ramp) * inv_freq / factor + ramp * inv_freq
    return scaled, 0.1 * math.log(factor) + 1.0


def llama3(inv_freq: Tensor, factor: float, original_length: int) -> Tensor:
    """Llama 3.1's rule (Meta 2024, `apply_scaling`; Hugging Face `_compute_llama3_parameters`):
    wavelengths shorter than L/4 are kept, longer than L/1 divided by S, and in between
    θ' = (1 - s)·θ/S + s·θ with s = (L/λ - 1)/(4 - 1); L = the training length."""
    wavelength = 2 * math.pi / inv_freq
    smooth = (original_length / wavelength - LLAMA3_LOW) / (LLAMA3_HIGH - LLAMA3_LOW)
    smoothed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelength < original_length / LLAMA3_HIGH, inv_freq, smoothed)
    return torch.where(wavelength > original_length / LLAMA3_LOW, inv_freq / factor, out)


class RescaleSets(NamedTuple):
    """LongRoPE's two sets of per-pair factors, fastest pair first: ``long`` for a forward
    whose positions reach past the original length L (max position + 1 > L), ``short`` up to
    it. A model fine-tuned with LongRoPE keeps both, as transformers' ``rope_scaling`` does."""

    long: Sequence[float]
    short: Sequence[float]


def longrope_attention(factor: float, original_length: int) -> float:
    """LongRoPE's attention factor on q and k each (Ding et al. 2024; transformers'
    ``_compute_longrope_parameters`` when no attention_factor is given): sqrt(1 + ln S / ln L),
    which keeps the attention's entropy from growing with log S; 1 when S <= 1."""
    if factor <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(original_length))


def longrope(
    inv_freq: Tensor,
    rescale: Sequence[float],
    rotary_dims: int,
    factor: float,
    original_length: int,
) -> tuple[Tensor, float]:
    """LongRoPE (Ding et al. 2024; its rescaled RoPE with no initial positions n̂ left
    unscaled, as Phi-3 and transformers use it): θ'_k = θ_k / λ_k, one rescale factor λ_k per
    rotated pair (fastest first); pairs past the rotated ones keep θ. The frequencies depend on
    the λ alone, S only on the attention factor."""
    pairs = rotary_dims // 2
    if len(rescale) != pairs:
        raise ValueError(f"LongRoPE needs {pairs} rescale factors, got {len(rescale)}")
    lam = torch.ones_like(inv_freq)
    lam[:pairs] = torch.tensor(list(rescale), dtype=inv_freq.dtype)
    return inv_freq / lam, longrope_attention(factor, original_length)


def scaled_frequencies(
    method: str,
    inv_freq: Tensor,
    base: float,
    rotary_dims: int,
    factor: float,
    original_length: int,
    yarn_ramp: str = "hf",
    rescale: Sequence[float] | None = None,
) -> tuple[Tensor, float]:
    """The inverse frequencies and attention factor ``method`` gives for extension factor S
    (``dynamic_ntk`` is NTK-aware with the S its caller computes for each evaluated length:
    transformers' S·L'/L - (S - 1), evals/context_extension.py; ``longrope`` divides by the
    ``rescale`` factors its caller picked for the evaluated length, whatever S is)."""
    if method not in METHODS:
        raise PosencError(
            f"unknown eval.rope_scaling '{method}'", "choose one of: " + ", ".join(METHODS)
        )
    inv = inv_freq.double()
    zero = inv == 0
    inv = torch.where(zero, torch.ones_like(inv), inv)  # no division by 0 (masked below)
    if method == "longrope":
        if rescale is None:
            raise ValueError("LongRoPE needs its rescale factors")
        out, attention = longrope(inv, rescale, rotary_dims, factor, original_length)
    elif method == "none" or factor <= 1.0:
        out, attention = inv, 1.0
    else:
        out, attention = _stretched(
            method, inv, base, rotary_dims, factor, original_length, yarn_ramp
        )
    return out.masked_fill(zero, 0.0), attention


def _stretched(
    method: str,
    inv: Tensor,
    base: float,
    rotary_dims: int,
    factor: float,
    original_length: int,
    yarn_ramp: str,
) -> tuple[Tensor, float]:
    """The methods that stretch by S > 1 alone (no zero frequencies reach here)."""
    if method == "pi":
        return position_interpolation(inv, factor), 1.0
    if method in ("ntk", "dynamic_ntk"):
        return ntk_aware(inv, base, rotary_dims, factor), 1.0
    if method == "yarn":
        if yarn_ramp == "paper":
            ramp = yarn_paper_ramp(inv, original_length)
        else:
            ramp = yarn_hf_ramp(inv, base, rotary_dims, original_length)
        return yarn(inv, factor, ramp)
    return llama3(inv, factor, original_length), 1.0
