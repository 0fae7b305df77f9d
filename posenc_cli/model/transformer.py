"""TransformerLM: the CS336 pre-norm decoder. Knows nothing about any particular encoding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from torch import Tensor, nn

from posenc_cli.common.sizes import default_d_ff
from posenc_cli.encodings import PositionalEncoding, Span
from posenc_cli.model.attention import CausalSelfAttention
from posenc_cli.model.blockwise import KeyValueCache, blockwise_hidden, runs_blockwise
from posenc_cli.model.context import AttentionContext
from posenc_cli.model.flex import has_flex_form
from posenc_cli.nn.layers import Embedding, Linear, RMSNorm, SwiGLU


class TransformerBlock(nn.Module):
    """x + attn(ln1(x)), then x + ffn(ln2(x))."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        layer: int,
        n_kv_heads: int | None = None,
        eps: float = 1e-5,
        qk_norm: bool = False,
    ) -> None:
        super().__init__()
        self.ln1 = RMSNorm(d_model, eps)
        self.attn = CausalSelfAttention(d_model, n_heads, layer, n_kv_heads, qk_norm, eps)
        self.ln2 = RMSNorm(d_model, eps)
        self.ffn = SwiGLU(d_model, d_ff)

    def forward(self, x_BTD: Tensor, ctx: AttentionContext) -> Tensor:
        x_BTD = x_BTD + self.attn(self.ln1(x_BTD), ctx)
        return x_BTD + self.ffn(self.ln2(x_BTD))

    def forward_block(
        self, x_BtD: Tensor, start: int, bias: Tensor, cache: KeyValueCache, ctx: AttentionContext
    ) -> Tensor:
        """``forward`` for one block of queries of a blockwise evaluation (blockwise.py)."""
        x_BtD = x_BtD + self.attn.forward_block(self.ln1(x_BtD), start, bias, cache, ctx)
        return x_BtD + self.ffn(self.ln2(x_BtD))


class TransformerLM(nn.Module):
    """Token embedding -> encoding.embed -> blocks -> RMSNorm -> LM head (untied unless
    ``tie_embeddings``, which imported checkpoints may need). ``encoded`` marks the layers that
    use the encoding (model.layers); ``others`` gives some of the rest another encoding, and
    the others have no position at all. ``windows`` gives a layer a sliding window
    (model.windows; None: global attention), ``chunks`` a chunk (model.chunks, Llama 4's
    chunked attention)."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_layers: int,
        n_heads: int,
        d_ff: int | None,
        encoding: PositionalEncoding,
        logn_length: int | None = None,
        n_kv_heads: int | None = None,
        rms_norm_eps: float = 1e-5,
        tie_embeddings: bool = False,
        qk_norm: bool = False,
        encoded: Sequence[bool] | None = None,
        windows: Sequence[int | None] | None = None,
        chunks: Sequence[int | None] | None = None,
        others: Sequence[PositionalEncoding | None] | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.token_embeddings = Embedding(vocab_size, d_model)
        self.encoding = encoding
        self._place_encodings(encoded or [True] * n_layers, others or [None] * n_layers)
        self.windows, self.chunks = (list(p or [None] * n_layers) for p in (windows, chunks))
        d_ff = d_ff or default_d_ff(d_model)
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, i, n_kv_heads, rms_norm_eps, qk_norm)
            for i in range(n_layers)
        )
        self.ln_final = RMSNorm(d_model, rms_norm_eps)
        self.lm_head = Linear(d_model, vocab_size)
        if tie_embeddings:
            self.lm_head.weight = self.token_embeddings.weight
        #: Bytes of bias workspace per query chunk; None: the device's default (context.py).
        self.bias_budget_bytes: int | None = None
        #: The training length when model.logn_scaling is on (queries past it are scaled up).
        self.logn_length = logn_length
        #: "flex" where a layer has that form (``use_attention``); not saved with the weights.
        self.attention_kernel = "sdpa"

    def forward(
        self,
        ids_BT: Tensor,
        pos_offset: int = 0,
        positions: Tensor | None = None,
        blockwise: bool = True,
    ) -> Tensor:
        """Logits (B, T, vocab). ``pos_offset`` shifts every position (tests of relativity);
        ``positions`` (T,) sorted distinct positions replace 0 … T-1 (randomized positions).
        Without gradients a materialised position bias runs block by block through the layers
        (model/blockwise.py) unless ``blockwise`` is false (hooks that need whole layers)."""
        T = ids_BT.shape[1]
        span = (
            Span(pos_offset, T, ids_BT.device)
            if positions is None
            else Span.of(positions.to(ids_BT.device))
        )
        for encoding in (self.encoding, *self.other_encodings.values()):
            cast(PositionalEncoding, encoding).check_length(span.stop)
        ctx = self._context(self.encoding, span, ids_BT.shape[0])
        x = self.encoding.embed(self.token_embeddings(ids_BT), ctx.pos_T)
        blocks = self.blocks
        n_heads = blocks[0].attn.n_heads
        uniform = all(self.encoded) and not any(self.windows) and not any(self.chunks)
        if uniform and blockwise and runs_blockwise(ctx, n_heads, len(x)):
            x = blockwise_hidden(blocks, x, ctx, n_heads)
        else:
            # one context per kind of layer (its encoding, window, chunk), shared by its layers
            contexts: dict[tuple[str, int | None, int | None], AttentionContext] = {
                ("encoding", None, None): ctx
            }
            kinds = zip(self.layer_kinds, self.windows, self.chunks, strict=True)
            for block, kind in zip(blocks, kinds, strict=True):
                if kind not in contexts:
                    encoding = self.layer_encoding(kind[0])
                    contexts[kind] = self._context(encoding, span, len(x), kind[1], kind[2])
                x = block(x, contexts[kind])
        return self.lm_head(self.ln_final(x))

    def _place_encodings(
        self, encoded: Sequence[bool], others: Sequence[PositionalEncoding | None]
    ) -> None:
        """Which encoding each layer attends with: the run's where ``encoded``, else the
        layer's entry of ``others`` (model.layers naming another encoding, one module per
        name), else none: the base encoding, which holds no weights, so a checkpoint keeps
        its keys. An encoding keeps per-layer weights only for the layers that use it."""
        #: Per layer: "encoding", "none", or the config name of the other encoding it uses.
        self.layer_kinds = [
            "encoding" if own else ("none" if other is None else other.config_name)
            for own, other in zip(encoded, others, strict=True)
        ]
        self.other_encodings = nn.ModuleDict({o.config_name: o for o in others if o is not None})
        for kind, encoding in [("encoding", self.encoding), *self.other_encodings.items()]:
            users = [i for i, used in enumerate(self.layer_kinds) if used == kind]
            cast(PositionalEncoding, encoding).keep_layers(users)
        enc = self.encoding
        nope = PositionalEncoding(enc.d_model, enc.n_heads, enc.head_dim, enc.n_layers)
        self.no_position = nope if "none" in self.layer_kinds else None

    @property
    def encoded(self) -> list[bool]:
        """Per layer, whether it uses the run's encoding (model.layers)."""
        return [kind == "encoding" for kind in self.layer_kinds]

    def layer_encoding(self, kind: str) -> PositionalEncoding:
        """The encoding of a layer of ``kind`` (``layer_kinds``)."""
        if kind == "encoding":
            return self.encoding
        if kind == "none":
            assert self.no_position is not None  # made whenever a layer is "none"
            return self.no_position
        return cast(PositionalEncoding, self.other_encodings[kind])

    def _context(
        self,
        encoding: PositionalEncoding,
        span: Span,
        batch: int,
        window: int | None = None,
        chunk: int | None = None,
    ) -> AttentionContext:
        flex = self.attention_kernel == "flex"
        return AttentionContext(
            encoding, span, self.bias_budget_bytes, batch, self.logn_length, window, chunk, flex
        )

    def use_attention(self, kernel: str) -> str:
        """Attend with ``kernel`` (sdpa | flex) where a layer has that form; the kernel the
        model then uses: sdpa when no layer has a FlexAttention form (model/flex.py)."""
        kinds = zip(self.layer_kinds, self.windows, self.chunks, strict=True)
        device, scaled = next(self.parameters()).device, self.logn_length is not None
        flex = kernel == "flex" and any(
            has_flex_form(self.layer_encoding(kind), w is not None or c is not None, False, True,
                          device, scaled)
            for kind, w, c in kinds
        )  # fmt: skip
        self.attention_kernel = "flex" if flex else "sdpa"
        return self.attention_kernel

    @property
    def blocks(self) -> list[TransformerBlock]:
        """``layers`` as the TransformerBlocks they are (nn.ModuleList types them Module)."""
        return cast(list[TransformerBlock], list(self.layers))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
