"""model.layers, checked against the run's encoding and the model before anything is created.

A pattern interleaves the run's encoding with NoPE layers and with other encodings. Every
encoding in it must act in attention (an absolute one is added once, at the input, so a layer
cannot leave it out), an other encoding must not bring a layer pattern of its own (the hybrids)
and must be valid for the model with its parameters (model.layer_encodings), and the pattern
must give this model at least two kinds of layer, or the run would be what it does not say.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.errors import PosencError, closest
from posenc_cli.common.layer_pattern import layer_kinds, unreached
from posenc_cli.common.shown import shown
from posenc_cli.config.groups import group_options
from posenc_cli.config.layer_encodings import layer_encoding_config, other_encodings
from posenc_cli.encodings.parameters import check_parameters, model_dims

if TYPE_CHECKING:
    from posenc_cli.encodings.base import PositionalEncoding

EXAMPLE = "e.g. 'model.layers=[encoding,encoding,encoding,none]' (null: every layer)"


def check_layers(cfg: DictConfig, cls: type[PositionalEncoding]) -> None:
    """The pattern's words, the encodings it names, and the kinds of layer it gives."""
    if cfg.model.layers is None:
        return
    words = [str(word) for word in cfg.model.layers]
    written, run = f"model.layers={shown(words, ', ')}", str(cfg.encoding.name)
    _require(bool(words), f"{written} is not a pattern of layers", f"use {EXAMPLE}")
    _require(
        _acts_in_attention(cls) and run != "none",
        f"model.layers interleaves the encoding with other layers, but encoding={run} "
        + ("is NoPE already" if run == "none" else "acts once, at the input"),
        "choose an encoding that acts in attention (rope, alibi, t5, fox, ...), or drop "
        "model.layers",
    )
    for name in other_encodings(words, run):
        _check_other(cfg, name, written)
    n = int(cfg.model.n_layers)
    kinds, named = layer_kinds(words, n, run), layer_kinds(words, len(words), run)
    _require(
        "encoding" in kinds,
        f"{written} gives none of the {n} layers the run's encoding ({run})",
        "make one of the encodings it names the run's, e.g. encoding=alibi "
        "'model.layers=[encoding,t5]'",
    )
    other = next((i for i, kind in enumerate(named) if kind != named[0]), None)
    _require(
        len(set(kinds)) >= 2,
        f"{written} makes every one of the {n} layers '{named[0]}'",
        f"use model.n_layers={other + 1} or more"
        if other is not None
        else "put 'none' or another encoding beside the run's encoding in model.layers",
    )
    if (missed := unreached(named, n)) is not None:
        raise too_long(written, len(words), n, words[missed[1]], missed[1])
    _check_rotates(cfg, kinds, written)


def _check_rotates(cfg: DictConfig, kinds: list[str], written: str) -> None:
    """A hybrid's pattern and model.layers together must leave a layer rotating: a layer
    rotates where both put RoPE (the hybrid's rope, model.layers' encoding)."""
    pattern = cfg.encoding.get("pattern")
    if pattern is None:
        return
    own = [str(pattern[layer % len(pattern)]) == "rope" for layer in range(len(kinds))]
    _require(
        any(rope and kind == "encoding" for rope, kind in zip(own, kinds, strict=True)),
        f"encoding={cfg.encoding.name} with {written} leaves no layer rotating: every layer "
        f"encoding.pattern={shown(list(pattern), ', ')} makes rope gets another kind",
        "make one of those layers 'encoding' in model.layers, or use encoding=rope with "
        "model.layers",
    )


def too_long(written: str, entries: int, n: int, entry: str, index: int) -> PosencError:
    """A pattern longer than the model whose entry ``entry`` (at ``index``) no layer gets."""
    return PosencError(
        f"{written} has {entries} entries for {n} layers: {entry} reaches no layer",
        f"use model.n_layers={index + 1} or more, or at most {n} entries",
    )


def _check_other(cfg: DictConfig, name: str, written: str) -> None:
    """An encoding the pattern names besides the run's: one of posenc's, acting in attention,
    without a pattern of its own, and valid for this model with its parameters."""
    from posenc_cli.encodings.registry import encoding_class, encoding_params  # imports torch

    options = group_options("encoding")
    _require(
        name in options,
        f"{written} names '{name}', which is not 'encoding', 'none' or one of posenc's "
        f"encodings{closest(name, options)}",
        f"use {EXAMPLE}, or an encoding's name (posenc encodings lists them)",
    )
    parameters = OmegaConf.to_container(cfg.model.layer_encodings[name], resolve=True)
    section = layer_encoding_config(name, cast(dict[str, Any], parameters))
    cls = encoding_class(str(section["_target_"]))
    _require(
        _acts_in_attention(cls) and "pattern" not in section,
        f"{written} names {name}, which "
        + ("has a layer pattern of its own" if "pattern" in section else "acts once, at the input"),
        "name encodings that act in attention in every layer (rope, alibi, t5, fox, ...)",
    )
    m = cfg.model
    dims = model_dims(m.d_model, m.n_heads, m.n_layers)
    check_parameters(name, cls, encoding_params(section), dims, f"model.layer_encodings.{name}")


def _acts_in_attention(cls: type[PositionalEncoding]) -> bool:
    from posenc_cli.encodings.base import PositionalEncoding  # deferred: it imports torch

    return cls.embed is PositionalEncoding.embed


def _require(ok: bool, what: str, fix: str) -> None:
    if not ok:
        raise PosencError(what, fix)
