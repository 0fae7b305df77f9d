"""The one parser of override strings (Hydra's grammar) and what posenc reads from them."""

from __future__ import annotations

import fnmatch
import itertools
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException

from posenc_cli.common.errors import PosencError, closest
from posenc_cli.config.groups import GROUPS, group_options

MAX_SWEEP_JOBS = 500


def parse(overrides: list[str]) -> list[Any]:
    """Hydra's Override objects; a malformed one is one line naming it."""
    try:
        return OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as exc:
        bad = _first_unparsable(overrides)
        hint = (
            "quote values that contain '=', spaces or other special characters, e.g. "
            "data.path='\"my=file.txt\"'"
            if bad.count("=") > 1 or not bad.isascii()
            else "write overrides as key=value, e.g. train.steps=500"
        )
        raise PosencError(
            f"cannot parse override '{bad}': {str(exc).splitlines()[0]}", hint
        ) from None


def _first_unparsable(overrides: list[str]) -> str:
    parser = OverridesParser.create()
    for text in overrides:
        try:
            parser.parse_overrides([text])
        except OverrideParseException:
            return text
    return overrides[0] if overrides else ""


def key_of(text: str) -> str:
    """The key an override string sets: '+train.x=1' -> 'train.x', '~seed' -> 'seed'."""
    return text.split("=", 1)[0].lstrip("+~")


def given(overrides: list[str], key: str) -> bool:
    """Whether the overrides set ``key`` explicitly."""
    return any(key_of(o) == key for o in overrides)


def values_of(override: Any) -> list[str]:
    """Every value of an override: one, or each value of a sweep (a,b,c; glob(...))."""
    if override.is_sweep_override():
        if override.value_type is not None and override.value_type.name == "GLOB_CHOICE_SWEEP":
            return _glob(override)
        return [str(v) for v in override.sweep_string_iterator()]
    # in override syntax: null, not Python's None ([4,null] would come back as "[4, None]")
    return [override.get_value_element_as_str(override.value())]


def _glob(override: Any) -> list[str]:
    glob = override.value()
    options = group_options(override.key_or_group)
    chosen = [o for o in options if any(fnmatch.fnmatch(o, p) for p in glob.include)]
    return [o for o in chosen if not any(fnmatch.fnmatch(o, p) for p in glob.exclude)]


def check_group_choices(overrides: list[str]) -> None:
    """Unknown option of a group (encoding=ropee) -> one line naming the choices."""
    for ov in parse(overrides):
        group = ov.key_or_group
        if group not in GROUPS or ov.is_delete():
            continue
        choices = group_options(group)
        for value in values_of(ov):
            if value not in choices and value != "null":
                raise PosencError(
                    f"unknown {group} '{value}'{closest(value, choices)}",
                    f"choose one of: {', '.join(choices)}",
                )


def fixed_overrides(overrides: list[str]) -> list[str]:
    """The overrides that are not sweeps (a,b,c lists, ranges, choices)."""
    return [
        text
        for text, ov in zip(overrides, parse(overrides), strict=True)
        if not ov.is_sweep_override()
    ]


def first_job(overrides: list[str]) -> list[str]:
    """The overrides with every sweep at its first value: a config that every key the sweep
    needs has a value in (data=text with data.path=a.txt,b.txt composes with a.txt)."""
    return [
        text if not ov.is_sweep_override() else f"{ov.get_key_element()}={values_of(ov)[0]}"
        for text, ov in zip(overrides, parse(overrides), strict=True)
    ]


def check_each_key_once(overrides: list[str]) -> None:
    """A swept key given again (swept or fixed) would leave it unclear which value a job has,
    and jobs that differ only there would share one folder. A fixed key given twice is
    harmless: the last value wins, as in `posenc train`."""
    seen: dict[str, tuple[str, bool]] = {}
    for text, ov in zip(overrides, parse(overrides), strict=True):
        key = key_of(text)
        swept = bool(ov.is_sweep_override())
        if key in seen and (swept or seen[key][1]):
            raise PosencError(
                f"{key} is given twice ('{seen[key][0]}' and '{text}')",
                f"give {key} once, with every value to sweep, e.g. {key}=a,b",
            )
        seen[key] = (text, swept)


def expand_sweep(overrides: list[str], extra: dict[str, str] | None = None) -> list[list[str]]:
    """The override lists of every job a sweep would run (cartesian product of a,b,c lists);
    ``extra`` are the sweeper's params from the config, which the command line overrides."""
    parsed = parse(overrides)
    axes = [
        [f"{ov.get_key_element()}={v}" for v in values_of(ov)] if ov.is_sweep_override() else [text]
        for text, ov in zip(overrides, parsed, strict=True)
    ]
    keys = {ov.get_key_element() for ov in parsed}
    for key, spec in (extra or {}).items():
        if key not in keys:
            axes.append([f"{key}={v}" for v in values_of(parse([f"{key}={spec}"])[0])])
    n_jobs = 1
    for axis in axes:
        n_jobs *= len(axis)
    if n_jobs > MAX_SWEEP_JOBS:
        raise PosencError(f"the sweep has {n_jobs} jobs", f"sweep at most {MAX_SWEEP_JOBS}")
    return [list(job) for job in itertools.product(*axes)]


def quote(value: str) -> str:
    """Quote a value for Hydra's override grammar (paths may contain ':' or spaces)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
