"""The single interface through which every positional encoding plugs into the model.

Shape suffixes: B batch, H heads, T query length, S key length, D d_model, E head dim, N count.
An encoding overrides only what its paper changes; every hook here is a no-op:

* ``embed``          absolute information added to the token embeddings;
* ``transform_qk``   queries and keys rewritten before the dot product (RoPE);
* ``distance_bias``  a logit bias that depends on i - j alone (ALiBi, T5, KERPLE, …): one row
                     per distance, from which the model derives both its O(T)-memory Toeplitz
                     path and the materialised bias (``position_bias``);
* ``pair_bias``      a logit bias of the two positions, not only of i - j (FIRE reads i as
                     well): computed once per forward and query chunk, shared by every layer;
* ``content_bias``   a logit bias that depends on the queries and keys (Transformer-XL,
                     DeBERTa, CoPE) or the layer's input (FoX), computed per layer and chunk;
* ``key_bias``       the key term v_j of a content bias separable as u_i + v_j (FoX): attention
                     folds it into the fused kernel as one more key dimension, and the
                     materialised ``content_bias`` serves only the readers of logits (inspect);
* ``score_bias``     the pair or content bias as a function of one score's (b, h, i, j), for
                     FlexAttention to compute inside its tiles (model/flex.py);
* ``attention_weights`` the weights a row of logits gives its keys, softmax unless the encoding
                     replaces it (stick-breaking); the model then forms each chunk's logits
                     explicitly, and ``posenc inspect`` reads the same weights.

Positions and the caches keyed by them: encodings/span.py.
Whether an encoding has a bias, and of which kind, follows from the hooks it overrides.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posenc_cli.common.errors import PosencError
from posenc_cli.encodings.cache import BoundedCache
from posenc_cli.encodings.per_layer import PerLayer
from posenc_cli.encodings.rope_scaling import RescaleSets
from posenc_cli.encodings.site import BiasSite, ScoreBias
from posenc_cli.encodings.span import range_key


class PositionalEncoding(nn.Module):
    """Base class: no positional information at all (NoPE)."""

    #: The claim the tests check: attention depends on positions only through i - j (an
    #: instance may refine its class's claim: irope without NoPE layers is relative).
    relative: bool = False
    #: Peak number of float32 (B, H, T, S) tensors alive while ``content_bias`` runs, its
    #: result included; the model sizes query chunks by it to bound memory.
    bias_buffers: ClassVar[int] = 1
    #: Derived in __init_subclass__ from the hooks a class overrides.
    has_distance_bias: ClassVar[bool] = False
    has_pair_bias: ClassVar[bool] = False
    has_content_bias: ClassVar[bool] = False
    has_key_bias: ClassVar[bool] = False
    has_score_bias: ClassVar[bool] = False
    #: ``score_bias`` holds a table as wide as the keys (Transformer-XL's): query-chunked.
    score_table_spans_keys: ClassVar[bool] = False
    has_content_attention: ClassVar[bool] = False
    has_own_weights: ClassVar[bool] = False
    #: RoPE-family encodings set this: evaluation-time context extension (eval.rope_scaling)
    #: may rescale their frequencies (``extend_context``).
    rotary: ClassVar[bool] = False
    #: False where log-n scaling (model.logn_scaling), which scales q before q·k, would scale
    #: only part of the encoding's logit (PaTH's is not q·k): the config check refuses it.
    scales_with_queries: ClassVar[bool] = True
    #: Whether ``fused_attention`` on log-n-scaled queries is the model's attention: False
    #: where the default path reads the unscaled ones too (CoPE's bias and gates).
    fuses_scaled_queries: ClassVar[bool] = True
    #: Whether ``content_bias`` against keys [first, end) is the bias against every earlier key
    #: cut to those columns: the bias of i and j reads nothing before key j. A windowed or
    #: chunked layer then passes only the keys its queries can see. False for PaTH, whose
    #: short convolution reads the inputs before a key.
    bias_from_any_key: ClassVar[bool] = True
    #: Multiplier of the attention logits a context extension sets (YaRN's); 1 otherwise.
    attention_factor: float = 1.0
    #: Longest sequence the encoding is defined for; None means any length.
    max_len: int | None = None
    #: The config name (configs/encoding/<name>.yaml), set by the registry.
    config_name: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.has_distance_bias = cls.distance_bias is not PositionalEncoding.distance_bias
        cls.has_pair_bias = cls.pair_bias is not PositionalEncoding.pair_bias
        cls.has_content_bias = cls.content_bias is not PositionalEncoding.content_bias
        cls.has_key_bias = cls.key_bias is not PositionalEncoding.key_bias
        cls.has_score_bias = cls.score_bias is not PositionalEncoding.score_bias
        cls.has_content_attention = (
            cls.content_attention is not PositionalEncoding.content_attention
        )
        cls.has_own_weights = cls.attention_weights is not PositionalEncoding.attention_weights
        if cls.has_own_weights and (
            cls.has_distance_bias or cls.has_pair_bias or cls.has_content_bias or cls.has_key_bias
        ):
            raise TypeError(f"{cls.__name__}: an encoding with its own weights takes no bias")

    @classmethod
    def check_relations(cls, params: Mapping[str, Any]) -> None:
        """Refuse parameters that are each valid but not together (a PosencError); the
        constructor's typed signature checks each one alone (encodings/parameters.py)."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int, n_layers: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.n_layers = n_layers

    def keep_layers(self, layers: Collection[int]) -> None:
        """Drop the per-layer weights (PerLayer) of the layers that attend with another
        encoding or none (model.layers): they would never train."""
        for module in list(self.modules()):
            if isinstance(module, PerLayer):
                module.keep(layers)

    @property
    def scores_per_sequence(self) -> bool:
        """Each sequence has its own (H, T, S) scores to materialise: a content bias, or
        weights that are not a softmax (``attention_weights``)."""
        return self.has_content_bias or self.has_own_weights

    @property
    def has_bias(self) -> bool:
        kinds = (self.has_distance_bias, self.has_pair_bias, self.has_content_bias)
        return any(kinds) or self.has_key_bias

    def fuses_attention(self, device: torch.device) -> bool:
        """Whether ``fused_attention`` runs on ``device`` (Triton kernels: CUDA)."""
        return False

    def embed(self, x_BTD: Tensor, pos_T: Tensor) -> Tensor:
        """Add absolute position information to the token embeddings (input layer)."""
        return x_BTD

    def transform_qk(
        self, q_BHTE: Tensor, k_BHSE: Tensor, pos_T: Tensor, pos_S: Tensor, layer: int
    ) -> tuple[Tensor, Tensor]:
        """Rewrite queries and keys before the dot product (RoPE-style)."""
        return q_BHTE, k_BHSE

    def distance_bias(self, distance: Tensor) -> Tensor:
        """(H, N) float32 logit bias for each distance i - j in ``distance`` (N,).

        Added to the *scaled* logits: softmax(q·k·scale + bias). Negative distances (j > i)
        may get any value: the caller masks them.
        """
        raise NotImplementedError

    def pair_bias(self, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """(H, T, S) float32 logit bias of query positions ``pos_T`` against key positions
        ``pos_S``, scaled like ``distance_bias``; entries with j > i may hold any value."""
        raise NotImplementedError

    def content_bias(self, q_BHTE: Tensor, k_BHSE: Tensor, site: BiasSite) -> Tensor:
        """(B, H, T, S) float32 logit bias of queries ``site.queries`` against keys
        ``site.keys`` (the queries always end with the keys), -inf where j > i.

        q and k are this layer's, before ``transform_qk``; scaled like ``distance_bias``.
        """
        raise NotImplementedError

    def content_attention(
        self, q_BHTE: Tensor, k_BHSE: Tensor, v_BHSE: Tensor, scale: float, site: BiasSite
    ) -> Tensor:
        """softmax(scale·q·kᵀ + content_bias(q, k, site))·v (B, H, T, E) computed by the
        encoding, for a content bias sharing work with the attention (CoPE's gates are σ of
        its logits), with or without autograd. Used with q and k as ``transform_qk`` leaves
        them and no query scaling; with query scaling ``content_bias`` goes through the
        model's attention."""
        raise NotImplementedError

    def key_bias(self, k_BHSE: Tensor, site: BiasSite) -> Tensor:
        """(B, H, S) key term v_j of a content bias u_i + v_j (u_i is constant along a softmax
        row, so it never matters), for the keys of ``site``; float64 where v is a long sum
        whose differences must survive. Only differences of v matter: attention rebases it."""
        raise NotImplementedError

    def score_bias(self, q_BHtE: Tensor, k_BHSE: Tensor, site: BiasSite) -> ScoreBias:
        """``pair_bias`` or ``content_bias`` (q, k as there) as a function FlexAttention calls
        per score, equal to it wherever j <= i, for the site's queries against every key of
        the forward; a future pair (d < 0) must still read in bounds (the kernel masks it)."""
        raise NotImplementedError

    def fused_attention(
        self, q_BHTE: Tensor, k_BHTE: Tensor, v_BHTE: Tensor, scale: float, layer: int
    ) -> Tensor:
        """The layer's whole attention, (B, H, T, E), as one kernel of the encoding's own that
        holds no (T, S) block (CoPE's and stick-breaking's, in Triton), for every query of the
        forward at once; taken with train.attention=flex where ``fuses_attention``."""
        raise NotImplementedError

    def attention_weights(self, logits_BHtS: Tensor) -> Tensor:
        """(B, H, t, S) weights of t queries, the last t of the S keys, from their scaled
        logits with the causal mask folded in (-inf where j > i): a softmax. An encoding that
        replaces the softmax overrides this and has no logit bias; the model then forms each
        query chunk's logits explicitly (``bias_buffers`` counts its tensors)."""
        return torch.softmax(logits_BHtS, dim=-1)

    def position_bias(self, pos_T: Tensor, pos_S: Tensor) -> Tensor:
        """(1, H, T, S) materialised ``pair_bias`` or ``distance_bias`` with -inf where j > i."""
        distance = pos_T[:, None] - pos_S[None, :]
        if self.has_pair_bias:
            bias = self.pair_bias(pos_T, pos_S).float().unsqueeze(0)
        else:
            flat = self.distance_bias(distance.flatten()).float()
            bias = flat.view(-1, *distance.shape).unsqueeze(0)
        return bias.masked_fill(distance < 0, float("-inf"))

    def softmax_scale(self, head_dim: int) -> float:
        """Multiplier of q·k before the softmax."""
        return head_dim**-0.5

    def caveats(self) -> list[str]:
        """What makes this instance differ from what its name promises, though every value is
        valid (a hybrid pattern the model is too shallow to reach): printed as warnings when a
        run starts, so a study does not mistake it for the encoding it names."""
        return []

    def check_length(self, length: int) -> None:
        """Raise when the encoding cannot represent ``length`` positions (absolute tables)."""
        if self.max_len is not None and length > self.max_len:
            name = self.config_name or type(self).__name__
            raise PosencError(
                f"encoding '{name}' is defined for at most {self.max_len} positions, got {length}",
                f"use lengths <= encoding.max_len, or raise encoding.max_len (now {self.max_len})",
            )

    def extend_context(
        self,
        method: str,
        factor: float,
        original_length: int,
        rescale: Sequence[float] | None = None,
    ) -> None:
        """Evaluate with ``method``'s positions stretched by ``factor`` (eval.rope_scaling;
        ``rescale``: LongRoPE's factors for the length evaluated); ``none`` restores the
        model's own. Only a ``rotary`` encoding overrides this, and callers check ``rotary``
        first, so reaching here is a configuration error."""
        raise PosencError(
            f"encoding '{self.config_name or type(self).__name__}' has no context extension",
            "use a RoPE-family encoding (rope, xpos) with eval.rope_scaling or posenc extend",
        )

    def adopt_extension(
        self,
        method: str,
        factor: float,
        original_length: int,
        rescale: RescaleSets | None = None,
    ) -> None:
        """Make ``method``'s positions the model's own (a `posenc extend` run; ``rescale``:
        LongRoPE's two sets, between which its forwards switch)."""
        self.extend_context(method, factor, original_length)

    @staticmethod
    def tracing() -> bool:
        """True while torch.compile traces the model. A hook must then not read position
        *values* (``int(pos[0])``, a cache key built from them): that splits the graph."""
        return torch.compiler.is_compiling()

    def cached(
        self, cache: BoundedCache, pos: Tensor, compute: Callable[[], Tensor], *extra: Hashable
    ) -> Tensor:
        """``compute()`` for the positions ``pos`` through ``cache``, keyed by their range
        (``range_key``) and ``extra``; computed afresh while tracing and for positions that are
        not a range, so no key ever reads a position under compile or names the wrong set."""
        if self.tracing():
            return compute()
        key = range_key(pos)
        return cache.get(None if key is None else (*key, *extra), compute)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, head_dim={self.head_dim}"
