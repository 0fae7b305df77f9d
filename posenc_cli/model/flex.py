"""Attention through torch's FlexAttention: the bias computed inside the kernel's tiles.

The default paths (model/attention.py) hand SDPA a bias it reads from memory: a strided view
for biases of i - j, a materialised block per query chunk for windows, chunks and FoX's gate
in a local layer. FlexAttention instead calls a ``score_mod(score, b, h, q_idx, kv_idx)`` per
score inside a fused kernel (compiled on CUDA, forward and backward) and skips the key blocks
a ``block_mask`` hides. Three forms cover these encodings, with no code of their own:

* a bias of i - j (ALiBi, T5, KERPLE, Sandwich): a lookup into the forward's (H, 2T-1)
  distance vector (AttentionContext.distance_vector), which already holds -inf for future
  keys and keys outside a window, so its gradient reaches T5's table and KERPLE's parameters;
* a separable bias (FoX's forget gate): the key term minus the query's own, per sequence;
* windows and chunks (model.windows, model.chunks) of any encoding without another bias:
  the block mask, so a long evaluation's hidden blocks are never computed.

torch's FlexAttention has no backward on CPU; there it runs eagerly and unfused, for
evaluation and for checking that these score_mods equal the default paths (tests/).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.model.context import AttentionContext

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def flex_available() -> bool:
    """Whether the installed torch has FlexAttention (torch >= 2.5)."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def takes_flex(ctx: AttentionContext) -> bool:
    """Whether a layer with this context has a FlexAttention form (see the module docstring):
    a bias of i - j over a range of positions, a separable bias, or a window or a chunk; never
    weights that are not a softmax, content or pair biases, or randomized positions."""
    return has_flex_form(ctx.encoding, ctx.local, ctx.materialised)


def has_flex_form(enc: PositionalEncoding, local: bool, materialised: bool = False) -> bool:
    """``takes_flex`` of a layer with ``enc``, a window or a chunk (``local``), and a bias
    that is ``materialised`` (pair biases, randomized positions)."""
    if enc.has_own_weights or materialised or enc.has_pair_bias:
        return False
    if enc.has_key_bias:  # its content bias is the general form of the same bias
        return True
    return not enc.has_content_bias and (enc.has_distance_bias or local)


def flex_attend(
    q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, scale: float, key_bias: Tensor | None
) -> Tensor:
    """softmax(q·kᵀ·scale + bias)·v for ``takes_flex`` contexts: ``key_bias`` (B, H, T) is the
    separable encoding's key term, else the bias is the context's distance vector."""
    T = q.shape[2]
    score_mod = _separable(key_bias) if key_bias is not None else _distance(ctx, q.shape[1])
    mask = _block_mask(T, ctx.window, ctx.chunk, str(q.device))
    kernel = _kernel(q.device.type)
    return kernel(q, k, v, score_mod=score_mod, block_mask=mask, scale=scale)


def _distance(ctx: AttentionContext, n_heads: int) -> ScoreMod:
    vec = ctx.distance_vector()
    vec = vec.expand(n_heads, -1) if vec.shape[0] == 1 else vec  # a window's zeros row
    last = ctx.span.length - 1

    def distance_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score + vec[h, q_idx - kv_idx + last]

    return distance_bias


def _separable(key_bias: Tensor) -> ScoreMod:
    kb = key_bias.float()

    def separable_bias(
        score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor
    ) -> Tensor:
        return score + (kb[b, h, kv_idx] - kb[b, h, q_idx])

    return separable_bias


def mask_mod(window: int | None, chunk: int | None) -> Callable[..., Tensor]:
    """Which keys a query sees: earlier ones, within ``window`` tokens, in its own ``chunk``
    (the same rule as AttentionContext's masks)."""

    def visible(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        seen = kv_idx <= q_idx
        if window is not None:
            seen = seen & (q_idx - kv_idx < window)
        if chunk is not None:
            seen = seen & (q_idx // chunk == kv_idx // chunk)
        return seen

    return visible


@functools.lru_cache(maxsize=32)
def _block_mask(T: int, window: int | None, chunk: int | None, device: str) -> object:
    """The block mask of one length and layout, made once (it costs hundreds of µs) and
    broadcast over batch and heads."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(mask_mod(window, chunk), None, None, T, T, device=device)


@functools.cache
def _kernel(device_type: str) -> Callable[..., Tensor]:
    """Compiled FlexAttention on CUDA (the fused kernel); eager elsewhere, where torch warns
    once that it is unfused (known, and said in docs/performance.md)."""
    from torch.nn.attention.flex_attention import flex_attention

    if device_type == "cuda":
        compiled: Callable[..., Tensor] = torch.compile(flex_attention, dynamic=False)
        return lambda *args, **kwargs: (
            flex_attention(*args, **kwargs)  # inside a compiled model: dynamo fuses it there
            if torch.compiler.is_compiling()
            else compiled(*args, **kwargs)
        )

    def eager(*args: Any, **kwargs: Any) -> Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out: Tensor = flex_attention(*args, **kwargs)
            return out

    return eager
