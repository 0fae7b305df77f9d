"""The model a run's config describes: the decoder of cfg.model with the encoding of
cfg.encoding, adopting the context extension it was fine-tuned with (cfg.extend; LongRoPE with
the two factor sets the run's config records)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc_cli.common.errors import PosencError
from posenc_cli.common.layer_pattern import encoded_layers, layer_kinds, per_layer
from posenc_cli.config.layer_encodings import layer_encoding_config, other_encodings
from posenc_cli.config.run_config import RunConfig
from posenc_cli.config.schema import ExtendConfig, ModelConfig
from posenc_cli.encodings import PositionalEncoding, build_encoding
from posenc_cli.encodings.rope_scaling import RescaleSets
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
        enc.adopt_extension(ext.method, ext.factor, ext.original_length, adopted_sets(ext))
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
        encoded_layers(m.layers, m.n_layers, enc.config_name),
        per_layer(m.windows, m.n_layers),
        per_layer(m.chunks, m.n_layers),
        _other_encodings(m, enc.config_name),
    )


def _other_encodings(m: ModelConfig, run_encoding: str) -> list[PositionalEncoding | None] | None:
    """Per layer, the other encoding model.layers gives it (one module per name, shared by its
    layers as the run's encoding is, with its model.layer_encodings parameters), or None."""
    names = other_encodings(m.layers, run_encoding)
    if not names:
        return None
    built = {
        name: build_encoding(
            layer_encoding_config(name, m.layer_encodings[name]), m.d_model, m.n_heads, m.n_layers
        )
        for name in names
    }
    kinds = layer_kinds(m.layers, m.n_layers, run_encoding)
    return [built.get(kind) for kind in kinds]


def adopted_sets(ext: ExtendConfig) -> RescaleSets | None:
    """The factor sets of a run fine-tuned with LongRoPE (None for the other methods): `posenc
    extend` records both, given or searched, so every rebuild uses the ones it trained with."""
    if ext.method != "longrope":
        return None
    if ext.long_factor is None or ext.short_factor is None:
        raise PosencError(
            "the config records a fine-tuning with extend.method=longrope but not both of its "
            "factor sets (extend.long_factor, extend.short_factor)",
            "restore the run's .hydra/config.yaml as posenc extend wrote it",
        )
    return RescaleSets(list(ext.long_factor), list(ext.short_factor))
