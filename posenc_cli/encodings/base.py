"""The single interface through which every positional encoding plugs into the model.

Shape suffixes: B batch, H heads, T query length, S key length, D d_model, E head dim, N count.
An encoding overrides only what its paper changes; every hook here is a no-op:

* ``embed``          absolute information added to the token embeddings;
* ``transform_qk``   queries and keys rewritten before the dot product (RoPE);
* ``distance_bias``  a logit bias that depends on i - j alone (ALiBi, T5, KERPLE, …): one row
                     per distance, from which the model derives both its O(T)-memory Toeplitz
                     path and the materialised bias (``position_bias``);
* ``content_bias``   a logit bias that depends on the queries and keys too (Transformer-XL,
                     DeBERTa), computed per layer and chunk of queries.

Whether an encoding has a bias, and of which kind, follows from the hooks it overrides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posenc_cli.common.errors import PosencError


@dataclass(frozen=True)
class Span:
    """A contiguous range of positions [start, start + length) on one device."""

    start: int
    length: int
    device: torch.device

    @property
    def stop(self) -> int:
        return self.start + self.length

    def positions(self) -> Tensor:
        return torch.arange(self.start, self.stop, device=self.device)


@dataclass
class ForwardCache:
    """Tensors one forward pass shares between the query chunks of a layer, in named slots.

    ``positions`` spans the whole forward; ``tables`` holds per-layer projected position
    tables (layer -> tensor), ``key_terms`` per-layer key-indexed products (layer -> tensor
    over every key seen so far). Slots live for one forward only, so nothing goes stale.
    """

    positions: Span
    tables: dict[int, Any] = field(default_factory=dict)
    key_terms: dict[int, Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class BiasSite:
    """Where a content bias is asked for: a chunk of queries against every earlier key."""

    queries: Span
    keys: Span
    layer: int
    cache: ForwardCache


class PositionalEncoding(nn.Module):
    """Base class: no positional information at all (NoPE)."""

    #: The claim the tests check: attention depends on positions only through i - j.
    relative: ClassVar[bool] = False
    #: Peak number of float32 (B, H, T, S) tensors alive while ``content_bias`` runs, its
    #: result included; the model sizes query chunks by it to bound memory.
    bias_buffers: ClassVar[int] = 1
    #: Derived in __init_subclass__ from the hooks a class overrides.
    has_distance_bias: ClassVar[bool] = False
    has_content_bias: ClassVar[bool] = False
    #: Longest sequence the encoding is defined for; None means any length.
    max_len: int | None = None
    #: The config name (configs/encoding/<name>.yaml), set by the registry.
    config_name: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.has_distance_bias = cls.distance_bias is not PositionalEncoding.distance_bias
        cls.has_content_bias = cls.content_bias is not PositionalEncoding.content_bias

    def __init__(self, d_model: int, n_heads: int, head_dim: int, n_layers: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.n_layers = n_layers

    @property
    def has_bias(self) -> bool:
        return self.has_distance_bias or self.has_content_bias

    def embed(self, x_BTD: Tensor, pos_T: Tensor) -> Tensor:
        """Add absolute position information to the token embeddings (input layer)."""
        return x_BTD

    def transform_qk(self, q_BHTE: Tensor, k_BHSE: Tensor, pos_T: Tensor,
                     pos_S: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """Rewrite queries and keys before the dot product (RoPE-style)."""
        return q_BHTE, k_BHSE

    def distance_bias(self, distance: Tensor) -> Tensor:
        """(H, N) float32 logit bias for each distance i - j in ``distance`` (N,).

        Added to the *scaled* logits: softmax(q·k·scale + bias). Negative distances (j > i)
        may get any value: the caller masks them.
        """
        raise NotImplementedError

    def content_bias(self, q_BHTE: Tensor, k_BHSE: Tensor, site: BiasSite) -> Tensor:
        """(B, H, T, S) float32 logit bias of queries ``site.queries`` against keys
        ``site.keys`` (the queries always end with the keys), -inf where j > i.

        q and k are this layer's, before ``transform_qk``; scaled like ``distance_bias``.
        """
        raise NotImplementedError

    def position_bias(self, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """(1, H, T, S) materialised ``distance_bias`` with -inf where j > i (reference path)."""
        distance = pos_T[:, None] - pos_S[None, :]
        flat = self.distance_bias(distance.flatten()).float()
        bias = flat.view(-1, *distance.shape).unsqueeze(0)
        return bias.masked_fill(distance < 0, float("-inf"))

    def softmax_scale(self, head_dim: int) -> float:
        """Multiplier of q·k before the softmax."""
        return head_dim ** -0.5

    def check_length(self, length: int) -> None:
        """Raise when the encoding cannot represent ``length`` positions (absolute tables)."""
        if self.max_len is not None and length > self.max_len:
            name = self.config_name or type(self).__name__
            raise PosencError(
                f"encoding '{name}' is defined for at most {self.max_len} positions, got {length}",
                f"use lengths <= encoding.max_len, or raise encoding.max_len (now {self.max_len})",
            )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, head_dim={self.head_dim}"


def first_position(pos: Tensor) -> int:
    """First position of a contiguous range (0 for an empty one)."""
    return int(pos[0]) if pos.numel() else 0


def positive_number(key: str, value: Any) -> float:
    """A hyper-parameter that must be a finite number > 0 (a base, a θ), as one line if not."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
        0 < float(value) < float("inf")
    if not ok:
        raise PosencError(f"encoding.{key} is {value!r}, not a positive number",
                          f"give a number > 0, e.g. encoding.{key}=10000")
    return float(value)
