"""Which runs `posenc export-hf` can write, and the per-layer layout it writes for them: the
formats are transformers' Llama (RoPE in every layer, global attention) and SmolLM3 (some
layers unrotated, one sliding window size), so every other setting is refused in one line
before anything is written."""

from __future__ import annotations

from pathlib import Path

from posenc_cli.common.errors import PosencError
from posenc_cli.common.layer_pattern import encoded_layers, per_layer
from posenc_cli.config.layer_encodings import other_encodings
from posenc_cli.config.run_config import RunConfig

#: The end of a refusal where Llama has nothing like the setting.
NOT_IN_LLAMA = "which transformers' Llama has no equivalent for"


def check_exportable(cfg: RunConfig, run_dir: Path) -> None:
    """A PosencError naming the first setting of the run the formats cannot express."""
    for refused, what, fix in [*_encoding_refusals(cfg), *_model_refusals(cfg)]:
        if refused:
            raise PosencError(f"{run_dir} {what}", fix)


def _encoding_refusals(cfg: RunConfig) -> list[tuple[bool, str, str]]:
    """(is it so, what the run does, how to export instead) for the encoding's settings."""
    name, enc = cfg.encoding.name, cfg.encoding.params
    hybrid = no_rope_layers(cfg) is not None or layer_windows(cfg) is not None
    return [
        (
            name not in ("rope", "hybrid", "rnope_swa"),
            f"uses encoding '{name}', {NOT_IN_LLAMA}",
            "export a run trained with encoding=rope (Llama), hybrid or rnope_swa (SmolLM3)",
        ),
        (
            hybrid and enc.get("rotary_fraction", 1.0) != 1.0,
            "rotates part of each head in a hybrid run, which transformers' SmolLM3 has no "
            "equivalent for",
            "export a hybrid run with encoding.rotary_fraction=1",
        ),
        (
            enc.get("p", 1.0) != 1.0,
            f"uses p-RoPE (encoding.p={enc.get('p')}), {NOT_IN_LLAMA}",
            "export a run trained with encoding.p=1",
        ),
    ]


def _model_refusals(cfg: RunConfig) -> list[tuple[bool, str, str]]:
    """The same for the model's settings."""
    m = cfg.model
    sizes = sorted({w for w in layer_windows(cfg) or () if w is not None})
    return [
        (
            bool(other_encodings(m.layers, cfg.encoding.name)),
            "gives some layers another encoding (model.layers), which Llama and SmolLM3 cannot "
            "express",
            "export a run whose model.layers holds only encoding and none",
        ),
        (
            m.chunks is not None,
            "has chunked attention (model.chunks), which Llama and SmolLM3 cannot express",
            "export a run trained without model.chunks",
        ),
        (
            len(sizes) > 1,
            f"has sliding windows of {len(sizes)} sizes ({sizes}), and transformers' SmolLM3 "
            "has one sliding_window for every windowed layer",
            "export a run whose model.windows are one size (or null)",
        ),
        (
            m.logn_scaling,
            f"uses model.logn_scaling, {NOT_IN_LLAMA}",
            "export a run trained without log-n scaling",
        ),
        (
            m.qk_norm,
            "uses model.qk_norm, which transformers' Llama has no weights for",
            "export a run trained without QK-norm",
        ),
    ]


def no_rope_layers(cfg: RunConfig) -> tuple[int, ...] | None:
    """SmolLM3's flags (1: the layer rotates) for a hybrid run: a layer rotates where both the
    hybrid encoding's pattern and model.layers put RoPE; None for a run of RoPE only."""
    n = cfg.model.n_layers
    if cfg.encoding.name == "rope" and cfg.model.layers is None:
        return None
    pattern = list(cfg.encoding.params.get("pattern", ["rope"]))
    in_encoding = [pattern[i % len(pattern)] == "rope" for i in range(n)]
    in_model = encoded_layers(cfg.model.layers, n, cfg.encoding.name)
    return tuple(int(a and b) for a, b in zip(in_encoding, in_model, strict=True))


def layer_windows(cfg: RunConfig) -> tuple[int | None, ...] | None:
    """Each layer's sliding window: model.windows, or rnope_swa's window on its RoPE layers;
    None when every layer attends globally."""
    n = cfg.model.n_layers
    window = cfg.encoding.params.get("window")
    if window is not None:
        rotates = no_rope_layers(cfg) or (1,) * n
        return tuple(int(window) if r else None for r in rotates)
    if cfg.model.windows is None:
        return None
    return tuple(per_layer(cfg.model.windows, n))
