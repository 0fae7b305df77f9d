"""Compose configs/ with command-line overrides, validate them, and choose the run directory.

Every problem a user can cause here becomes a PosencError (one line, exit 2) *before* any
run directory is created, so a typo never leaves debris or touches earlier runs.
"""

from __future__ import annotations

import difflib
import itertools
import re
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (InterpolationResolutionError, MissingMandatoryValue,
                              OmegaConfBaseException, ValidationError)

from posenc_cli.errors import PosencError
from posenc_cli.schema import RootConfig

GROUPS = ("encoding", "model", "data", "train", "eval", "bench", "experiment")
DEVICES = ("auto", "cpu", "cuda", "mps")
PRECISIONS = ("auto", "fp32", "bf16")
EVAL_MODES = ("nonoverlapping", "sliding")
MAX_SWEEP_JOBS = 500


def config_dir() -> Path:
    """configs/ shipped inside the wheel, else the checkout's top-level configs/ (editable)."""
    shipped = Path(__file__).resolve().parent / "configs"
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parent.parent / "configs"


def group_options(group: str) -> list[str]:
    """Names of the YAML files of one config group — the registry of that group."""
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


def closest(word: str, choices: list[str]) -> str:
    """' (did you mean X?)' when a choice is close to ``word``, else ''."""
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""


def _parse(overrides: list[str]) -> list[Any]:
    try:
        return OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as exc:
        bad = next((o for o in overrides if "=" not in o), overrides[0] if overrides else "")
        raise PosencError(f"cannot parse override '{bad}': {str(exc).splitlines()[0]}",
                          "write overrides as key=value, e.g. train.steps=500") from None


def _override_values(override: Any) -> list[str]:
    if override.is_sweep_override():
        return [str(v) for v in override.sweep_string_iterator()]
    return [str(override.value())]


def check_group_choices(overrides: list[str]) -> None:
    """Unknown option of a group (encoding=ropee) -> one line naming the choices."""
    for ov in _parse(overrides):
        group = ov.key_or_group
        if group not in GROUPS or ov.is_delete():
            continue
        choices = group_options(group)
        for value in _override_values(ov):
            if value not in choices and value != "null":
                raise PosencError(
                    f"unknown {group} '{value}'{closest(value, choices)}",
                    f"choose one of: {', '.join(choices)}")


def fixed_overrides(overrides: list[str]) -> list[str]:
    """The overrides that are not sweeps (a,b,c lists, ranges, choices)."""
    return [text for text, ov in zip(overrides, _parse(overrides))
            if not ov.is_sweep_override()]


def expand_sweep(overrides: list[str], extra: dict[str, str] | None = None) -> list[list[str]]:
    """The override lists of every job a sweep would run (cartesian product of a,b,c lists)."""
    parsed = _parse(overrides)
    axes: list[list[str]] = []
    for ov in parsed:
        key = ov.get_key_element()
        axes.append([f"{key}={v}" for v in _override_values(ov)])
    for key, spec in (extra or {}).items():
        if not any(o.get_key_element() == key for o in parsed):
            axes.append([f"{key}={v.strip()}" for v in str(spec).split(",")])
    n_jobs = 1
    for axis in axes:
        n_jobs *= len(axis)
    if n_jobs > MAX_SWEEP_JOBS:
        raise PosencError(f"the sweep has {n_jobs} jobs", f"sweep at most {MAX_SWEEP_JOBS}")
    return [list(job) for job in itertools.product(*axes)]


def compose(overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """Composed and validated config; raises PosencError naming the offending key."""
    check_group_choices(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            cfg = hydra_compose("config", overrides=overrides, return_hydra_config=with_hydra)
    except OverrideParseException as exc:
        raise PosencError(f"cannot parse overrides: {str(exc).splitlines()[0]}",
                          "write overrides as key=value, e.g. train.steps=500") from None
    except (HydraException, OmegaConfBaseException, ValueError, TypeError, KeyError) as exc:
        raise _composition_error(exc, overrides) from None
    finally:
        GlobalHydra.instance().clear()
    validate(cfg)
    return cfg


def _composition_error(exc: Exception, overrides: list[str]) -> PosencError:
    text = str(exc)
    key = re.search(r"Could not (?:override|append to) '([^']+)'", text)
    if key:
        name = key.group(1)
        if "not in struct" in text or "To append" in text or "Key '" in text:
            return _unknown_key(name)
        return PosencError(f"cannot set '{name}': {text.splitlines()[-1].strip()}",
                           "check the value's type against the YAML in configs/")
    missing = re.search(r"Could not find '([^']+)'", text)
    if missing:
        return PosencError(f"no config '{missing.group(1)}'",
                           "run `posenc --help` to list the config groups and their options")
    cause = exc.__cause__ or exc
    first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return PosencError(f"invalid config: {first}",
                       "run `posenc train --help` for the accepted keys")


def _unknown_key(name: str) -> PosencError:
    parent, _, leaf = name.rpartition(".")
    base = OmegaConf.structured(RootConfig)
    node = OmegaConf.select(base, parent) if parent else base
    valid = sorted(node.keys()) if isinstance(node, DictConfig) else []
    if parent and node is None:
        top = parent.split(".")[0]
        return PosencError(f"unknown key '{name}'{closest(top, sorted(base.keys()))}",
                           f"top-level keys: {', '.join(sorted(base.keys()))}")
    if parent == "encoding":
        return PosencError(f"unknown key '{name}': this encoding has no parameter '{leaf}'",
                           "see its YAML in configs/encoding/ (`posenc encodings`)")
    hint = closest(leaf, valid) if valid else ""
    return PosencError(f"unknown key '{name}'{hint}",
                       f"valid keys of {parent or 'the root'}: {', '.join(valid)}"
                       if valid else "check the spelling; `posenc train --help` lists the groups")


def validate(cfg: DictConfig) -> None:
    """Types against the schema, then the cross-field rules a run needs."""
    plain = OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k != "hydra"])
    try:
        typed = OmegaConf.merge(OmegaConf.structured(RootConfig), plain)
        OmegaConf.resolve(typed)
    except InterpolationResolutionError as exc:
        first = str(exc).splitlines()[0]
        raise PosencError(f"cannot resolve '{exc.full_key}': {first}",
                          "fix the ${...} interpolation or give a plain value") from None
    except ValidationError as exc:
        raise PosencError(f"wrong type for '{exc.full_key}': {exc.msg.splitlines()[0]}",
                          "give a value of the type in configs/") from None
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        raise _unknown_key(key) if key else PosencError(str(exc).splitlines()[0]) from None
    _check_rules(typed)
    _check_data_path(cfg)


def _require(ok: bool, what: str, fix: str) -> None:
    if not ok:
        raise PosencError(what, fix)


def _check_rules(cfg: DictConfig) -> None:
    m, t, d, e = cfg.model, cfg.train, cfg.data, cfg.eval
    _require(m.d_model > 0 and m.n_heads > 0 and m.n_layers > 0,
             "model.d_model, model.n_heads and model.n_layers must be positive", "use values >= 1")
    _require(m.d_model % m.n_heads == 0,
             f"model.d_model={m.d_model} is not divisible by model.n_heads={m.n_heads}",
             "pick n_heads that divides d_model, e.g. model.n_heads=4")
    _require(t.context_length >= 2, f"train.context_length={t.context_length} is too short",
             "use train.context_length >= 2")
    _require(t.steps >= 1 and t.batch_size >= 1, "train.steps and train.batch_size must be >= 1",
             "use positive values")
    _require(t.warmup_steps >= 0 and t.lr > 0 and 0 <= t.min_lr <= t.lr,
             "the learning-rate schedule needs lr > 0, 0 <= min_lr <= lr, warmup_steps >= 0",
             "fix train.lr / train.min_lr / train.warmup_steps")
    _require(t.eval_every >= 1 and t.checkpoint_every >= 1 and t.log_every >= 1,
             "train.eval_every, train.checkpoint_every and train.log_every must be >= 1",
             "use positive values")
    _require(d.vocab_size >= 257, f"data.vocab_size={d.vocab_size} is smaller than the byte "
             "alphabet plus <|endoftext|> (257)", "use data.vocab_size >= 257, e.g. 4096")
    _require(d.vocab_size <= 2**31 - 1, "data.vocab_size is too large", "use at most 2**31-1")
    _require(cfg.device in DEVICES, f"unknown device '{cfg.device}'{closest(cfg.device, list(DEVICES))}",
             f"choose one of: {', '.join(DEVICES)}")
    _require(t.precision in PRECISIONS,
             f"unknown train.precision '{t.precision}'{closest(t.precision, list(PRECISIONS))}",
             f"choose one of: {', '.join(PRECISIONS)}")
    _require(e.mode in EVAL_MODES, f"unknown eval.mode '{e.mode}'{closest(e.mode, list(EVAL_MODES))}",
             f"choose one of: {', '.join(EVAL_MODES)}")
    _require(len(e.factors) > 0 and all(f >= 1 for f in e.factors),
             "eval.factors must be a non-empty list of integers >= 1", "e.g. eval.factors=[1,2,4]")
    _require(e.stride is None or e.stride >= 1, "eval.stride must be >= 1", "e.g. eval.stride=64")
    _check_encoding(cfg)


def _check_encoding(cfg: DictConfig) -> None:
    """Building the encoding catches its own constraints (odd head dim for RoPE, …)."""
    from posenc_cli.model.transformer import build_encoding

    _require("_target_" in cfg.encoding and "name" in cfg.encoding,
             "the encoding config has no _target_ or name", "see configs/encoding/rope.yaml")
    try:
        build_encoding(cfg.encoding, cfg.model.d_model, cfg.model.n_heads, cfg.model.n_layers)
    except TypeError as exc:
        raise PosencError(f"encoding '{cfg.encoding.name}': {exc}",
                          "check its parameters in configs/encoding/") from None


def _check_data_path(cfg: DictConfig) -> None:
    for key in ("path", "val_path"):
        try:
            value = cfg.data[key]
        except MissingMandatoryValue:
            raise PosencError(f"data={cfg.data.name} needs data.{key}",
                              f"add data.{key}=FILE_OR_DIR to the command") from None
        if value is None:
            continue
        p = Path(str(value)).expanduser()
        _require(p.exists(), f"data.{key} '{value}' does not exist",
                 "give an existing UTF-8 text file or a folder of .txt files")


def resolve_run_dir(cfg: DictConfig, overrides: list[str]) -> Path:
    """The run directory: hydra.run.dir if given (must not exist yet), else a fresh default."""
    explicit = any(o.split("=", 1)[0].lstrip("+") == "hydra.run.dir" for o in overrides)
    run_dir = Path(str(cfg.hydra.run.dir))
    if explicit:
        _require(not run_dir.exists() or not any(run_dir.iterdir()),
                 f"run directory '{run_dir}' already exists",
                 "choose a new hydra.run.dir, or resume it with `posenc resume DIR`")
        return run_dir
    candidate, n = run_dir, 1
    while candidate.exists():
        candidate = run_dir.with_name(f"{run_dir.name}-{n}")
        n += 1
    return candidate
