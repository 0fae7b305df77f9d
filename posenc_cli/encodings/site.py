"""Where an encoding's bias is asked for: the chunk of queries, its keys, the layer and the
forward's shared tables (``BiasSite``, ``ForwardCache``), and the per-score form of a bias
that FlexAttention calls (``ScoreBias``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from posenc_cli.encodings.span import Span


@dataclass
class ForwardCache:
    """Tensors one forward pass shares between a layer's query chunks: ``positions`` spans the
    forward, ``tables`` holds per-layer projected position tables (layer -> tensor) and
    ``key_terms`` per-layer products over every key seen so far. They live for one forward."""

    positions: Span
    tables: dict[int, Any] = field(default_factory=dict)
    key_terms: dict[int, Tensor] = field(default_factory=dict)


#: bias(b, h, q, k, d) of the site's query row q and key row k at distance d = i - j (index
#: tensors, broadcast): tables are indexed by rows and distances, never by a Python number,
#: so a compiled kernel serves every chunk.
ScoreBias = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class BiasSite:
    """Where a content bias is asked for: a chunk of queries against every earlier key;
    ``inputs`` is the layer's (normalised) input at those keys, (B, S, D)."""

    queries: Span
    keys: Span
    layer: int
    cache: ForwardCache
    inputs: Tensor | None = None
