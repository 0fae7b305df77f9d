"""RoPE (Su et al. 2021): rotate each interleaved pair (2k, 2k+1) of q and k by angle m·θ_k.

θ_k = Θ^(-2k/E), k = 0 … E/2-1, positions from 0 — the form of the derivations. Because
R_mᵀ R_n = R_{n-m}, the score ⟨R_m q, R_n k⟩ depends on positions only through m - n.

Two variants leave some pairs unrotated (θ_k = 0): ``rotary_fraction`` < 1 rotates only the
first fraction of each head's dimensions, with frequencies computed over those dimensions
(GPT-NeoX's rotary_pct); ``p`` < 1 keeps the original frequencies but makes the
lowest-frequency fraction 1 - p of the pairs position-free (p-RoPE, Barbero et al. 2024;
floor(p·E/2) pairs keep their rotation, as Gemma's implementation counts them). p = 0 rotates
nothing: the model is `none`.

A model fine-tuned with LongRoPE (`posenc extend extend.method=longrope`) keeps both of its
factor sets and picks one per forward, as transformers' ``longrope_frequency_update`` does: the
long set when the positions reach past the original length L (max position + 1 > L), the short
set otherwise. The attention rotates the queries and keys of a whole forward at once (its
block-by-block path serves materialised position biases only, which no RoPE-family encoding
has), so the positions ``rotate`` sees make the forward's choice. Under torch.compile the
choice is a ``torch.where`` on the largest position, as in transformers: no position value is
read, so compiled training stays one graph, exact with randomized positions too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated

import torch
from torch import Tensor

from posenc_cli.common.rules import Rule
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.cache import BoundedCache
from posenc_cli.encodings.parameters import EVEN, POSITIVE, YARN_RAMPS
from posenc_cli.encodings.rope_scaling import RescaleSets, scaled_frequencies


def rotated_dims(head_dim: int, rotary_fraction: float) -> int:
    """E, the dimensions of a head that rotate: at least one pair, a whole number of pairs
    (what LongRoPE's per-pair factors are counted against)."""
    return max(2, 2 * round(rotary_fraction * head_dim / 2))


def rotary_frequencies(
    head_dim: int, theta: float, rotary_fraction: float, p: float
) -> tuple[Tensor, int]:
    """(E/2,) float64 θ_k with zeros for the unrotated pairs, and the rotated dimensions
    (``rotary_fraction`` in (0, 1] and ``p`` in [0, 1], as the constructor's rules check)."""
    rotary_dims = rotated_dims(head_dim, rotary_fraction)
    inv = torch.zeros(head_dim // 2, dtype=torch.float64)
    inv[: rotary_dims // 2] = theta ** (
        -torch.arange(0, rotary_dims, 2, dtype=torch.float64) / rotary_dims
    )
    kept = math.floor(p * rotary_dims / 2 + 1e-9)  # rounded down; the highest come first
    inv[kept:] = 0.0
    return inv, rotary_dims


class RotaryEncoding(PositionalEncoding):
    """Rotary position embedding applied to queries and keys in every layer."""

    relative = True
    rotary = True
    trained_inv_freq: Tensor
    inv_freq: Tensor
    long_inv_freq: Tensor
    short_inv_freq: Tensor

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: Annotated[int, EVEN],
        n_layers: int,
        theta: Annotated[float, POSITIVE],
        rotary_fraction: Annotated[float, Rule(lo=0, lo_open=True, hi=1)],
        p: Annotated[float, Rule(lo=0, hi=1)],
        yarn_ramp: Annotated[str, YARN_RAMPS],
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.yarn_ramp = yarn_ramp
        self.theta = theta = float(theta)
        self.rotary_fraction = float(rotary_fraction)
        self.p = float(p)
        inv, self.rotary_dims = rotary_frequencies(head_dim, theta, rotary_fraction, p)
        self.register_buffer("trained_inv_freq", inv, persistent=False)
        for name in ("inv_freq", "long_inv_freq", "short_inv_freq"):  # follow .to(device)
            self.register_buffer(name, inv.float(), persistent=False)
        self.attention_factor = 1.0
        self.adopted: tuple[str, float, int] = ("none", 1.0, 0)
        self.adopted_sets: RescaleSets | None = None
        #: L of an adopted LongRoPE, whose forwards switch sets past it; None: no switch.
        self.switch_length: int | None = None
        self._phases = BoundedCache()

    def adopt_extension(
        self,
        method: str,
        factor: float,
        original_length: int,
        rescale: RescaleSets | None = None,
    ) -> None:
        """A model fine-tuned with ``method`` (`posenc extend`): its frequencies become the
        model's own, the ones ``extend_context("none", ...)`` restores; LongRoPE's with both
        of its sets (``rescale``), switched per forward."""
        if (method == "longrope") != (rescale is not None):
            raise ValueError("LongRoPE, and only LongRoPE, is adopted with its two factor sets")
        self.adopted = (method, float(factor), int(original_length))
        self.adopted_sets = rescale
        self.extend_context("none", 1.0, original_length)

    def extend_context(
        self,
        method: str,
        factor: float,
        original_length: int,
        rescale: Sequence[float] | None = None,
    ) -> None:
        """Evaluate with ``method``'s frequencies for extension factor ``factor``
        (rope_scaling.py); ``none`` restores the trained (or adopted) ones. ``rescale``:
        LongRoPE's factors, one per rotated pair, for the length about to be evaluated."""
        sets = None
        if method == "none":
            method, factor, original_length = self.adopted
            sets = self.adopted_sets
            rescale = None if sets is None else sets.short
        self.inv_freq, self.attention_factor = self._scaled(
            method, factor, original_length, rescale
        )
        self.short_inv_freq = self.long_inv_freq = self.inv_freq
        self.switch_length = None
        if sets is not None:  # an adopted LongRoPE: the long set past L
            self.long_inv_freq, _ = self._scaled(method, factor, original_length, sets.long)
            self.switch_length = original_length
        self._phases.clear()

    def _scaled(
        self, method: str, factor: float, original_length: int, rescale: Sequence[float] | None
    ) -> tuple[Tensor, float]:
        """``method``'s float32 frequencies, on the model's device, and attention factor."""
        inv, attention = scaled_frequencies(
            method,
            self.trained_inv_freq,
            self.theta,
            self.rotary_dims,
            factor,
            original_length,
            self.yarn_ramp,
            rescale,
        )
        return inv.float().to(self.inv_freq.device), attention

    def frequencies(self, pos: Tensor) -> Tensor:
        """The inverse frequencies of a forward over ``pos``: the model's own, or an adopted
        LongRoPE's long set when max(pos) + 1 > L and its short set otherwise (a
        ``torch.where`` while tracing, so no position value is read)."""
        L = self.switch_length
        if L is None or pos.numel() == 0:
            return self.inv_freq
        if self.tracing():
            return torch.where(pos.max() + 1 > L, self.long_inv_freq, self.short_inv_freq)
        return self.long_inv_freq if int(pos.max()) + 1 > L else self.short_inv_freq

    def phase(self, pos: Tensor) -> Tensor:
        """a·e^{i m θ_k} as complex64 (T, E/2) from float64 angles (positions reach the tens of
        thousands), a the attention factor (1 unless YaRN or LongRoPE), cached per position
        range (which fixes an adopted LongRoPE's set too; a new set clears the cache)."""
        return self.cached(
            self._phases,
            pos,
            lambda: torch.complex(*self._cos_sin_uncached(pos, self.frequencies(pos))),
        )

    def _cos_sin_uncached(self, pos: Tensor, inv: Tensor) -> tuple[Tensor, Tensor]:
        angles = pos.double()[:, None] * inv.double()[None, :]
        a = self.attention_factor
        return (angles.cos() * a).float(), (angles.sin() * a).float()

    def rotate(self, x_BHTE: Tensor, pos_T: Tensor) -> Tensor:
        """Apply R_m to every position m: (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos).

        In eager mode that is the complex product (x0 + i x1)·e^{i m θ}: one kernel forward and
        backward instead of six elementwise passes and a stack (~10x faster on CPU). Under
        torch.compile, which cannot trace complex views, the real form is fused by the compiler.
        """
        if self.tracing():  # no cache, and no complex views, which the compiler cannot trace
            cos, sin = self._cos_sin_uncached(pos_T, self.frequencies(pos_T))
            x = x_BHTE.float().unflatten(-1, (-1, 2))
            x0 = x[..., 0]
            x1 = x[..., 1]
            out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
            return out.flatten(-2).to(x_BHTE.dtype)
        pairs = x_BHTE.float().unflatten(-1, (-1, 2))
        try:
            x = torch.view_as_complex(pairs)
        except RuntimeError:  # a layout with odd strides or offset: copy once
            x = torch.view_as_complex(pairs.contiguous())
        return torch.view_as_real(x * self.phase(pos_T)).flatten(-2).to(x_BHTE.dtype)

    def transform_qk(
        self, q_BHTE: Tensor, k_BHSE: Tensor, pos_T: Tensor, pos_S: Tensor, layer: int
    ) -> tuple[Tensor, Tensor]:
        return self.rotate(q_BHTE, pos_T), self.rotate(k_BHSE, pos_S)

    def extra_repr(self) -> str:
        extra = "" if self.rotary_fraction == 1 else f", rotary_fraction={self.rotary_fraction}"
        extra += "" if self.p == 1 else f", p={self.p}"
        extra += "" if self.yarn_ramp == "hf" else f", yarn_ramp={self.yarn_ramp}"
        return f"{super().extra_repr()}, theta={self.theta}{extra}"
