"""model.layers: which layers of a model use the run's encoding and which have no position;
model.windows and model.chunks: which layers attend within a sliding window or a chunk.

A pattern lists ``encoding`` (the run's encoding, with its parameters) or ``none`` (NoPE: q and
k as projected, no bias) per layer and repeats over the layers, as SmolLM3's ``no_rope_layers``
and Llama 4's iRoPE do for RoPE; ``null`` means every layer uses the encoding. It lives here,
torch-free, because the config checks, the model and the exporters all read it.
"""

from __future__ import annotations

from collections.abc import Sequence

#: What one entry of a pattern may be.
LAYER_WORDS = ("encoding", "none")


def encoded_layers(pattern: Sequence[str] | None, n_layers: int) -> list[bool]:
    """Per layer, True where it uses the run's encoding (layer l is pattern[l mod len])."""
    if not pattern:
        return [True] * n_layers
    return [str(pattern[layer % len(pattern)]) == "encoding" for layer in range(n_layers)]


def per_layer(pattern: Sequence[int | None] | None, n_layers: int) -> list[int | None]:
    """Per layer, its sliding window or chunk in tokens, or None (global): pattern[l mod len],
    as ``encoded_layers`` repeats model.layers (the patterns repeat independently)."""
    if not pattern:
        return [None] * n_layers
    return [pattern[layer % len(pattern)] for layer in range(n_layers)]
