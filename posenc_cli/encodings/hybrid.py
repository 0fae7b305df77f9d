"""Hybrid layers: RoPE in some layers and no position at all (NoPE) in the others, optionally
with a sliding window on the RoPE layers.

The recipes of 2025 models:

* SmolLM3 (Hugging Face), OLMo 3 and the layer layout of Llama 4's iRoPE: every 4th layer has
  no RoPE (transformers' SmolLM3 ``no_rope_layers``, interval 4: layers 3, 7, 11, …) —
  ``encoding=hybrid``.
* Llama 4's iRoPE (Meta 2025): the same layout, and in the NoPE layers the queries scaled by
  1 + s·ln(⌊(i + 1)/F⌋ + 1) (attention-temperature tuning; transformers' Llama4TextAttention,
  s = attn_scale 0.1, F = floor_scale 8192) — ``encoding=irope``. Its chunked (block-local)
  attention in the RoPE layers is not modelled.
* RNoPE-SWA (Yang et al. 2025, Cohere, "Rope to Nope and Back Again: A New Hybrid Attention
  Strategy"; Command A, transformers' Cohere2): the RoPE layers attend within a sliding window,
  the NoPE layers globally, 3 : 1 — ``encoding=rnope_swa``.

``pattern`` repeats over the layers (layer l is pattern[l mod len(pattern)]). A RoPE layer
rotates exactly as ``rope`` with the same parameters, and eval.rope_scaling and
`posenc extend` rescale those rotations (NoPE layers have nothing to rescale); a NoPE layer
leaves q and k as projected. A window w lets query i see keys j with i − j < w, as
transformers' sliding-window mask does; it is a (0 | −inf) bias of i − j for the windowed
layers, materialised per query chunk (``content_bias``, the per-layer hook).
"""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor

from posenc_cli.common.rules import Rule
from posenc_cli.encodings.parameters import EVEN, POSITIVE, YARN_RAMPS
from posenc_cli.encodings.rope import RotaryEncoding
from posenc_cli.encodings.site import BiasSite

#: What a layer of a pattern may be.
LAYER_KINDS = Rule(choices=("rope", "none"))


class HybridEncoding(RotaryEncoding):
    """RoPE in the layers ``pattern`` marks ``rope``, no position in those it marks ``none``."""

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
        pattern: Annotated[list[str], LAYER_KINDS],
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers, theta, rotary_fraction, p, yarn_ramp)
        self.pattern = [str(kind) for kind in pattern]
        self.rope_layers = frozenset(
            layer for layer in range(n_layers) if self.pattern[layer % len(self.pattern)] == "rope"
        )

    def transform_qk(
        self, q_BHTE: Tensor, k_BHSE: Tensor, pos_T: Tensor, pos_S: Tensor, layer: int
    ) -> tuple[Tensor, Tensor]:
        if layer in self.rope_layers:
            return super().transform_qk(q_BHTE, k_BHSE, pos_T, pos_S, layer)
        return q_BHTE, k_BHSE

    def caveats(self) -> list[str]:
        """A pattern whose first ``none`` lies beyond the last layer makes the model RoPE (and
        one without ``rope`` in reach makes it NoPE): valid, but not a hybrid."""
        kinds = {self.pattern[layer % len(self.pattern)] for layer in range(self.n_layers)}
        if len(kinds) > 1:
            return []
        (kind,) = kinds
        missing = "none" if kind == "rope" else "rope"
        if missing in self.pattern:
            first = self.pattern.index(missing)
            why = f"its first '{missing}' is layer {first}"
            fix = f"use model.n_layers={first + 1} or more, or a shorter encoding.pattern"
        else:
            why, fix = f"it has no '{missing}'", f"add '{missing}' to encoding.pattern"
        name = self.config_name or type(self).__name__
        return [
            f"encoding={name} with model.n_layers={self.n_layers}: every layer is '{kind}' "
            f"(pattern {self.pattern}: {why}), so this run is not a hybrid — {fix}"
        ]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, pattern={self.pattern}"


class WindowedHybridEncoding(HybridEncoding):
    """``HybridEncoding`` whose RoPE layers attend only to the last ``window`` positions."""

    #: the mask and, on an accelerator, its copy in the kernel's dtype
    bias_buffers = 2

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
        pattern: Annotated[list[str], LAYER_KINDS],
        window: Annotated[int, Rule(lo=1)],
    ) -> None:
        super().__init__(
            d_model, n_heads, head_dim, n_layers, theta, rotary_fraction, p, yarn_ramp, pattern
        )
        self.window = int(window)

    def content_bias(self, q_BHTE: Tensor, k_BHSE: Tensor, site: BiasSite) -> Tensor:
        """(1, H, t, S): −inf for future keys and, in a RoPE layer, for keys ``window`` or
        more positions back; 0 elsewhere. The same for every sequence, so one batch row."""
        distance = site.queries.positions()[:, None] - site.keys.positions()[None, :]
        blocked = distance < 0
        if site.layer in self.rope_layers:
            blocked |= distance >= self.window
        bias = torch.zeros(blocked.shape, device=blocked.device).masked_fill(blocked, -torch.inf)
        return bias.expand(1, self.n_heads, *blocked.shape)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, window={self.window}"


class TemperedHybridEncoding(HybridEncoding):
    """``HybridEncoding`` whose NoPE layers scale each query by Llama 4's temperature
    1 + s·ln(⌊(i + 1)/F⌋ + 1): 1 for the first F - 1 positions, then growing with the log of
    the position, so attention over a long context stays sharp. It reads absolute positions:
    a model with a NoPE layer is not shift-invariant."""

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
        pattern: Annotated[list[str], LAYER_KINDS],
        attn_scale: Annotated[float, POSITIVE],
        floor_scale: Annotated[int, Rule(lo=1)],
    ) -> None:
        super().__init__(
            d_model, n_heads, head_dim, n_layers, theta, rotary_fraction, p, yarn_ramp, pattern
        )
        self.attn_scale = float(attn_scale)
        self.floor_scale = int(floor_scale)
        self.relative = len(self.rope_layers) == n_layers

    def temperature(self, pos_T: Tensor) -> Tensor:
        """(T, 1) query scale of each position, from float64 positions."""
        steps = torch.floor((pos_T.double() + 1.0) / self.floor_scale)
        return (torch.log1p(steps) * self.attn_scale + 1.0)[:, None]

    def transform_qk(
        self, q_BHTE: Tensor, k_BHSE: Tensor, pos_T: Tensor, pos_S: Tensor, layer: int
    ) -> tuple[Tensor, Tensor]:
        if layer in self.rope_layers:
            return super().transform_qk(q_BHTE, k_BHSE, pos_T, pos_S, layer)
        return q_BHTE * self.temperature(pos_T).to(q_BHTE.dtype), k_BHSE

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, attn_scale={self.attn_scale}, floor={self.floor_scale}"
