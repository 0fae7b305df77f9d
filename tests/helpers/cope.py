"""CoPE's attention written out for the tests that check its kernels: inputs with most gates
open and the paper's naive formula (tests/unit/encodings/, tests/gpu/)."""

from __future__ import annotations

import math

import torch

SCALE = 0.5


def inputs(T: int, S: int, max_position: int, seed: int = 1) -> list[torch.Tensor]:
    """q (T queries ending with the S keys), k, v and embeddings, float64, most gates open."""
    gen = torch.Generator().manual_seed(seed)
    q = 2 * torch.randn(2, 2, T, 4, generator=gen, dtype=torch.float64)
    k = 2 * torch.randn(2, 2, S, 4, generator=gen, dtype=torch.float64)
    q[..., 0], k[..., 0] = 2.0, k[..., 0] + 3
    v = torch.randn(2, 2, S, 4, generator=gen, dtype=torch.float64)
    emb = torch.randn(4, max_position, generator=gen, dtype=torch.float64)
    return [t.requires_grad_() for t in (q, k, v, emb)]


def naive(q, k, v, emb):
    """Golovneva et al.: gates σ(s·q·kᵀ) of the causal keys, p = gates · (triangular ones),
    clamped; the embedding vectors of ⌊p⌋ and ⌊p⌋ + 1 interpolated before the product with
    q; a plain masked softmax."""
    T, S, P = q.shape[-2], k.shape[-2], emb.shape[-1]
    causal = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
    logits = SCALE * q @ k.transpose(-1, -2)
    p = (torch.sigmoid(logits) * causal) @ torch.ones(S, S, dtype=q.dtype, device=q.device).tril()
    p = p.clamp(max=P - 1)
    low = p.detach().floor()
    w = (p - low)[..., None]
    vectors = emb.T
    e = vectors[low.long()] * (1 - w) + vectors[(low + 1).clamp(max=P - 1).long()] * w
    bias = torch.einsum("bhte,bhtse->bhts", q, e)
    return torch.softmax((logits + bias).masked_fill(~causal, -math.inf), dim=-1) @ v
