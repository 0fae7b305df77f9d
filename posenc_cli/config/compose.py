"""Compose configs/ with command-line overrides and validate the result against the schema.

Every problem a user can cause here becomes a PosencError (one line, exit 2) *before* any
run directory is created, so a typo never leaves debris or touches earlier runs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.plugins import Plugins
from hydra.errors import HydraException, OverrideParseException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import (
    InterpolationResolutionError,
    OmegaConfBaseException,
    ValidationError,
)

from posenc_cli.common.errors import PosencError
from posenc_cli.config.checks import check_keys_present, check_rules
from posenc_cli.config.effect_checks import check_effects, check_new_run
from posenc_cli.config.errors import resolution_error, unknown_key
from posenc_cli.config.eval_sections import check_sections, fold_older_names, typed_part
from posenc_cli.config.groups import config_dir
from posenc_cli.config.hydra_checks import check_hydra_layout
from posenc_cli.config.layer_encodings import fill_layer_encodings
from posenc_cli.config.overrides import check_group_choices
from posenc_cli.config.run_config import RunConfig, typed
from posenc_cli.config.schema import RootConfig
from posenc_cli.config.task_checks import prepare_task


def compose(overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """Composed and validated config; raises PosencError naming the offending key."""
    check_group_choices(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            cfg = hydra_compose("config", overrides=overrides, return_hydra_config=with_hydra)
    except OverrideParseException as exc:
        raise PosencError(
            f"cannot parse overrides: {str(exc).splitlines()[0]}",
            "write overrides as key=value, e.g. train.steps=500",
        ) from None
    except (HydraException, OmegaConfBaseException, ValueError, TypeError, KeyError) as exc:
        raise _composition_error(exc) from None
    finally:
        GlobalHydra.instance().clear()
    validate(cfg)
    check_effects(cfg, overrides)
    check_new_run(cfg, overrides)
    if with_hydra:
        check_hydra_layout(cfg)
    return cfg


def load(overrides: list[str]) -> RunConfig:
    """The config of ``overrides``, composed, validated and typed: what a run reads."""
    return typed(compose(overrides))


def _composition_error(exc: Exception) -> PosencError:
    text = str(exc)
    key = re.search(r"Could not (?:override|append to|delete from) '([^']+)'", text)
    if key:
        name = key.group(1)
        if "not in struct" in text or "To append" in text or "Key '" in text:
            return unknown_key(name)
        return PosencError(
            f"cannot set '{name}': {text.splitlines()[-1].strip()}",
            "check the value's type against the YAML in configs/",
        )
    missing = re.search(r"Could not find '([^']+)'", text)
    if missing and missing.group(1).startswith("hydra/launcher/"):
        return PosencError(
            f"no Hydra launcher '{missing.group(1).rsplit('/', 1)[1]}' is installed",
            f"installed: {', '.join(installed_launchers())}; "
            "others come as hydra-<name>-launcher packages",
        )
    if missing:
        return PosencError(
            f"no config '{missing.group(1)}'",
            "run `posenc --help` to list the config groups and their options",
        )
    cause = exc.__cause__ or exc
    first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return PosencError(
        f"invalid config: {first}", "run `posenc train --help` for the accepted keys"
    )


def installed_launchers() -> list[str]:
    """The hydra/launcher options of the installed Hydra plugins (basic is Hydra's own)."""

    Plugins.instance()  # discovering the plugins registers their configs
    return sorted(n.removesuffix(".yaml") for n in ConfigStore.instance().list("hydra/launcher"))


def validate(cfg: DictConfig) -> None:
    """Presence, types and ranges against the schema, then the rules across keys."""
    kept: list[Any] = [k for k in cfg.keys() if k != "hydra"]  # a received key: any type
    plain = OmegaConf.masked_copy(cfg, kept)
    check_keys_present(plain)
    fill_layer_encodings(cfg)  # what the run saves; plain, what the checks read, takes a copy
    plain.model.layer_encodings = cfg.model.layer_encodings
    try:
        prepare_task(plain)  # a task run derives its train.context_length: the caller's too
        cfg.train.context_length = plain.train.context_length
        typed = cast(
            DictConfig, OmegaConf.merge(OmegaConf.structured(RootConfig), typed_part(plain))
        )
        OmegaConf.resolve(typed)
    except InterpolationResolutionError as exc:
        raise resolution_error(exc, exc.full_key or _unresolvable_key(plain)) from None
    except ValidationError as exc:
        raise _type_error(exc) from None
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        raise unknown_key(key) if key else _shape_error(str(exc)) from None
    _check_resolved_types(plain, typed)
    _take_typed_scalars(cfg, typed)
    check_rules(typed)
    check_sections(plain)
    fold_older_names(cfg.eval)
    _check_data_path(cfg)


def _shape_error(text: str) -> PosencError:
    """OmegaConf's refusal to merge a mapping into a list (or the reverse), which names no key."""
    return PosencError(
        f"invalid config: {text.splitlines()[0]}",
        "a key that takes a list got a mapping, or the reverse: write a list in brackets, "
        "e.g. 'model.layers=[encoding,none]', and a mapping in braces",
    )


def _type_error(exc: ValidationError) -> PosencError:
    """A value of the wrong type, with the two slips that cause most: Python's None for YAML's
    null, and a bare value where the key takes a list."""
    msg = str(exc.msg).splitlines()[0]
    fix = "give a value of the type in configs/"
    if "Value 'None' of type 'str'" in msg:
        fix = "write null for no value (None is a string here)"
    elif "is not a ListConfig, list or tuple" in msg:
        msg, fix = "it takes a list", f"write it in brackets, e.g. {exc.full_key}=[...]"
    return PosencError(f"wrong type for '{exc.full_key}': {msg}", fix)


def _check_resolved_types(plain: DictConfig, typed: DictConfig, prefix: str = "") -> None:
    """A ``${…}`` must resolve to a value of its key's type itself: the schema's check converts
    ``${oc.env:X,3}``'s string "3" for an int key, but the run reads the config as composed,
    where it stays a string (seed="3" would reach torch.manual_seed)."""
    for key in plain:
        name = f"{prefix}{key!s}"
        if key not in typed:
            continue
        node = plain._get_node(key)
        if node is None or node._is_missing():
            continue  # a mandatory ??? left unset: check_keys_present names it
        if isinstance(node, DictConfig):
            if isinstance(typed._get_node(key), DictConfig):
                _check_resolved_types(node, typed[key], f"{name}.")
        elif node._is_interpolation():
            got, want = plain[key], typed[key]
            if type(got) is not type(want) and not (isinstance(want, float) and type(got) is int):
                raise PosencError(
                    f"{name}={node._value()} resolves to {got!r} ({type(got).__name__}), not "
                    f"{type(want).__name__}",
                    f"give a plain value, e.g. {name}={want!r}",
                )


def _take_typed_scalars(cfg: DictConfig, typed: DictConfig) -> None:
    """A quoted value the schema converts (``train.steps='"10"'``) is stored converted, so that
    the saved config is the run as it ran: the string "10" would read back as text."""
    for key in cfg:
        if key == "hydra" or key not in typed:
            continue
        node, want = cfg._get_node(key), typed._get_node(key)
        if isinstance(node, DictConfig) and isinstance(want, DictConfig):
            _take_typed_scalars(node, want)
        elif (
            node is not None
            and not isinstance(node, (DictConfig, ListConfig))
            and not node._is_interpolation()
            and isinstance(node._value(), str)
            and not isinstance(typed[key], str | None)
        ):
            cfg[key] = typed[key]


def _unresolvable_key(cfg: DictConfig, prefix: str = "") -> str | None:
    """The first key whose ${...} cannot be resolved (OmegaConf does not always name it)."""
    for key in cfg:
        name = f"{prefix}{key!s}"
        try:
            node = cfg[key]
        except OmegaConfBaseException:
            return name
        if isinstance(node, DictConfig) and (found := _unresolvable_key(node, f"{name}.")):
            return found
        if isinstance(node, ListConfig):
            try:
                list(node)  # resolves every element
            except OmegaConfBaseException:
                return name
    return None


#: What a data option's mandatory ``???`` key takes, for the message that asks for it.
NEEDED = {
    "dataset": "a hub name or a local folder",
    "path": "FILE_OR_DIR",
    "val_path": "FILE_OR_DIR",
}


def _check_data_path(cfg: DictConfig) -> None:
    for key in cfg.data:
        if OmegaConf.is_missing(cfg.data, str(key)):
            raise PosencError(
                f"data={cfg.data.name} needs data.{key}",
                f"add data.{key}={NEEDED.get(str(key), 'VALUE')} to the command",
            )
    for key in ("path", "val_path"):
        value = cfg.data[key]
        if value is None:
            continue
        if not Path(str(value)).expanduser().exists():
            raise PosencError(
                f"data.{key} '{value}' does not exist",
                "give an existing UTF-8 text file or a folder of .txt files",
            )
