"""CoPE (Golovneva et al. 2024, "Contextual Position Encoding"): positions counted by the
content, not by the tokens.

Each query gates every earlier key, g_ij = σ(q_i·k_j/√E) (the scaled, masked logits, as in
the paper's code); the position of key j seen from query i is the number of gated keys between
them, p_ij = Σ_{t=j..i} g_it (a real number, clamped at max_position - 1); the logit gains
q_i·e[p_ij], interpolated between the embeddings of ⌊p⌋ and ⌈p⌉. The embeddings e (E x
max_position) start at zero and are learned per layer, shared by its heads.

No absolute position enters anywhere, so attention is shift-invariant. The bias depends on q
and k: a ``content_bias``, materialised per layer and query chunk (in evaluation, for the
masked fused kernel, or, on CPU, for the near keys only: past the clamp the bias is one number
per row, and the far keys go through the unmasked kernel, nn/split_attention.py); in
training ``ContextualAttention`` computes the bias and the attention in one node
(``content_attention``). The kernels are in encodings/contextual.py; with
train.attention=flex, where Triton runs, one fused kernel does all of it with no (T, S)
block (encodings/contextual_fused.py).
"""

from __future__ import annotations

from typing import Annotated, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc_cli.common.rules import Rule
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.contextual import (
    ContextualAttention,
    ContextualBias,
    future_bias,
    gate_values,
    near_scores,
)
from posenc_cli.encodings.per_layer import PerLayer
from posenc_cli.encodings.site import BiasSite
from posenc_cli.nn.fused_kernels import triton_runs
from posenc_cli.nn.split_attention import merges_far_keys, split_attention


class CopeEncoding(PositionalEncoding):
    """Gated, content-counted positions with interpolated position embeddings."""

    relative = True
    bias_buffers = 6
    fuses_scaled_queries = False

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        n_layers: int,
        max_position: Annotated[int, Rule(lo=2)],
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.max_position = max_position
        self.embeddings = PerLayer(
            n_layers, lambda: nn.Parameter(torch.zeros(head_dim, max_position))
        )

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        """Runs saved before the tables were one parameter per layer hold every layer in one
        (L, E, max_position) tensor: read it into the layers, so their checkpoints still load."""
        tables = state_dict.get(prefix + "embeddings")
        if isinstance(tables, Tensor) and tables.dim() == 3 and len(tables) == self.n_layers:
            del state_dict[prefix + "embeddings"]
            for layer, table in enumerate(tables):
                state_dict[f"{prefix}embeddings.{layer}"] = table
        super()._load_from_state_dict(state_dict, prefix, *args)

    def positions(self, q_BHTE: Tensor, k_BHSE: Tensor) -> Tensor:
        """(B, H, T, S) contextual positions p_ij (0 where j > i), before clamping; in float32
        even under autocast (a sum of up to S gates)."""
        with torch.autocast(q_BHTE.device.type, enabled=False):
            q, k = q_BHTE.float(), k_BHSE.float()
            future = future_bias(q.shape[-2], k.shape[-2], q)
            gates = gate_values(q, k, self.softmax_scale(self.head_dim), future)
            return gates.flip(-1).cumsum(-1).flip(-1)

    def content_bias(self, q_BHTE: Tensor, k_BHSE: Tensor, site: BiasSite) -> Tensor:
        wide = torch.promote_types(q_BHTE.dtype, torch.float32)
        with torch.autocast(q_BHTE.device.type, enabled=False):
            return ContextualBias.apply(
                q_BHTE.to(wide),
                k_BHSE.to(wide),
                self.embeddings[site.layer].to(wide),
                self.softmax_scale(self.head_dim),
            )

    def fuses_attention(self, device: torch.device) -> bool:
        return triton_runs(device)

    def fused_attention(
        self, q_BHTE: Tensor, k_BHTE: Tensor, v_BHTE: Tensor, scale: float, layer: int
    ) -> Tensor:
        """The Triton kernel of encodings/contextual_fused.py, forward and backward."""
        from posenc_cli.encodings.contextual_fused import fused_contextual_attention

        return fused_contextual_attention(q_BHTE, k_BHTE, v_BHTE, self.embeddings[layer], scale)

    def content_attention(
        self, q_BHTE: Tensor, k_BHSE: Tensor, v_BHSE: Tensor, scale: float, site: BiasSite
    ) -> Tensor:
        """Training: ``ContextualAttention``. Evaluation on CPU: the near keys' scores and the
        far keys (one bias per row past the clamp) through the fused kernel, merged by
        their log-sum-exp (nn/split_attention.py); elsewhere the whole bias as a mask."""
        q, k, v = q_BHTE, k_BHSE, v_BHSE
        with torch.autocast(q.device.type, enabled=False):
            emb = self.embeddings[site.layer].to(q.dtype)
            if torch.is_grad_enabled():
                return ContextualAttention.apply(q, k, v, emb, scale)
            if merges_far_keys(q):
                near, lo, far_bias = near_scores(q, k, emb, scale)
                far = (k[..., :lo, :], v[..., :lo, :], far_bias)
                return split_attention(q, far, (near, v[..., lo:, :].flip(-2)), scale)
            bias = self.content_bias(q, k, site).to(q.dtype)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_position={self.max_position}"
