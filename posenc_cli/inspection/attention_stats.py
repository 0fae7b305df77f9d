"""What each head attends to: statistics of the attention probabilities of a forward pass.

Per layer and head, averaged over the batch and the queries: the mean attention distance
Σ_j p_ij (i - j), the entropy -Σ_j p_ij ln p_ij (nats), and, at lengths past the training
length L, the share of attention mass at distances ≥ L (over the queries that have keys that
far). Per layer and distance, the mean scaled q·k (after the encoding's rotation), and per
head the mean logit bias the encoding adds (for a content bias: averaged over the text).

Probabilities are formed in query chunks (model/probe.py), never as one (T × T) matrix per
layer and head, so 16x the training length fits in memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from posenc_cli.model.attention import CausalSelfAttention
from posenc_cli.model.probe import LayerProbe
from posenc_cli.model.transformer import TransformerLM

#: Attention weights from a chunk's masked logits (B, H, t, S): a softmax, or the encoding's own.
Weigh = Callable[[Tensor], Tensor]


def softmax_rows(logits_BHtS: Tensor) -> Tensor:
    """The softmax over each row of keys, what most encodings' weights are."""
    return torch.softmax(logits_BHtS, dim=-1)


#: Elements of one chunk's (B, H, t, S) probabilities (float32): 16 M, 64 MB.
CHUNK_ELEMENTS = 2**24


@dataclass
class AttentionStats:
    """Statistics of one forward at one length; arrays are float64 numpy."""

    length: int
    train_length: int
    mean_distance: np.ndarray  # (layers, heads)
    entropy: np.ndarray  # (layers, heads)
    beyond: np.ndarray | None  # (layers, heads); None when length <= train_length
    qk_by_distance: np.ndarray  # (layers, length): distance d at index d
    bias_by_distance: np.ndarray | None  # (layers, heads, length); None without a bias


class StatsAccumulator:
    """Running sums of one layer over query chunks."""

    def __init__(self, heads: int, length: int, train_length: int, biased: bool) -> None:
        z = torch.zeros
        self.distance = z(heads, dtype=torch.float64)
        self.entropy = z(heads, dtype=torch.float64)
        self.beyond = z(heads, dtype=torch.float64)
        self.qk = z(length, dtype=torch.float64)
        self.count = z(length, dtype=torch.float64)
        self.bias = z(heads, length, dtype=torch.float64) if biased else None
        self.queries = 0
        self.train_length = train_length

    def add(
        self,
        raw: Tensor,
        bias: Tensor,
        start: int,
        weigh: Weigh = softmax_rows,
        window: Tensor | None = None,
    ) -> None:
        """Add queries [start, start + t): their scaled logits ``raw`` and ``bias`` (causal
        mask included), weighed as the model weighs them (the encoding's
        ``attention_weights``, within the layer's sliding ``window`` mask if it has one; the
        bias recorded is the encoding's alone)."""
        B, H, t, S = raw.shape
        i = torch.arange(start, start + t)[:, None]
        dist = i - torch.arange(S)[None, :]
        valid = dist >= 0
        p = weigh(raw + bias if window is None else raw + bias + window)
        self.distance += (p * dist.clamp(min=0)).sum(-1).sum((0, 2)).double()
        self.entropy += -torch.special.xlogy(p, p).sum(-1).sum((0, 2)).double()
        far = (p * (dist >= self.train_length)).sum(-1)  # (B, H, t)
        self.beyond += far.sum((0, 2)).double()
        self.queries += B * t
        d = dist[valid]
        self.qk.index_add_(0, d, raw.sum((0, 1))[valid].double())
        self.count.index_add_(0, d, torch.full(d.shape, float(B * H), dtype=torch.float64))
        if self.bias is not None:
            mean = bias.float().mean(0).expand(H, -1, -1)  # (H, t, S); a NoPE layer's is (1, t, S)
            for h in range(H):
                self.bias[h].index_add_(0, d, mean[h][valid].double())


def model_has_bias(model: TransformerLM) -> bool:
    """Whether any layer's encoding adds a logit bias (model.layers may mix encodings)."""
    return any(model.layer_encoding(kind).has_bias for kind in set(model.layer_kinds))


def collect(model: TransformerLM, ids_BT: Tensor, train_length: int) -> AttentionStats:
    """Run ``model`` on ``ids_BT`` (no gradient, float32) and gather the statistics of every
    layer through hooks on the attention modules."""
    B, T = ids_BT.shape
    biased = model_has_bias(model)  # a layer without one then records a zero bias
    accs: list[StatsAccumulator] = []

    def hook(attn: CausalSelfAttention, args: tuple) -> None:
        x_BTD, ctx = args
        probe = LayerProbe(attn, x_BTD, ctx)  # ctx.encoding: this layer's (model.layers)
        acc = StatsAccumulator(attn.n_heads, T, train_length, biased)
        rows = max(16, CHUNK_ELEMENTS // max(1, B * attn.n_heads * T))
        for s in range(0, T, rows):
            e = min(T, s + rows)
            raw, bias = probe.logits(s, e)
            acc.add(raw, bias, s, ctx.encoding.attention_weights, ctx.window_mask(s, e))
        accs.append(acc)

    handles = [block.attn.register_forward_pre_hook(hook) for block in model.blocks]
    try:
        with torch.no_grad():
            model(ids_BT, blockwise=False)  # the hooks read whole layers
    finally:
        for handle in handles:
            handle.remove()
    return summarise(accs, T, train_length, B)


def summarise(accs: list[StatsAccumulator], T: int, L: int, B: int) -> AttentionStats:
    """The means of the layers' sums (``accs`` one per layer, B sequences of T tokens)."""

    def stack(rows: list[Tensor]) -> np.ndarray:
        return torch.stack(rows).numpy()

    far_queries = B * max(0, T - L)
    count = accs[0].count.clamp(min=1)
    biases = [a.bias for a in accs if a.bias is not None]  # every layer's or none
    return AttentionStats(
        length=T,
        train_length=L,
        mean_distance=stack([a.distance / a.queries for a in accs]),
        entropy=stack([a.entropy / a.queries for a in accs]),
        beyond=stack([a.beyond / far_queries for a in accs]) if far_queries else None,
        qk_by_distance=stack([a.qk / count for a in accs]),
        bias_by_distance=stack([b / (count / (B * b.shape[0])) for b in biases])
        if biases
        else None,
    )
