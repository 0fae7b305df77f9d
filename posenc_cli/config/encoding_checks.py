"""The composed config's encoding, checked before anything is created.

The class an encoding names is the authority on its parameters: its constructor's typed
signature (encodings/parameters.py) says which exist and what each may be, so checking them
imports the class, and torch with it. A config error is still one line before any run
directory exists; only the schema's own keys are checked without torch.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.common.rules import NAME_PATTERN
from posenc_cli.config.groups import group_options, option_file
from posenc_cli.config.layer_checks import check_layers
from posenc_cli.config.rescale_checks import check_child_sets, check_eval_sets, rotated_pairs
from posenc_cli.config.window_checks import check_windows
from posenc_cli.encodings.parameters import check_parameters, model_dims

if TYPE_CHECKING:
    pass


def check_encoding(cfg: DictConfig) -> None:
    """The encoding is one of posenc's, with its parameters present and valid for the model."""
    # here, not at the top: the registry imports torch, which help screens must not load
    from posenc_cli.encodings.registry import encoding_class, encoding_params

    enc = cfg.encoding
    _require(
        "_target_" in enc and "name" in enc,
        "the encoding config has no _target_ or name",
        "see configs/encoding/rope.yaml",
    )
    _require(
        bool(NAME_PATTERN.fullmatch(str(enc.name))),
        f"encoding.name is '{enc.name}', not a plain name",
        "use letters, digits, '_', '.' or '-' (it names the run directory)",
    )
    _check_option_class(enc)
    cls = encoding_class(str(enc._target_))
    model = model_dims(cfg.model.d_model, cfg.model.n_heads, cfg.model.n_layers)
    params = encoding_params(enc)
    check_parameters(str(enc.name), cls, params, model)
    _check_lengths(cfg, params.get("max_len"))
    check_layers(cfg, cls)
    _check_window(cfg, params.get("window"))
    check_windows(cfg, params)
    _require(
        not cfg.model.logn_scaling or cls.scales_with_queries,
        f"model.logn_scaling would scale only the q·k part of {enc.name}'s logits",
        "drop model.logn_scaling (set it to false)",
    )
    _require(
        cfg.eval.rope_scaling == "none" or cls.rotary,
        f"eval.rope_scaling={cfg.eval.rope_scaling} needs a RoPE-family encoding, not '{enc.name}'",
        "evaluate a rope or xpos run, or drop eval.rope_scaling",
    )
    if cls.rotary:
        pairs = rotated_pairs(cfg.model.d_model, cfg.model.n_heads, params)
        check_eval_sets(cfg.eval, pairs)
        check_child_sets(cfg.extend, pairs)


def is_rotary(enc: DictConfig) -> bool:
    """Whether the config's encoding is RoPE-family (context extension rescales it)."""
    from posenc_cli.encodings.registry import encoding_class  # deferred: it imports torch

    return encoding_class(str(enc._target_)).rotary


def _check_option_class(enc: DictConfig) -> None:
    """An encoding chosen by name keeps its YAML's class; a renamed one names any of posenc's."""
    name = str(enc.name)
    if name not in group_options("encoding"):
        return
    own = _read_yaml(option_file("encoding", name))
    _require(
        str(enc._target_) == str(own._target_),
        f"encoding._target_ is '{enc._target_}', not the class of encoding '{name}'",
        f"drop the encoding._target_ override, or choose the encoding by name (encoding={name})",
    )


@functools.cache
def _read_yaml(path: Path) -> DictConfig:
    """An option's YAML, read once per process: a sweep checks every job's encoding against
    its option (read-only here: the shared copy is never changed)."""
    return cast(DictConfig, OmegaConf.load(path))  # an option's YAML is a mapping


def _check_lengths(cfg: DictConfig, max_len: Any) -> None:
    """An absolute table must cover the training length and the positions it samples from."""
    L = cfg.train.context_length
    _require(
        max_len is None or max_len >= L,
        f"encoding.max_len={max_len} is below train.context_length={L}",
        f"raise encoding.max_len to at least {L}, or train shorter",
    )
    K = cfg.train.position_range
    _require(
        max_len is None or K is None or max_len >= K,
        f"encoding.max_len={max_len} is below train.position_range={K}",
        f"raise encoding.max_len to at least {K}, or lower train.position_range",
    )


def _check_window(cfg: DictConfig, window: Any) -> None:
    """A sliding window (rnope_swa) as long as the longest sequence the run trains on or
    evaluates hides no key anywhere: the windowed layers would be plain RoPE layers."""
    if window is None:
        return
    L = int(cfg.train.context_length)
    # eval.factors, the older flat name, is the section's value unless given, and then wins
    factors = cfg.eval.factors if "factors" in cfg.eval else cfg.eval.extrapolation.factors
    longest = max([L, *(round(L * float(f)) for f in factors)])
    _require(
        window < longest,
        f"encoding.window={window} hides no key at any length this run trains or evaluates "
        f"(the longest is {longest} tokens)",
        f"choose encoding.window below {longest}, or evaluate longer (eval.factors)",
    )


def _require(ok: bool, what: str, fix: str) -> None:
    if not ok:
        raise PosencError(what, fix)
