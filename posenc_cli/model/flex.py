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
* a pair or content bias with a ``score_bias`` hook (FIRE's pieces, DeBERTa's and
  Transformer-XL's content-position tables): the encoding's own function of one score's
  batch, head, query row, key row and distance; a table as wide as the keys
  (Transformer-XL's) per query chunk of one size;
* windows and chunks (model.windows, model.chunks) of any of these, or of an encoding with
  no bias: the block mask, so a long evaluation's hidden blocks are never computed.

An encoding with a fused kernel of its own where it runs (``fuses_attention``: CoPE's and
stick-breaking's, in Triton) takes that instead, for every query at once, in a layer with
neither a window nor a chunk (and for CoPE without log-n scaling).

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
from posenc_cli.encodings.site import BiasSite, ScoreBias
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
    a bias of i - j over a range of positions, a separable bias, a ``score_bias``, or a window
    or a chunk; never weights that are not a softmax, other content or pair biases, or
    randomized positions."""
    scaled = ctx.logn_length is not None
    return has_flex_form(
        ctx.encoding, ctx.local, ctx.materialised, ctx.span.contiguous, ctx.span.device, scaled
    )


def has_flex_form(
    enc: PositionalEncoding,
    local: bool,
    materialised: bool = False,
    contiguous: bool = True,
    device: torch.device | None = None,
    query_scaled: bool = False,
) -> bool:
    """``takes_flex`` of a layer with ``enc`` on ``device`` (the CPU by default), a window or
    a chunk (``local``), a bias that is ``materialised`` (pair biases, randomized positions),
    positions that are a range, and log-n scaling of the queries (``query_scaled``), which
    CoPE's own fused kernel does not take: its bias reads the unscaled queries."""
    if enc.fuses_attention(device or torch.device("cpu")):
        return not local and (enc.fuses_scaled_queries or not query_scaled)
    if enc.has_own_weights:
        return False
    if enc.has_score_bias:
        return contiguous
    if materialised or enc.has_pair_bias:
        return False
    if enc.has_key_bias:  # its content bias is the general form of the same bias
        return True
    return not enc.has_content_bias and (enc.has_distance_bias or local)


def flex_forward(
    q: Tensor,
    k: Tensor,
    qkv: tuple[Tensor, Tensor, Tensor],
    ctx: AttentionContext,
    scale: float,
    layer: int,
    inputs: Tensor,
) -> Tensor:
    """A ``takes_flex`` layer's attention: the encoding's own fused kernel, its
    ``score_bias``, or its key or distance bias in FlexAttention. ``q``, ``k`` before
    ``transform_qk`` (the hooks' inputs), ``qkv`` as the kernel takes them."""
    enc = ctx.encoding
    if enc.fuses_attention(q.device):
        return enc.fused_attention(*qkv, scale, layer)
    if enc.has_score_bias:
        return flex_scored(qkv, (q, k), ctx, scale, layer, inputs)
    key_bias = ctx.key_bias(k, layer, inputs) if enc.has_key_bias else None
    return flex_attend(*qkv, ctx, scale, key_bias)


def flex_attend(
    q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, scale: float, key_bias: Tensor | None
) -> Tensor:
    """softmax(q·kᵀ·scale + bias)·v for ``takes_flex`` contexts without a ``score_bias``:
    ``key_bias`` (B, H, T) is the separable encoding's key term, else the bias is the
    context's distance vector."""
    T = q.shape[2]
    score_mod = _separable(key_bias) if key_bias is not None else _distance(ctx, q.shape[1])
    mask = _block_mask(T, T, 0, ctx.window, ctx.chunk, str(q.device))
    kernel = _kernel(q.device.type)
    return kernel(q, k, v, score_mod=score_mod, block_mask=mask, scale=scale)


def flex_scored(
    qkv: tuple[Tensor, Tensor, Tensor],
    raw: tuple[Tensor, Tensor],
    ctx: AttentionContext,
    scale: float,
    layer: int,
    inputs: Tensor,
) -> Tensor:
    """``flex_attend`` of an encoding with a ``score_bias``, from the queries and keys as the
    kernel takes them (``qkv``) and as the encoding's hook takes them (``raw``, before
    ``transform_qk``): in one call, or, where the encoding's table spans the keys, in query
    chunks of one size against every key (the block mask skips the later ones), so a
    compiled kernel sees at most two shapes whatever the length."""
    q, k, v = qkv
    T = q.shape[2]
    rows = _uniform_rows(ctx, q) if ctx.encoding.score_table_spans_keys else T
    kernel, parts = _kernel(q.device.type), []
    for s in range(0, T, rows):
        e = min(T, s + rows)
        site = BiasSite(ctx.span.part(s, e), ctx.span, layer, ctx.cache, inputs)
        bias = ctx.encoding.score_bias(raw[0][:, :, s:e], raw[1], site)
        mask = _block_mask(e - s, T, s, ctx.window, ctx.chunk, str(q.device))
        score_mod = _scored(bias, torch.tensor(s, device=q.device))
        parts.append(kernel(q[:, :, s:e], k, v, score_mod=score_mod, block_mask=mask, scale=scale))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)


def _uniform_rows(ctx: AttentionContext, q: Tensor) -> int:
    """Query rows per chunk: the fewest of the default path's chunks, whose bias against
    (nearly) every key fits its budget."""
    return min(e - s for s, e in ctx.chunks(q.shape[1], q.shape[0]))


def _scored(bias: ScoreBias, first_query: Tensor) -> ScoreMod:
    """The score_mod of an encoding's ``score_bias`` for queries from token ``first_query``
    (a tensor: a Python number would be compiled into the kernel, once per chunk)."""

    def pair_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score + bias(b, h, q_idx, kv_idx, q_idx + first_query - kv_idx)

    return pair_bias


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


def mask_mod(
    window: int | None, chunk: int | None, first: int | Tensor = 0
) -> Callable[..., Tensor]:
    """Which keys a query sees: earlier ones, within ``window`` tokens, in its own ``chunk``
    (the same rule as AttentionContext's masks), for queries from token ``first`` on."""

    def visible(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        q_idx = q_idx + first
        seen = kv_idx <= q_idx
        if window is not None:
            seen = seen & (q_idx - kv_idx < window)
        if chunk is not None:
            seen = seen & (q_idx // chunk == kv_idx // chunk)
        return seen

    return visible


@functools.lru_cache(maxsize=64)
def _block_mask(
    queries: int, keys: int, first: int, window: int | None, chunk: int | None, device: str
) -> object:
    """The block mask of ``queries`` queries from token ``first`` on against ``keys`` keys in
    one layout, made once (it costs hundreds of µs) and broadcast over batch and heads."""
    from torch.nn.attention.flex_attention import create_block_mask

    visible = mask_mod(window, chunk, torch.tensor(first, device=device) if first else 0)
    return create_block_mask(visible, None, None, queries, keys, device=device)


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
