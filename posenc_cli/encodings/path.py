"""PaTH (Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating Householder
Transformations"): positions as a product of data-dependent transforms along the path.

The logit of query i on key j is q_iᵀ H_i H_{i-1} ⋯ H_{j+1} k_j (the identity for j = i), with
H_t = I - β_t w_t w_tᵀ per layer and head, both read from the layer's normalised input x_t, as
in the authors' layer (flash-linear-attention, fla/layers/path_attn.py): w_t from a low-rank
projection D -> ``w_rank`` -> H·E (null: one full D -> H·E map), a causal depthwise
convolution of width ``conv_width`` with SiLU (0: neither), then unit length per head;
β_t = 2σ(u·x_t + b). Weights start N(0, 0.02²), biases 0, as in their model. No other position
information enters: the logits depend on the tokens and their order only (shift-invariant).
With grouped keys (model.n_kv_heads) each query head has its own w_t and β_t here; the
authors' layer shares them within a key head.

H_t is symmetric with eigenvalues 1 (multiplicity E-1, on w_t's orthogonal complement) and
1 - β_t (on w_t). It is orthogonal only when β_t is 0 or 2 (HᵀH = I - β(2-β) w wᵀ); β in the
open interval (0, 2) makes it a contraction along w_t, never a rotation, so no product ever
grows a vector (spectral norm 1). With w = 0 or β = 0 every H_t is I and PaTH is `none`.

In posenc's interface PaTH is a content bias, bias_ij = scale·(q_iᵀ H_i ⋯ H_{j+1} k_j - q_i·k_j),
so that scale·q·k + bias is exactly PaTH's scaled logit for every reader of logits (`posenc
inspect`, the reference tests). The model's attention instead calls ``content_attention``,
which forms softmax(scale·PaTH logits)·v directly, without the difference. Log-n query
scaling would multiply only the q·k part of such a logit, so PaTH refuses it
(``scales_with_queries``). The logits come from the blockwise form in
encodings/householder.py, through autograd; the keys' blocks are computed once per forward
and layer and sliced for the shorter query chunks.

``forget_gate`` adds PaTH-FoX's decay: Σ_{l=j+1..i} log σ(g·x_l + c) is added to the logit
before the softmax scale, as the authors' kernel does (scaled, unlike `fox`'s bias).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc_cli.common.rules import Rule
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.householder import KeyBlocks, key_blocks, path_attention, path_scores
from posenc_cli.encodings.per_layer import PerLayer
from posenc_cli.encodings.site import BiasSite
from posenc_cli.nn.split_attention import merges_far_keys

#: Standard deviation of every PaTH weight at initialisation (the authors' initializer_range).
INIT_STD = 0.02


class Projections(nn.Module):
    """One layer's maps from its input x_t to the Householder vector w_t, β_t and, for
    PaTH-FoX, the forget gate."""

    def __init__(
        self, d_model: int, n_heads: int, head_dim: int, rank: int | None, width: int, gated: bool
    ) -> None:
        super().__init__()
        inner = n_heads * head_dim
        self.n_heads = n_heads
        self.down = nn.Linear(d_model, rank, bias=False) if rank is not None else None
        self.up = nn.Linear(rank or d_model, inner, bias=False)
        self.conv = nn.Conv1d(inner, inner, width, groups=inner, bias=False) if width else None
        self.beta = nn.Linear(d_model, n_heads)
        self.gate = nn.Linear(d_model, n_heads) if gated else None
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Conv1d):
                nn.init.normal_(module.weight, std=INIT_STD)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def vectors(self, x_BSD: Tensor) -> Tensor:
        """(B, H, S, E) w_t: low rank, short causal convolution and SiLU, unit length per head
        (0 where the projection is 0, so such a transform is the identity)."""
        u = x_BSD if self.down is None else linear(self.down, x_BSD)
        u = linear(self.up, u)
        if self.conv is not None:
            width = self.conv.kernel_size[0]
            weight = self.conv.weight.to(u.dtype)
            u = F.silu(F.conv1d(F.pad(u.mT, (width - 1, 0)), weight, groups=u.shape[-1])).mT
        B, S, _ = u.shape
        return F.normalize(u.view(B, S, self.n_heads, -1).transpose(1, 2), dim=-1)

    def betas(self, x_BSD: Tensor) -> Tensor:
        """(B, H, S) β_t = 2σ(u·x_t + b) in (0, 2): negative eigenvalues allowed."""
        return 2 * torch.sigmoid(linear(self.beta, x_BSD)).transpose(1, 2)

    def decay(self, x_BSD: Tensor) -> Tensor | None:
        """(B, H, S) cumulative log forget gates Σ_{l<=t} log σ(g·x_l + c), float64 (float32 on
        a device without it): a long sum whose nearby differences must survive; None without
        the gate."""
        if self.gate is None:
            return None
        wide = torch.float32 if x_BSD.device.type == "mps" else torch.float64
        return F.logsigmoid(linear(self.gate, x_BSD)).transpose(1, 2).cumsum(-1, dtype=wide)


def linear(layer: nn.Linear, x: Tensor) -> Tensor:
    """``layer(x)`` in x's dtype (float32 at least), whatever the parameters' dtype."""
    bias = None if layer.bias is None else layer.bias.to(x.dtype)
    return F.linear(x, layer.weight.to(x.dtype), bias)


@dataclass(frozen=True)
class KeySide:
    """One layer's key blocks for one forward, with the tensors they were computed from (kept
    alive, so no other tensor can take their addresses while the entry is trusted)."""

    keys: Tensor
    inputs: Tensor
    blocks: KeyBlocks
    decay: Tensor | None

    def serves(self, k_BHSE: Tensor, inputs_BSD: Tensor) -> bool:
        """The same keys and inputs, or a prefix of them (a shorter query chunk)."""
        return (
            k_BHSE.data_ptr() == self.keys.data_ptr()
            and k_BHSE.stride() == self.keys.stride()
            and k_BHSE.dtype == self.keys.dtype
            and k_BHSE.shape[-2] <= self.keys.shape[-2]
            and inputs_BSD.data_ptr() == self.inputs.data_ptr()
            and inputs_BSD.stride() == self.inputs.stride()
        )


class PathEncoding(PositionalEncoding):
    """Per-layer, per-head accumulated Householder transforms between each key and query."""

    relative = True
    bias_buffers = 2
    scales_with_queries = False
    bias_from_any_key = False

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: Annotated[int, Rule(lo=2)],
        n_layers: int,
        w_rank: Annotated[int | None, Rule(lo=1)],
        conv_width: Annotated[int, Rule(lo=0)],
        forget_gate: bool,
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.w_rank = w_rank
        self.conv_width = conv_width
        self.forget_gate = forget_gate
        #: Positions per block of the blockwise products (any size gives the same logits): E,
        #: at least 16, was the fastest on a CPU at E = 32 (of 16, 32 and 64), in training
        #: at 128 tokens and in evaluation at 2048; tests set other sizes.
        self.block = max(16, head_dim)
        self.transforms = PerLayer(
            n_layers,
            lambda: Projections(d_model, n_heads, head_dim, w_rank, conv_width, forget_gate),
        )

    def key_side(self, k_BHSE: Tensor, site: BiasSite) -> KeySide:
        """The key blocks of ``site`` (its keys and the layer's input), computed once per
        forward and layer and reused by the shorter chunks; afresh while tracing. Only the
        latest layer's are kept: a forward goes layer by layer, and every layer's blocks
        (6E floats per key and head) would add up over a long evaluation."""
        x = site.inputs
        if x is None:
            raise ValueError("path needs the layer's input (BiasSite.inputs)")
        hit = site.cache.tables.get(site.layer)
        tracing = self.tracing()
        if not tracing and isinstance(hit, KeySide) and hit.serves(k_BHSE, x):
            return hit
        proj = self.transforms[site.layer]
        k = k_BHSE.to(torch.promote_types(k_BHSE.dtype, torch.float32))
        x_wide = x.to(k.dtype)
        blocks = key_blocks(k, proj.vectors(x_wide), proj.betas(x_wide), self.block)
        side = KeySide(k_BHSE, x, blocks, proj.decay(x_wide))
        if not tracing:
            tables = site.cache.tables
            for layer in [n for n, entry in tables.items() if isinstance(entry, KeySide)]:
                del tables[layer]
            tables[site.layer] = side
        return side

    def scores(self, q_BHtE: Tensor, k_BHSE: Tensor, scale: float, site: BiasSite) -> Tensor:
        """(B, H, t, W) scaled PaTH logits (plus PaTH-FoX's decay, scaled too) of the chunk's
        queries, which end with the S keys, over W >= S columns (whole blocks), -inf wherever
        j > i; in q's dtype, float32 at least (float64 stays float64). k is the model's own
        tensor, which the key blocks are cached by."""
        side = self.key_side(k_BHSE, site)
        t, S = q_BHtE.shape[-2], k_BHSE.shape[-2]
        scores = path_scores(q_BHtE * scale, side.blocks, S - t, S)
        if side.decay is not None:
            c = side.decay[..., :S] * scale
            scores[..., :S] += (c[..., S - t :, None] - c[..., None, :]).to(scores.dtype)
        return scores

    def content_bias(self, q_BHTE: Tensor, k_BHSE: Tensor, site: BiasSite) -> Tensor:
        """scale·(PaTH logit - q·k), -inf where j > i: added to scale·q·k it is PaTH's logit."""
        wide = torch.promote_types(q_BHTE.dtype, torch.float32)
        scale = self.softmax_scale(self.head_dim)
        with torch.autocast(q_BHTE.device.type, enabled=False):
            q = q_BHTE.to(wide)
            bias = (q * -scale) @ k_BHSE.to(wide).mT  # then in place: two (B, H, t, S) at most
            return bias.add_(self.scores(q, k_BHSE, scale, site)[..., : k_BHSE.shape[-2]])

    def content_attention(
        self, q_BHTE: Tensor, k_BHSE: Tensor, v_BHSE: Tensor, scale: float, site: BiasSite
    ) -> Tensor:
        """softmax(scale·PaTH logits)·v for the chunk, in float32 at least. Under autograd (and
        with the forget gate, or off the CPU) the logits are formed and go through the softmax;
        in a CPU evaluation they never are: the key blocks go through the flash kernel, merged
        by their log-sum-exp (``path_attention``)."""
        wide = torch.promote_types(q_BHTE.dtype, torch.float32)
        t, S = q_BHTE.shape[-2], k_BHSE.shape[-2]
        with torch.autocast(q_BHTE.device.type, enabled=False):
            q = q_BHTE.to(wide)
            side = self.key_side(k_BHSE, site)
            if side.decay is None and not torch.is_grad_enabled() and merges_far_keys(q):
                v = v_BHSE.to(wide)
                return path_attention(q * scale, v, side.blocks, S - t).to(v_BHSE.dtype)
            weights = torch.softmax(self.scores(q, k_BHSE, scale, site), dim=-1)
            return weights[..., :S].to(v_BHSE.dtype) @ v_BHSE

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, w_rank={self.w_rank}, conv_width={self.conv_width}, "
            f"forget_gate={self.forget_gate}"
        )
