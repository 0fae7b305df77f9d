"""Model sizes that both the torch-free planners (memory checks, bench tables, exports) and the
layers need, kept here so that sizing a run never imports torch."""

from __future__ import annotations

import math

#: The longest context a run may train or be extended to: 16,777,216 tokens, above every
#: released model's (Llama 4 Scout's 10,485,760), so only a mistake or a hostile file reaches it.
MAX_CONTEXT = 2**24


def default_d_ff(d_model: int) -> int:
    """8/3 · d_model rounded up to a multiple of 64 (CS336; 256 -> 704)."""
    return int(math.ceil(8 * d_model / 3 / 64) * 64)
