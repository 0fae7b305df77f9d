"""The single interface through which every positional encoding plugs into the model.

Shape suffixes: B batch, H heads, T query length, S key length, D d_model, E head dim.
An encoding touches attention in at most four places; every hook is a no-op here, so an
encoding overrides only what its paper changes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn


class PositionalEncoding(nn.Module):
    """Base class: no positional information at all (NoPE)."""

    #: True when attention depends on positions only through i - j (shift-invariant).
    relative: ClassVar[bool] = False
    #: True when score_bias depends on positions only (not on q, k): the model computes it
    #: once per forward and shares it across layers.
    bias_is_positional: ClassVar[bool] = True
    #: True when score_bias returns a tensor (the attention then folds the causal mask into it).
    has_bias: ClassVar[bool] = False
    #: Longest sequence the encoding is defined for; None means any length.
    max_len: int | None = None
    #: Peak number of float32 (1|B, H, T, S) tensors alive while ``causal_score_bias`` runs, its
    #: result included (B is 1 for a positional bias). The model sizes query chunks by it, so
    #: that a long evaluation stays within its memory budget.
    bias_buffers: ClassVar[int] = 1

    def __init__(self, d_model: int, n_heads: int, head_dim: int, n_layers: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.n_layers = n_layers

    def embed(self, x_BTD: Tensor, pos_T: Tensor) -> Tensor:
        """Add absolute position information to the token embeddings (input layer)."""
        return x_BTD

    def transform_qk(self, q_BHTE: Tensor, k_BHSE: Tensor, pos_T: Tensor,
                     pos_S: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """Rewrite queries and keys before the dot product (RoPE-style)."""
        return q_BHTE, k_BHSE

    def score_bias(self, q_BHTE: Tensor | None, k_BHSE: Tensor | None, pos_T: Tensor,
                   pos_S: Tensor, layer: int | None) -> Tensor | None:
        """Additive attention-logit bias, (1|B, H, T, S) in logit units, or None.

        The bias is added to the *scaled* logits: softmax(q·k * scale + bias). When
        ``bias_is_positional`` is True the model calls this with q = k = None and layer = None,
        once per forward, and shares the result across layers; otherwise it is called per layer
        with that layer's queries and keys (before ``transform_qk``). Encodings with per-layer
        parameters index them by ``layer``.
        """
        return None

    def distance_bias(self, distance: Tensor) -> Tensor | None:
        """(H, N) float32 logit bias for each distance i - j in ``distance`` (N,), or None.

        For a bias that depends on i - j alone (ALiBi, T5, KERPLE, …): the attention then
        never materialises the (H, T, S) bias but views these T+S-1 values as a Toeplitz
        matrix (memory O(H·T), any length). It must agree with ``score_bias``. Negative
        distances (j > i) may get any value: the caller masks them.
        """
        return None

    def causal_score_bias(self, q_BHTE: Tensor | None, k_BHSE: Tensor | None, pos_T: Tensor,
                          pos_S: Tensor, layer: int | None,
                          scratch: dict[Any, Any]) -> Tensor | None:
        """``score_bias`` with the causal mask folded in: float32, -inf where j > i.

        What the attention calls. The queries pos_T always end with the keys pos_S (a chunk of
        queries against every earlier key), so an override may skip the masked half (negative
        distances). ``scratch`` lives for one forward: tensors that depend on parameters and
        positions (projected tables) can be shared there by all chunks of a layer; its key
        "positions" holds all positions of the forward.
        """
        bias = self.score_bias(q_BHTE, k_BHSE, pos_T, pos_S, layer)
        if bias is None:
            return None
        return bias.float().masked_fill(pos_S[None, :] > pos_T[:, None], float("-inf"))

    def softmax_scale(self, head_dim: int) -> float:
        """Multiplier of q·k before the softmax."""
        return head_dim ** -0.5

    def check_length(self, length: int) -> None:
        """Raise when the encoding cannot represent ``length`` positions (absolute tables)."""
        if self.max_len is not None and length > self.max_len:
            from posenc_cli.errors import PosencError

            raise PosencError(
                f"encoding '{type(self).__name__}' is defined for at most {self.max_len} "
                f"positions, got {length}",
                "evaluate at lengths <= encoding.max_len, or raise encoding.max_len and retrain",
            )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, head_dim={self.head_dim}"


def positions(length: int, device: torch.device, offset: int = 0) -> Tensor:
    """Integer positions offset..offset+length-1 (an offset lets tests shift every position)."""
    return torch.arange(offset, offset + length, device=device)
