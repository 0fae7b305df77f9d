"""FoX, the Forgetting Transformer (Lin et al., ICLR 2025): attention that forgets.

Each layer and head has a forget gate f_t = σ(w·x_t + b) computed from the layer's normalised
input x_t; the logit of query i on key j gains Σ_{l=j+1..i} log f_l = c_i - c_j with
c_t = Σ_{l<=t} log f_l — a data-dependent, monotone decay with distance (0 on the diagonal).
No other position information (the paper's FoX uses no RoPE); this is the basic FoX of the
paper, without the "Pro" block's QK-norm, token shift and output gate. w ~ N(0, 0.02²) and
b = 0 at initialisation, as in the authors' code; log σ is taken directly, in float32.

The bias is c_i - c_j, separable in query and key: c_i is constant along a softmax row, so
attention adds only v_j = -c_j (``key_bias``), folded into the fused kernel as one more key
dimension (model/folded.py) — no (B, H, T, S) tensor, forward or backward. c is summed in
float64: at 32k tokens it reaches tens of thousands, and float32 would keep differences of
nearby keys to only ~1e-3. ``content_bias`` materialises c_i - c_j for the readers of logits
(`posenc inspect`); its cumulative sum is computed once per forward and sliced per chunk.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.per_layer import PerLayer
from posenc_cli.encodings.relative import mask_future_
from posenc_cli.encodings.site import BiasSite

#: Standard deviation of the gate weights at initialisation (the authors' initializer_range).
GATE_INIT_STD = 0.02


def forget_gate(d_model: int, n_heads: int) -> nn.Linear:
    """One layer's gates: the bias is a vector, which AdamW does not decay."""
    gate = nn.Linear(d_model, n_heads)
    nn.init.normal_(gate.weight, std=GATE_INIT_STD)
    nn.init.zeros_(gate.bias)
    return gate


class ForgettingEncoding(PositionalEncoding):
    """Per-layer, per-head forget gates whose cumulative log is the attention bias."""

    relative = True
    bias_buffers = 2

    def __init__(self, d_model: int, n_heads: int, head_dim: int, n_layers: int) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.gates = PerLayer(n_layers, lambda: forget_gate(d_model, n_heads))

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        """Runs saved before the gates were one nn.Linear per layer hold every layer in two
        tensors, gate_weight (L, D, H) and gate_bias (L, H): read them into the layers, so
        their checkpoints still load (`posenc eval`, `posenc inspect`)."""
        weight = state_dict.get(prefix + "gate_weight")
        bias = state_dict.get(prefix + "gate_bias")
        if (
            isinstance(weight, Tensor)
            and isinstance(bias, Tensor)
            and weight.dim() == 3
            and bias.dim() == 2
            and len(weight) == len(bias) == self.n_layers
        ):
            del state_dict[prefix + "gate_weight"], state_dict[prefix + "gate_bias"]
            for layer in range(len(weight)):
                state_dict[f"{prefix}gates.{layer}.weight"] = weight[layer].transpose(0, 1)
                state_dict[f"{prefix}gates.{layer}.bias"] = bias[layer]
        super()._load_from_state_dict(state_dict, prefix, *args)

    def log_forget(self, x_BSD: Tensor, layer: int) -> Tensor:
        """(B, H, S) log f_t of every position of ``x``, in float32 at least even under
        autocast: the cumulative sum over thousands of positions would lose the bias in bf16."""
        gate = self.gates[layer]
        dtype = torch.promote_types(x_BSD.dtype, torch.float32)
        with torch.autocast(x_BSD.device.type, enabled=False):
            logit = F.linear(x_BSD.to(dtype), gate.weight.to(dtype), gate.bias.to(dtype))
            return F.logsigmoid(logit).transpose(1, 2)

    def cumulative_log_forget(self, site: BiasSite) -> Tensor:
        """(B, H, S) c of the keys of ``site``, float64 (float32 where the device has no
        float64), computed once per forward and layer and sliced for shorter chunks."""
        if site.inputs is None:
            raise ValueError("fox needs the layer's input (BiasSite.inputs)")
        S = site.keys.length
        cum = site.cache.key_terms.get(site.layer)
        if cum is None or cum.shape[-1] < S:
            wide = torch.float32 if site.inputs.device.type == "mps" else torch.float64
            cum = self.log_forget(site.inputs, site.layer).cumsum(-1, dtype=wide)
            site.cache.key_terms[site.layer] = cum
        return cum[..., :S]

    def key_bias(self, k_BHSE: Tensor, site: BiasSite) -> Tensor:
        return self.cumulative_log_forget(site).neg()

    def content_bias(self, q_BHTE: Tensor, k_BHSE: Tensor, site: BiasSite) -> Tensor:
        c = self.cumulative_log_forget(site)
        T, S = site.queries.length, c.shape[-1]
        bias = (c[..., S - T :, None] - c[..., None, :]).to(
            torch.promote_types(q_BHTE.dtype, torch.float32)
        )
        return mask_future_(bias)
