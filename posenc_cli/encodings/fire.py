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
hidden layer of 32 — the same function, not an approximation (tests/unit/encodings). Without
autograd the pieces are found per row and tile of keys instead of per pair
(encodings/piecewise.py), with the same values to the bit.
"""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor, nn

from posenc_cli.common.rules import Rule
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.parameters import POSITIVE
from posenc_cli.encodings.piecewise import piecewise_bias, tile_keys
from posenc_cli.encodings.relative import largest_distance
from posenc_cli.encodings.site import BiasSite, ScoreBias

#: Added to the normaliser ψ(max(L, i)), as in the paper's listing.
FIRE_EPS = 1e-6


class FireEncoding(PositionalEncoding):
    """A learned MLP of the log-normalised distance, one output per head."""

    init_threshold: Tensor

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        n_layers: int,
        hidden: Annotated[int, Rule(lo=1)],
        c: Annotated[float, POSITIVE],
        threshold: Annotated[float, POSITIVE],
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.mlp = nn.Sequential(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, n_heads))
        self.c = nn.Parameter(torch.tensor(float(c)))
        self.register_buffer("init_threshold", torch.tensor(float(threshold)))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))

    #: Bias-sized tensors ``pair_bias`` holds at once without autograd, when the bias is
    #: written by tiles (``_tiled``): the bias itself, plus the distances shared by the heads,
    #: a fraction of it. Under autograd the gathered slopes of every head exist too, within
    #: its larger budget.
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

    def pieces(self, causal: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """f_θ as pieces: sorted kinks (N,) and per-piece intercepts and slopes (H, N + 1),
        so f_θ(u) = intercept[:, p] + slope[:, p]·u with p = bucketize(u, kinks). A unit is
        on in a piece when it is on at the piece's midpoint (a unit with w_k = 0 when
        b_k > 0), which is the ReLU's own derivative anywhere inside the piece. ``causal``
        adds piece N + 1 for keys after the query: slope 0, intercept -inf."""
        first, second = self.mlp[0], self.mlp[2]
        assert isinstance(first, nn.Linear) and isinstance(second, nn.Linear)
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
        slope = ((on * w) @ out.T).T
        intercept = ((on * b) @ out.T + second.bias.to(self.compute_dtype)).T
        if causal:
            slope = torch.cat([slope, slope.new_zeros(slope.shape[0], 1)], 1)
            intercept = torch.cat([intercept, torch.full_like(slope[:, :1], float("-inf"))], 1)
        return kinks, intercept, slope

    def pair_bias(self, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """In float32 even under autocast: bf16 would merge the normalised distances of far
        keys (a few hundred distinct values among thousands) and the gradients of c and L."""
        return self._piecewise(pos_T, pos_S, causal=False)

    def position_bias(self, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """``pair_bias`` with the causal mask folded into the pieces: a key after its query
        falls in one more piece, of slope 0 and intercept -inf, which saves a masking pass
        over every head."""
        return self._piecewise(pos_T, pos_S, causal=True).float().unsqueeze(0)

    def score_bias(self, q_BHtE: Tensor, k_BHSE: Tensor, site: BiasSite) -> ScoreBias:
        """f_θ per score from its pieces (for FlexAttention): u = ψ(d) / (ψ(max(L, i)) + ε)
        from a table per distance and one per query, the piece as the number of kinks below u
        (``bucketize``'s rule, one comparison per kink), then one multiply-add; nothing of size
        (T, S) is held. Everything the kernel reads is a tensor it indexes (a trained scalar
        used directly has no compiled backward), in float32 even under autocast."""
        with torch.autocast(site.queries.device.type, enabled=False):
            kinks, intercept, slope = self.pieces()
            dtype = self.compute_dtype
            i = site.queries.positions().to(dtype)
            norm = self.psi(torch.maximum(i, self.threshold)) + FIRE_EPS
            hi = largest_distance(site)
            psi_d = self.psi(torch.arange(hi + 1, device=i.device, dtype=dtype))

        def bias(b: Tensor, h: Tensor, q: Tensor, k: Tensor, d: Tensor) -> Tensor:
            u = psi_d[d.clamp(0, hi)] / norm[q]
            piece = torch.zeros_like(d)
            for kink in kinks:
                piece = piece + (u > kink).to(d.dtype)
            return intercept[h, piece] + slope[h, piece] * u

        return bias

    def _piecewise(self, pos_T: Tensor, pos_S: Tensor, causal: bool) -> Tensor:
        """(H, T, S): one piece per pair, one multiply-add per pair and head."""
        with torch.autocast(pos_T.device.type, enabled=False):
            if not torch.is_grad_enabled():
                return self._tiled(pos_T, pos_S, causal)
            u = self.normalised_distance(pos_T, pos_S)
            kinks, intercept, slope = self.pieces(causal)
            piece = torch.bucketize(u.detach(), kinks)
            if causal:
                piece.masked_fill_(pos_S[None, :] > pos_T[:, None], kinks.numel() + 1)
            piece = piece.flatten()
            shape = (slope.shape[0], *u.shape)
            bias = intercept.index_select(1, piece).view(shape)
            return bias.addcmul_(slope.index_select(1, piece).view(shape), u)

    def _tiled(self, pos_T: Tensor, pos_S: Tensor, causal: bool) -> Tensor:
        """``_piecewise`` without autograd, by tiles of keys (encodings/piecewise.py): the keys
        are padded to whole tiles with later positions, which the view returned leaves out."""
        pad = tile_keys(pos_S.numel()) - pos_S.numel()
        padded = torch.cat([pos_S, pos_S[-1] + 1 + torch.arange(pad, device=pos_S.device)])
        u = self.normalised_distance(pos_T, padded)
        first_after = torch.searchsorted(pos_S, pos_T, right=True) if causal else None
        bias = piecewise_bias(u, *self.pieces(causal), first_after)
        return bias[..., : pos_S.numel()]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, shared across layers"
