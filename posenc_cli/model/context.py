"""Per-forward attention state shared by every layer: positions, query chunks, shared biases.

Why chunks: a materialised (1|B, H, t, S) bias for a long evaluation would not fit in memory,
so queries are processed in chunks whose bias workspace fits a byte budget; the workspace counts
the batch (content biases are per sequence), the heads, the keys of the chunk and the number of
such tensors the encoding holds at once (``bias_buffers``). A bias that depends on i - j only
(``distance_bias``) is never materialised: one row per distance, viewed as a Toeplitz matrix
over the keys in reverse order; there chunks only trim the masked triangle the fused kernel
would otherwise compute.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from posenc_cli.encodings.base import PositionalEncoding

#: Largest bias workspace (bytes, one layer, one chunk) before queries are chunked. Small
#: enough that a chunk's bias tensors stay in the last-level cache between the kernels that
#: write them and SDPA that reads them (measured at 4096 with 2 threads, 32 MB L3: 32 MB ran
#: Transformer-XL and DeBERTa ~1.5x faster than 64 MB; 16 MB adds per-call overhead).
DEFAULT_BIAS_BUDGET = 32 * 2**20
#: Under autograd every chunk's probabilities stay alive for the backward anyway, so chunks
#: bound only the transient part: the budget is this many times larger there, and training at
#: the usual lengths runs in one chunk (DeBERTa at 256 x 16: three chunks cost ~10%).
GRAD_BUDGET_FACTOR = 16
#: Position-only biases kept for the later layers of the same forward, as a multiple of the
#: chunk budget; chunks beyond it are recomputed per layer.
MEMO_BUDGETS = 6
#: Fewest query rows in a chunk (tiny budgets in tests would otherwise give one row per chunk).
MIN_CHUNK_ROWS = 16
#: Query rows per call with a Toeplitz bias: SDPA with a mask computes the masked blocks too,
#: so shorter chunks skip more of them (measured: 512 rows at 4096 keys costs ~1.1x causal).
TOEPLITZ_CHUNK_ROWS = 512


class AttentionContext:
    """Positions of this forward, its query chunks and the biases every layer shares."""

    def __init__(self, encoding: PositionalEncoding, pos_T: Tensor,
                 bias_budget_bytes: int = DEFAULT_BIAS_BUDGET, batch: int = 1) -> None:
        self.encoding = encoding
        self.pos_T = pos_T
        self.bias_budget_bytes = bias_budget_bytes
        self.batch = batch
        self.scratch: dict[Any, Any] = {"positions": pos_T}
        self._memo: dict[tuple[int, int], Tensor] = {}
        self._memo_bytes = 0
        self._distance_vector: Tensor | None = None
        self._distance_done = False

    def chunks(self, n_heads: int, batch: int | None = None) -> list[tuple[int, int]]:
        """Query ranges [s, e) whose bias workspace (against keys < e) fits in the budget.

        The workspace of t rows is 4 bytes x bias_buffers x (1|B) x H x t x e, so early chunks
        (few keys) may be longer than late ones. With autograd on, the budget is
        GRAD_BUDGET_FACTOR times larger.
        """
        T = self.pos_T.numel()
        enc = self.encoding
        if not enc.has_bias:
            return [(0, T)]
        b = 1 if enc.bias_is_positional else (batch or self.batch)
        grad = torch.is_grad_enabled()
        budget = self.bias_budget_bytes * (GRAD_BUDGET_FACTOR if grad else 1)
        cells = max(1, budget // (4 * enc.bias_buffers * b * n_heads))
        cap = T
        if self.distance_vector() is not None:  # a view, nothing materialised without autograd
            cap, cells = TOEPLITZ_CHUNK_ROWS, cells if grad else T * T
        out, s = [], 0
        while s < T:
            t = int((-s + math.sqrt(s * s + 4 * cells)) / 2)
            e = min(T, s + max(MIN_CHUNK_ROWS, min(t, cap)))
            out.append((s, e))
            s = e
        return out

    def distance_vector(self) -> Tensor | None:
        """(H, 2T-1) bias of distances -(T-1) … T-1, -inf for j > i; once per forward."""
        if not self._distance_done:
            self._distance_done = True
            T = self.pos_T.numel()
            d = torch.arange(1 - T, T, device=self.pos_T.device)
            vec = self.encoding.distance_bias(d) if self.encoding.has_bias else None
            if vec is not None:
                self._distance_vector = vec.float().masked_fill(d < 0, float("-inf")).contiguous()
        return self._distance_vector

    def toeplitz_mask(self, start: int, end: int) -> Tensor:
        """(1, H, t, end) view: bias + causal mask of queries [start, end) against the keys in
        reverse order (end-1 … 0), entry [a, b'] = vec[distance (start+a) - (end-1-b')]."""
        vec = self.distance_vector()
        assert vec is not None
        H, L = vec.shape
        T, t = (L + 1) // 2, end - start
        return vec.as_strided((1, H, t, end), (H * L, L, 1, 1), vec.storage_offset() + T - t)

    def bias(self, start: int, end: int, q_BHtE: Tensor, k_BHsE: Tensor, layer: int) -> Tensor:
        """Bias + causal mask (-inf) for queries [start, end) against keys [0, end), float32."""
        enc = self.encoding
        pos_t, pos_s = self.pos_T[start:end], self.pos_T[:end]
        if not enc.bias_is_positional:
            return _checked(enc.causal_score_bias(q_BHtE, k_BHsE, pos_t, pos_s, layer,
                                                  self.scratch))
        cached = self._memo.get((start, end))
        if cached is not None:
            return cached
        b = _checked(enc.causal_score_bias(None, None, pos_t, pos_s, None, self.scratch))
        size = b.numel() * b.element_size()
        if self._memo_bytes + size <= MEMO_BUDGETS * self.bias_budget_bytes:
            self._memo[(start, end)] = b
            self._memo_bytes += size
        return b


def _checked(bias: Tensor | None) -> Tensor:
    assert bias is not None and bias.dim() == 4, "score_bias must return a 4-D (1|B, H, T, S) bias"
    return bias if bias.dtype == torch.float32 else bias.float()
