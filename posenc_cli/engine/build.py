"""The model a run's config describes: the decoder of cfg.model with the encoding of
cfg.encoding, adopting the context extension it was fine-tuned with (cfg.extend)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc_cli.config.run_config import RunConfig
from posenc_cli.config.schema import ExtendConfig, ModelConfig
from posenc_cli.encodings import build_encoding
from posenc_cli.model.transformer import TransformerLM


def build_model(cfg: RunConfig, vocab_size: int) -> TransformerLM:
    """A freshly initialised model (the caller seeds torch first)."""
    return build_lm(
        cfg.model, cfg.encoding.as_yaml(), vocab_size, cfg.extend, cfg.train.context_length
    )


def build_lm(
    m: ModelConfig,
    encoding: Mapping[str, Any],
    vocab_size: int,
    ext: ExtendConfig | None = None,
    train_length: int | None = None,
) -> TransformerLM:
    """The model of ``m`` with the encoding section ``encoding`` (as its YAML lays it out);
    ``train_length`` is what log-n scaling compares with (needed when it is on)."""
    enc = build_encoding(encoding, m.d_model, m.n_heads, m.n_layers)
    if ext is not None and ext.parent is not None and ext.method != "none":
        assert ext.original_length is not None  # config/extension.py sets it with the parent
        enc.adopt_extension(ext.method, ext.factor, ext.original_length)
    if m.logn_scaling and train_length is None:
        raise ValueError("log-n scaling needs the training length")
    return TransformerLM(
        vocab_size,
        m.d_model,
        m.n_layers,
        m.n_heads,
        m.d_ff,
        enc,
        train_length if m.logn_scaling else None,
        m.n_kv_heads,
        m.rms_norm_eps,
        m.tie_embeddings,
        m.qk_norm,
    )
