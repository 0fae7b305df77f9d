"""model.layers: which layers of a model use the run's encoding, which have no position and
which another encoding; model.windows and model.chunks: which layers attend within a sliding
window or a chunk.

A pattern lists ``encoding`` (the run's encoding, with its parameters), ``none`` (NoPE: q and
k as projected, no bias) or another encoding's name (with model.layer_encodings' values) per
layer and repeats over the layers, as SmolLM3's ``no_rope_layers`` and Llama 4's iRoPE do for
RoPE; ``null`` means every layer uses the encoding. It lives here, torch-free, because the
config checks, the model and the exporters all read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The words a pattern may hold besides an encoding's name.
LAYER_WORDS = ("encoding", "none")


def layer_kinds(pattern: Sequence[str] | None, n_layers: int, run_encoding: str) -> list[str]:
    """Per layer, ``encoding``, ``none`` or another encoding's name (layer l is pattern[l mod
    len]); the run's own encoding named by its name is ``encoding``."""
    if not pattern:
        return ["encoding"] * n_layers
    words = [str(pattern[layer % len(pattern)]) for layer in range(n_layers)]
    return ["encoding" if word == run_encoding else word for word in words]


def encoded_layers(
    pattern: Sequence[str] | None, n_layers: int, run_encoding: str = "encoding"
) -> list[bool]:
    """Per layer, True where it uses the run's encoding."""
    return [kind == "encoding" for kind in layer_kinds(pattern, n_layers, run_encoding)]


def per_layer(pattern: Sequence[int | None] | None, n_layers: int) -> list[int | None]:
    """Per layer, its sliding window or chunk in tokens, or None (global): pattern[l mod len],
    as ``encoded_layers`` repeats model.layers (the patterns repeat independently)."""
    if not pattern:
        return [None] * n_layers
    return [pattern[layer % len(pattern)] for layer in range(n_layers)]


def unreached(entries: Sequence[Any], n_layers: int) -> tuple[Any, int] | None:
    """The first entry of a pattern longer than the model that no layer gets, with its index
    (a pattern entry that means nothing for this model), or None."""
    used = [entries[layer % len(entries)] for layer in range(n_layers)]
    return next(((e, i) for i, e in enumerate(entries) if e not in used), None)
