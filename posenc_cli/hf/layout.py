"""How posenc's TransformerLM weights sit in a Hugging Face Llama-style checkpoint.

posenc rotates the interleaved pairs (2k, 2k+1) of each head's first r dimensions;
transformers rotates the halves (k, k + r/2) of those r dimensions. Reordering the rows of the
query and key projections within each head by one permutation turns one layout into the
other; queries and keys are reordered alike, so every attention score is unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: posenc's name inside a block -> Llama's name inside a decoder layer.
LAYER_NAMES = {
    "ln1.weight": "input_layernorm.weight",
    "attn.q_proj.weight": "self_attn.q_proj.weight",
    "attn.k_proj.weight": "self_attn.k_proj.weight",
    "attn.v_proj.weight": "self_attn.v_proj.weight",
    "attn.output_proj.weight": "self_attn.o_proj.weight",
    "ln2.weight": "post_attention_layernorm.weight",
    "ffn.w1.weight": "mlp.gate_proj.weight",
    "ffn.w3.weight": "mlp.up_proj.weight",
    "ffn.w2.weight": "mlp.down_proj.weight",
}
#: posenc's name outside the blocks -> Llama's.
OUTER_NAMES = {
    "token_embeddings.weight": "model.embed_tokens.weight",
    "ln_final.weight": "model.norm.weight",
    "lm_head.weight": "lm_head.weight",
}
#: The projections whose rows are rotated.
ROTATED = ("attn.q_proj.weight", "attn.k_proj.weight")


def halves_order(head_dim: int, rotary_dims: int) -> Tensor:
    """For each dimension of the halves layout, the interleaved dimension it holds."""
    return torch.cat(
        [
            torch.arange(0, rotary_dims, 2),
            torch.arange(1, rotary_dims, 2),
            torch.arange(rotary_dims, head_dim),
        ]
    )


def reorder_heads(weight: Tensor, head_dim: int, order: Tensor) -> Tensor:
    """Rows of a (heads·head_dim, d_in) projection reordered within every head."""
    heads = weight.shape[0] // head_dim
    return weight.reshape(heads, head_dim, -1)[:, order].reshape(weight.shape).contiguous()


def to_halves(weight: Tensor, head_dim: int, rotary_dims: int) -> Tensor:
    return reorder_heads(weight, head_dim, halves_order(head_dim, rotary_dims))


def to_pairs(weight: Tensor, head_dim: int, rotary_dims: int) -> Tensor:
    return reorder_heads(weight, head_dim, torch.argsort(halves_order(head_dim, rotary_dims)))


def llama_state(
    state: dict[str, Tensor], n_layers: int, head_dim: int, rotary_dims: int
) -> dict[str, Tensor]:
    """posenc's state dict under Llama's names, q and k rows in the halves layout."""
    out = {hf: state[ours].contiguous() for ours, hf in OUTER_NAMES.items()}
    for i in range(n_layers):
        for ours, hf in LAYER_NAMES.items():
            w = state[f"layers.{i}.{ours}"]
            if ours in ROTATED:
                w = to_halves(w, head_dim, rotary_dims)
            out[f"model.layers.{i}.{hf}"] = w.contiguous()
    return out


def phi3_state(llama: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """A Llama state dict with Phi-3's fused projections (qkv_proj, gate_up_proj)."""
    out = dict(llama)
    for i in range(n_layers):
        p = f"model.layers.{i}."
        q, k, v = (out.pop(f"{p}self_attn.{n}_proj.weight") for n in "qkv")
        out[f"{p}self_attn.qkv_proj.weight"] = torch.cat([q, k, v])
        gate = out.pop(f"{p}mlp.gate_proj.weight")
        up = out.pop(f"{p}mlp.up_proj.weight")
        out[f"{p}mlp.gate_up_proj.weight"] = torch.cat([gate, up])
    return out
