"""TransformerLM: the CS336 pre-norm decoder. Knows nothing about any particular encoding."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.model.attention import DEFAULT_BIAS_BUDGET, AttentionContext, CausalSelfAttention
from posenc_cli.model.layers import Embedding, Linear, RMSNorm, SwiGLU, default_d_ff


class TransformerBlock(nn.Module):
    """x + attn(ln1(x)), then x + ffn(ln2(x))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, layer: int) -> None:
        super().__init__()
        self.ln1 = RMSNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, layer)
        self.ln2 = RMSNorm(d_model)
        self.ffn = SwiGLU(d_model, d_ff)

    def forward(self, x_BTD: Tensor, ctx: AttentionContext) -> Tensor:
        x_BTD = x_BTD + self.attn(self.ln1(x_BTD), ctx)
        return x_BTD + self.ffn(self.ln2(x_BTD))


class TransformerLM(nn.Module):
    """Token embedding -> encoding.embed -> blocks -> RMSNorm -> untied LM head."""

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, n_heads: int,
                 d_ff: int | None, encoding: PositionalEncoding) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.token_embeddings = Embedding(vocab_size, d_model)
        self.encoding = encoding
        d_ff = d_ff or default_d_ff(d_model)
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, i) for i in range(n_layers))
        self.ln_final = RMSNorm(d_model)
        self.lm_head = Linear(d_model, vocab_size)
        self.bias_budget_bytes = DEFAULT_BIAS_BUDGET

    def forward(self, ids_BT: Tensor, pos_offset: int = 0) -> Tensor:
        """Logits (B, T, vocab). ``pos_offset`` shifts every position (tests of relativity)."""
        T = ids_BT.shape[1]
        self.encoding.check_length(pos_offset + T)
        pos_T = torch.arange(pos_offset, pos_offset + T, device=ids_BT.device)
        x = self.encoding.embed(self.token_embeddings(ids_BT), pos_T)
        ctx = AttentionContext(self.encoding, pos_T, self.bias_budget_bytes, ids_BT.shape[0])
        for block in self.layers:
            x = block(x, ctx)
        return self.lm_head(self.ln_final(x))

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        return n - self.token_embeddings.weight.numel() if exclude_embeddings else n


def build_encoding(enc_cfg: Any, d_model: int, n_heads: int, n_layers: int) -> PositionalEncoding:
    """Instantiate the encoding named by ``_target_`` with its YAML parameters."""
    from hydra.utils import get_class

    params = {k: v for k, v in dict(enc_cfg).items()
              if k not in ("_target_", "name", "description", "paper")}
    cls = get_class(enc_cfg["_target_"])
    return cls(d_model=d_model, n_heads=n_heads, head_dim=d_model // n_heads,
               n_layers=n_layers, **params)


def build_model(cfg: Any, vocab_size: int) -> TransformerLM:
    """The model described by a composed config (cfg.model, cfg.encoding)."""
    m = cfg.model
    enc = build_encoding(cfg.encoding, m.d_model, m.n_heads, m.n_layers)
    return TransformerLM(vocab_size, m.d_model, m.n_layers, m.n_heads, m.d_ff, enc)
