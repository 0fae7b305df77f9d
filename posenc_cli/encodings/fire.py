"""FIRE (Li et al., ICLR 2024, "Functional Interpolation for Relative Positions Improves Long
Context Transformers"): a learned function of the *normalised* distance.

bias_h(i, j) = f_θ(ψ(i - j) / ψ(max(L, i)))_h with ψ(x) = log(|c·x| + 1): dividing by the
query's own ψ maps every distance into [0, 1] whatever the length (progressive
interpolation), and the threshold L keeps short prefixes from being stretched. f_θ is the
paper's MLP 1 -> 32 -> H with ReLU; c starts at 0.1 and L at 512 (L = |s·512| with s a learned
scale starting at 1), as in the paper's listing, all learned.

Shared by every layer (as T5's table and KERPLE's kernels are here): the bias depends on both
positions, not on i - j alone, so it is materialised per query chunk (``pair_bias``) — once
per forward, not once per layer. The paper also trains per-layer FIRE; sharing keeps the
comparison with the other learned biases like for like.

The MLP is never run over the (T, S) pairs: with a scalar input and ReLU, f_θ is exactly
piecewise linear, with a kink where a hidden unit switches (u = -b_k/w_k). ``pieces`` turns
the weights into one slope and one intercept per piece and head (differentiably, for every
parameter), so a pair costs a bucket search and one multiply-add per head instead of a
hidden layer of 32 — the same function, not an approximation (tests/unit/encodings).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc_cli.encodings.base import PositionalEncoding

#: Added to the normaliser ψ(max(L, i)), as in the paper's listing.
FIRE_EPS = 1e-6


class FireEncoding(PositionalEncoding):
    """A learned MLP of the log-normalised distance, one output per head."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        n_layers: int,
        hidden: int = 32,
        c: float = 0.1,
        threshold: float = 512.0,
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.mlp = nn.Sequential(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, n_heads))
        self.hidden = hidden
        self.c = nn.Parameter(torch.tensor(float(c)))
        self.register_buffer("init_threshold", torch.tensor(float(threshold)))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))

    #: Bias-sized tensors ``pair_bias`` holds at once without autograd, when the bias is
    #: written head by head (``_written``): the bias itself, plus per-pair tensors shared by
    #: the heads (the distances, their pieces and one head's slopes), a fraction of it.
    #: Under autograd the gathered slopes of every head exist too, within its larger budget.
    bias_buffers = 1

    @property
    def compute_dtype(self) -> torch.dtype:
        """float32, or float64 for a float64 model (exactness tests): never below float32."""
        return torch.promote_types(self.c.dtype, torch.float32)

    def psi(self, x: Tensor) -> Tensor:
        return torch.log(torch.abs(self.c.to(self.compute_dtype) * x) + 1)

    @property
    def threshold(self) -> Tensor:
        return (self.threshold_scale.to(self.compute_dtype) * self.init_threshold).abs()

    def normalised_distance(self, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """(T, S) ψ(i - j)/(ψ(max(L, i)) + ε), with i - j clamped at 0 above the diagonal."""
        i, j = pos_T.to(self.compute_dtype)[:, None], pos_S.to(self.compute_dtype)[None, :]
        return self.psi((i - j).clamp(min=0)) / (
            self.psi(torch.maximum(i, self.threshold)) + FIRE_EPS
        )

    def pieces(self) -> tuple[Tensor, Tensor, Tensor]:
        """f_θ as pieces: sorted kinks (N,) and per-piece slopes and intercepts (H, N + 1),
        so f_θ(u) = slope[:, p]·u + intercept[:, p] with p = bucketize(u, kinks). A unit is
        on in a piece when it is on at the piece's midpoint (a unit with w_k = 0 when
        b_k > 0), which is the ReLU's own derivative anywhere inside the piece."""
        first = self.mlp[0]
        second = self.mlp[2]
        w = first.weight[:, 0].to(self.compute_dtype)
        b = first.bias.to(self.compute_dtype)
        kinks = torch.sort((-b / w)[w != 0].detach()).values
        mids = kinks.new_zeros(1)
        if kinks.numel():
            pad = 1 + kinks[[0, -1]].abs()
            mids = torch.cat(
                [kinks[:1] - pad[0], (kinks[:-1] + kinks[1:]) / 2, kinks[-1:] + pad[1]]
            )
        on = (mids[:, None] * w.detach() + b.detach() > 0).to(w.dtype)  # (N + 1, hidden)
        out = second.weight.to(self.compute_dtype)
        slope = (on * w) @ out.T
        intercept = (on * b) @ out.T + second.bias.to(self.compute_dtype)
        return kinks, slope.T, intercept.T

    def pair_bias(self, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """In float32 even under autocast: bf16 would merge the normalised distances of far
        keys (a few hundred distinct values among thousands) and the gradients of c and L."""
        return self._piecewise(pos_T, pos_S, causal=False)

    def position_bias(self, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """``pair_bias`` with the causal mask folded into the pieces: a key after its query
        falls in one more piece, of slope 0 and intercept -inf, which saves a masking pass
        over every head."""
        return self._piecewise(pos_T, pos_S, causal=True).float().unsqueeze(0)

    def _piecewise(self, pos_T: Tensor, pos_S: Tensor, causal: bool) -> Tensor:
        """(H, T, S): one piece per pair, one multiply-add per pair and head."""
        with torch.autocast(pos_T.device.type, enabled=False):
            u = self.normalised_distance(pos_T, pos_S)
            kinks, slope, intercept = self.pieces()
            if causal:
                slope = torch.cat([slope, slope.new_zeros(slope.shape[0], 1)], 1)
                intercept = torch.cat(
                    [intercept, intercept.new_full((slope.shape[0], 1), float("-inf"))], 1
                )
            if not torch.is_grad_enabled():
                first_after = torch.searchsorted(pos_S, pos_T, right=True) if causal else None
                return _written(intercept, slope, row_pieces(u, kinks, first_after), u)
            piece = torch.bucketize(u.detach(), kinks)
            if causal:
                piece.masked_fill_(pos_S[None, :] > pos_T[:, None], kinks.numel() + 1)
            piece = piece.flatten()
            shape = (slope.shape[0], *u.shape)
            bias = intercept.index_select(1, piece).view(shape)
            return bias.addcmul_(slope.index_select(1, piece).view(shape), u)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, shared across layers"


def row_pieces(u: Tensor, kinks: Tensor, first_after: Tensor | None) -> Tensor:
    """(T, S) int64 piece of every pair, bucketize(u, kinks) computed row by row; with
    ``first_after`` (T,), the index of each query's first later key, those keys and the ones
    after it get the extra masked piece N + 1.

    Why: keys come in increasing positions, so along a row u only decreases and the pairs
    past kink k are a prefix of it. One binary search per row and kink finds where each
    prefix ends; the piece of a pair is the number of prefixes that contain it, which a
    cumulative sum of -1 at each end (from N at the row's start) counts. A bucket search per
    pair cost more than the multiply-adds of all heads (docs/performance.md).
    """
    T, S = u.shape
    N = kinks.numel()
    ends = torch.searchsorted(u.neg(), kinks.neg().expand(T, N).contiguous())  # (T, N)
    steps = torch.zeros(T, S, dtype=torch.int64, device=u.device)
    steps[:, 0] = N
    inside = ends < S  # a prefix of the whole row changes no piece
    steps.scatter_add_(1, ends.clamp(max=S - 1), -inside.long())
    if first_after is not None:
        # past the query u = 0, so every later prefix end is S: after first_after the piece
        # stays N - #{ends <= first_after}, which one step lifts to N + 1
        at = first_after[:, None]
        kept = N - (ends <= at).sum(1, keepdim=True)
        steps.scatter_add_(1, at.clamp(max=S - 1), (N + 1 - kept) * (at < S))
    return steps.cumsum_(1)


def _written(intercept: Tensor, slope: Tensor, piece: Tensor, u: Tensor) -> Tensor:
    """(H, T, S) intercept[piece] + slope[piece]·u written into the bias head by head, so that
    no second bias-sized tensor exists: evaluation's chunks can be twice as tall for the same
    memory, and the fused kernel is faster on taller chunks (docs/performance.md). Each piece's
    intercept and slope are one complex number, so a pair costs one gather, not two."""
    table = torch.view_as_complex(torch.stack([intercept, slope], -1))  # (H, N + 1)
    bias = u.new_empty(slope.shape[0], *u.shape)
    flat_u, flat_piece = u.flatten(), piece.flatten()
    pair = table.new_empty(flat_piece.numel())
    parts = torch.view_as_real(pair)
    for head, out in enumerate(bias.view(slope.shape[0], -1)):
        torch.index_select(table[head], 0, flat_piece, out=pair)
        torch.addcmul(parts[:, 0], parts[:, 1], flat_u, out=out)
    return bias
