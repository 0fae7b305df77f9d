"""Per-forward attention state shared by every layer: positions, query chunks, shared biases.

Why chunks: a materialised (B, H, t, S) content bias for a long evaluation would not fit in
memory, so queries are processed in chunks whose bias workspace fits a byte budget; the
workspace counts the batch (content biases are per sequence), the heads, the keys of the
chunk and the number of such tensors the encoding holds at once (``bias_buffers``). A bias of
i - j alone (``distance_bias``) is never materialised: one row per distance, viewed as a
Toeplitz matrix over the keys in reverse order; there chunks only trim the masked triangle
the fused kernel would otherwise compute. A bias of the two positions (``pair_bias``, FIRE) or
a distance bias over positions that are not a range (randomized positions) is materialised
once per chunk and forward, and shared by the layers.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.site import BiasSite, ForwardCache
from posenc_cli.encodings.span import Span

#: Largest bias workspace (bytes, one layer, one chunk) before queries are chunked, on CPU:
#: small enough that a chunk's bias stays in the last-level cache between the kernels that
#: write it and SDPA that reads it (docs/performance.md), and under glibc's 32 MB threshold
#: for fresh mmap()s (engine/runtime.py ``keep_freed_memory``) by a margin that covers a
#: bias padded to whole tiles of keys (encodings/piecewise.py): a chunk of exactly 32 MB was
#: page-faulted anew each time: FIRE wrote the bias of 256 queries x 4096 keys (32 MB) in 1.8x
#: the time per query of 248 (31 MB).
DEFAULT_BIAS_BUDGET = 31 * 2**20
#: The same on an accelerator, whose kernels want few large launches and whose memory has
#: room: CPU-sized chunks made evaluation at 4096 tokens 2-10x slower on a GPU
#: (docs/performance.md).
ACCELERATOR_BIAS_BUDGET = 2**30
#: Under autograd every chunk's probabilities stay alive for the backward anyway, so chunks
#: bound only the transient part: the budget is this many times larger there, and training at
#: the usual lengths runs in one chunk.
GRAD_BUDGET_FACTOR = 16
#: Fewest query rows in a chunk (tiny budgets in tests would otherwise give one row per chunk).
MIN_CHUNK_ROWS = 16
#: Most query rows in a chunk of a materialised or content bias under autograd, on CPU: the
#: explicit softmax and a content bias's own passes cover every entry of a chunk's (t x e)
#: block, the masked triangle included, so shorter chunks skip most of it (four chunks of 64
#: rows at length 256 compute 62.5 % of the square; docs/performance.md). On a GPU the
#: launches would cost more than the triangle saves.
GRAD_CHUNK_ROWS = 64
#: Query rows per call with a Toeplitz bias, on CPU: SDPA with a mask computes the masked
#: blocks too, so shorter chunks skip more of them.
TOEPLITZ_CHUNK_ROWS = 512
#: Bytes of materialised position biases one forward keeps for its layers to share; past it a
#: chunk's bias is recomputed for each layer instead (very long evaluations).
SHARED_BIAS_BUDGET = 512 * 2**20


class AttentionContext:
    """Positions of this forward, its query chunks and the biases every layer shares."""

    def __init__(
        self,
        encoding: PositionalEncoding,
        span: Span,
        bias_budget_bytes: int | None = None,
        batch: int = 1,
        logn_length: int | None = None,
        window: int | None = None,
        chunk: int | None = None,
        flex: bool = False,
    ) -> None:
        self.encoding = encoding
        self.flex = flex  # FlexAttention where the layer has that form (model/flex.py)
        #: model.windows: a query sees only the last ``window`` tokens (itself included).
        self.window = window
        #: model.chunks: a query sees only the earlier tokens of its own chunk of ``chunk``
        #: tokens (Llama 4's chunked attention).
        self.chunk = chunk
        self.span = span
        self.pos_T = span.positions()
        #: CPU chunks are sized for its cache and capped in rows; an accelerator's are not.
        self.on_cpu = span.device.type == "cpu"
        default = DEFAULT_BIAS_BUDGET if self.on_cpu else ACCELERATOR_BIAS_BUDGET
        self.bias_budget_bytes = default if bias_budget_bytes is None else bias_budget_bytes
        self.batch = batch
        self.cache = ForwardCache(span)
        self.logn_length = logn_length
        self._distance_vector: Tensor | None = None
        self._shared: dict[tuple[int, int], Tensor] = {}
        self._shared_bytes = 0

    @property
    def local(self) -> bool:
        """A query sees only some of the earlier tokens (a sliding window, a chunk)."""
        return self.window is not None or self.chunk is not None

    @property
    def materialised(self) -> bool:
        """The position bias is materialised per chunk (pair biases, and distance biases of
        positions that are not a range), not viewed as a Toeplitz matrix."""
        enc = self.encoding
        return enc.has_pair_bias or (enc.has_distance_bias and not self.span.contiguous)

    def query_scale(self) -> Tensor | None:
        """(T, 1) log-n scaling max(1, log(n) / log(L_train)) of each query, n = the number of
        tokens it attends to (Chiang & Cholak 2022; Su 2021; Qwen's logn), or None when
        model.logn_scaling is off. n counts tokens, not position values: with randomized
        positions a training query still sees at most L_train keys."""
        if self.logn_length is None:
            return None
        n = torch.arange(1, self.span.length + 1, device=self.span.device, dtype=torch.float64)
        scale = n.log() / torch.log(torch.tensor(float(self.logn_length), dtype=torch.float64))
        return scale.clamp_(min=1.0).float()[:, None]

    def chunks(self, n_heads: int, batch: int | None = None) -> list[tuple[int, int]]:
        """Query ranges [s, e) whose bias workspace (against keys < e) fits in the budget.

        The workspace of t rows is 4 bytes x bias_buffers x (1|B) x H x t x e, so early chunks
        (few keys) may be longer than late ones. With autograd on, the budget is
        GRAD_BUDGET_FACTOR times larger and, on CPU, a chunk of a materialised or content bias
        has at most GRAD_CHUNK_ROWS rows.
        """
        T = self.span.length
        enc = self.encoding
        if not enc.has_bias and not enc.has_own_weights and not self.local:
            return [(0, T)]
        # a chunk's mask is materialised with the view (toeplitz_mask): budgeted like a bias
        toeplitz = not enc.scores_per_sequence and not self.materialised and self.chunk is None
        b = batch or self.batch if enc.scores_per_sequence else 1
        grad = torch.is_grad_enabled()
        budget = self.bias_budget_bytes * (GRAD_BUDGET_FACTOR if grad else 1)
        cells = max(1, budget // (4 * enc.bias_buffers * b * n_heads))
        cap = GRAD_CHUNK_ROWS if grad and self.on_cpu else T
        if toeplitz:  # a view, nothing materialised without autograd
            cap = TOEPLITZ_CHUNK_ROWS if self.on_cpu else T
            cells = cells if grad else T * T
        if enc.has_content_bias and not self.span.contiguous:
            # distance terms span every distance of the range, not only the keys (relative.py)
            width = self.span.last - self.span.start + 1
            step = max(MIN_CHUNK_ROWS, cells // width)
            return [(a, min(T, a + step)) for a in range(0, T, step)]
        out = []
        s = 0
        cap = self._local_cap(cap)
        while s < T:
            t = int((-s + math.sqrt(s * s + 4 * cells)) / 2)
            e = self._aligned(s, min(T, s + max(MIN_CHUNK_ROWS, min(t, cap))))
            out.append((s, e))
            s = e
        return out

    def _local_cap(self, cap: int) -> int:
        """On CPU, query chunks about as long as the layer's window or chunk: each then meets
        about that many keys (``first_key``) instead of every earlier one."""
        sizes = [n for n in (self.window, self.chunk) if n is not None]
        return min(cap, max(MIN_CHUNK_ROWS, min(sizes))) if sizes and self.on_cpu else cap

    def _aligned(self, start: int, end: int) -> int:
        """``end`` no later than the first chunk boundary after ``start``: a query range inside
        one chunk meets only that chunk's keys."""
        if self.chunk is None or self.chunk < MIN_CHUNK_ROWS:  # a call per tiny chunk costs more
            return end
        return min(end, (start // self.chunk + 1) * self.chunk)

    def distance_vector(self) -> Tensor:
        """(H, 2T-1) bias of distances -(T-1) … T-1, -inf for j > i and, with a window, for
        i - j >= window; once per forward. An encoding without a distance bias (a windowed
        layer of RoPE or NoPE) gives one row of zeros, broadcast over the heads."""
        if self._distance_vector is None:
            T = self.span.length
            d = torch.arange(1 - T, T, device=self.span.device)
            enc = self.encoding
            vec = (
                enc.distance_bias(d).float()
                if enc.has_distance_bias
                else d.new_zeros(1, 2 * T - 1, dtype=torch.float32)
            )
            blocked = (d < 0) | (d >= self.window if self.window is not None else False)
            self._distance_vector = vec.masked_fill(blocked, float("-inf")).contiguous()
        return self._distance_vector

    def window_mask(self, start: int, end: int, first: int = 0) -> Tensor | None:
        """(t, end - first) float32 0 | -inf of queries [start, end) against keys [first, end)
        (``_blocked_mask``); None for global attention. Token indices, not position values: a
        window or a chunk is a number of tokens (as transformers' are)."""
        if not self.local:
            return None
        q = torch.arange(start, end, device=self.span.device)[:, None]
        return self._blocked_mask(q, torch.arange(first, end, device=self.span.device)[None, :])

    def first_key(self, start: int) -> int:
        """The earliest key a query from ``start`` on can see: 0 for global attention, else
        where query ``start``'s window or chunk begins (later queries' begin no earlier): a
        window or a chunk makes a long evaluation cheaper instead of dearer."""
        first = 0
        if self.window is not None:
            first = max(first, start - self.window + 1)
        if self.chunk is not None:
            first = max(first, start // self.chunk * self.chunk)
        return first

    def _blocked_mask(self, q: Tensor, k: Tensor) -> Tensor:
        """0 | -inf of token indices ``q`` against ``k`` (broadcast): future keys, keys outside
        the window, keys outside the query's chunk (transformers' chunked mask, q // c ==
        k // c)."""
        blocked = k > q
        if self.window is not None:
            blocked = blocked | (q - k >= self.window)
        if self.chunk is not None:
            blocked = blocked | (q // self.chunk != k // self.chunk)
        return torch.zeros(blocked.shape, device=blocked.device).masked_fill(blocked, float("-inf"))

    def windowed(self, bias: Tensor, start: int, end: int, first: int = 0) -> Tensor:
        """``bias`` of queries [start, end) against keys [first, end) with the window's mask
        added (as is without one)."""
        mask = self.window_mask(start, end, first)
        return bias if mask is None else bias + mask

    def toeplitz_mask(self, start: int, end: int, first: int = 0) -> Tensor:
        """(1, H, t, end - first) view: bias + causal mask of queries [start, end) against the
        keys in reverse order (end-1 … first), entry [a, b'] = vec[distance (start+a) -
        (end-1-b')]; in a chunked layer the view plus the chunk's mask, materialised."""
        vec = self.distance_vector()
        H, L = vec.shape
        T = (L + 1) // 2
        t, width = end - start, end - first
        view = vec.as_strided((1, H, t, width), (H * L, L, 1, 1), vec.storage_offset() + T - t)
        if self.chunk is None:
            return view
        # a chunk is not a function of i - j alone: its mask is added, keys in reverse order
        q = torch.arange(start, end, device=vec.device)[:, None]
        keys = torch.arange(end - 1, first - 1, -1, device=vec.device)
        return view + self._blocked_mask(q, keys)

    def shared_bias(self, start: int, end: int) -> Tensor:
        """(1, H, t, end - first) position bias with the causal mask of queries [start, end)
        against keys [first, end) (``first_key``), computed by the first layer that asks and
        reused by the others."""
        hit = self._shared.get((start, end))
        if hit is not None:
            return hit
        first = self.first_key(start)
        bias = self.encoding.position_bias(self.pos_T[start:end], self.pos_T[first:end])
        mask = self.window_mask(start, end, first)
        bias = self.for_kernel(bias if mask is None else bias + mask)
        size = bias.numel() * bias.element_size()
        if self._shared_bytes + size <= SHARED_BIAS_BUDGET:
            self._shared[(start, end)] = bias
            self._shared_bytes += size
        return bias

    def for_kernel(self, bias: Tensor) -> Tensor:
        """A bias every layer reads, in the dtype an accelerator's fused kernel takes it: under
        autocast SDPA casts its mask to bf16 in each call, a copy of the whole bias per layer
        (a third of FIRE's evaluation time at 32k tokens on a GPU, docs/performance.md), so it
        is cast once here. On CPU the attention reads float32 (model/attention.py), and a bias
        to be trained goes to the explicit softmax in float32."""
        device = bias.device.type
        if self.on_cpu or bias.requires_grad or not torch.is_autocast_enabled(device):
            return bias
        return bias.to(torch.get_autocast_dtype(device))

    def key_bias(self, k_BHSE: Tensor, layer: int, inputs_BSD: Tensor) -> Tensor:
        """The encoding's (B, H, S) key term of a separable bias, over every position."""
        site = BiasSite(self.span, self.span, layer, self.cache, inputs_BSD)
        return self.encoding.key_bias(k_BHSE, site)

    def content_attention(
        self,
        start: int,
        end: int,
        qkv: tuple[Tensor, Tensor, Tensor],
        scale: float,
        layer: int,
        inputs_BsD: Tensor | None = None,
    ) -> Tensor:
        """The encoding's attention with its content bias for queries [start, end)."""
        keys = self.span.part(0, end)
        site = BiasSite(self.span.part(start, end), keys, layer, self.cache, inputs_BsD)
        return self.encoding.content_attention(*qkv, scale, site)

    def content_bias(
        self,
        start: int,
        end: int,
        q_BHtE: Tensor,
        k_BHsE: Tensor,
        layer: int,
        inputs_BsD: Tensor | None = None,
        first: int = 0,
    ) -> Tensor:
        """The encoding's content bias (causal mask folded in) for queries [start, end) against
        keys [first, end): keys from first > 0 are no prefix of the forward's, so they get key
        terms of their own (the shared ones are prefixes) and share the distance tables."""
        cache = self.cache if first == 0 else ForwardCache(self.span, self.cache.tables)
        site = BiasSite(
            self.span.part(start, end), self.span.part(first, end), layer, cache, inputs_BsD
        )
        bias = self.encoding.content_bias(q_BHtE, k_BHsE, site)
        assert bias.dim() == 4, "content_bias must return a 4-D (B, H, T, S) bias"
        return bias if bias.dtype == torch.float32 else bias.float()
