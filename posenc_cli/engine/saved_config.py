"""A run's config against the config its checkpoint was saved with.

A checkpoint keeps the config it was trained under. The weights alone do not say how they are
read: a hand-edited .hydra/config.yaml that keeps every weight's shape (T5's max_distance, a
window, log-n scaling, the training length FIRE and CoPE read) would build a model that
loads the weights and computes something else. Every consumer of a checkpoint (eval, inspect,
extend, export, resume) checks the sections that decide how the weights are read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.common.shown import shown
from posenc_cli.config.run_config import RunConfig
from posenc_cli.encodings.names import META_KEYS
from posenc_cli.engine import checkpoint

#: What the weights mean besides their shapes: the model, the encoding with its parameters,
#: and the training length (learned and CoPE tables, FIRE's L, log-n scaling read it).
WEIGHT_KEYS = ("model", "encoding", "train.context_length")
#: What a resume continues besides the weights: the whole run but how it is executed
#: (engine/resume.py RESUME_MAY_CHANGE) and the data cache's place (the user's own).
RESUMED_KEYS = (*WEIGHT_KEYS, "train", "seed", "data", "task", "extend")
RESUME_SKIPS = frozenset(
    {"train.threads", "train.compile", "train.nproc", "train.attention", "data.cache_dir"}
)


def check_saved_config(
    state: dict[str, Any],
    cfg: RunConfig,
    path: Path,
    keys: tuple[str, ...] = WEIGHT_KEYS,
    skips: frozenset[str] = frozenset(),
) -> None:
    """Refuse when ``cfg`` differs in ``keys`` (but ``skips``) from the config ``state`` was
    saved with. A checkpoint from before posenc kept its config is read as it is; one with a
    weights digest always kept it, so one without is refused."""
    saved = state.get("config")
    if not isinstance(saved, dict):
        if "weights_sha256" in state:
            raise PosencError(
                f"checkpoint '{path}' records its weights' digest but not the config it was "
                "saved with (changed since it was saved?)",
                "restore the run's checkpoints from its owner",
            )
        return
    now = cfg.as_yaml()
    for dotted in keys:
        try:
            found = _difference_at(saved, now, dotted, skips)
        except RecursionError:  # a crafted config nested beyond reading
            raise PosencError(
                f"checkpoint '{path}' holds a config nested too deeply to read",
                "restore the run's checkpoints from its owner",
            ) from None
        if found is not None:
            key, old, new = found
            raise PosencError(
                f"the run's .hydra/config.yaml gives {key}={_brief(new)}, but checkpoint "
                f"'{path}' was saved with {key}={_brief(old)}",
                f"restore the run's .hydra/config.yaml ({key}={_brief(old)}); to change "
                "the run, train a new one or `posenc extend` this one",
            )


def check_run_checkpoint(run_dir: Path, cfg: RunConfig) -> None:
    """The resumed run's config against its checkpoints/last.pt's, if it has one: before a
    resume prepares data or trains (a damaged checkpoint is one line here too)."""
    path = RunDir(run_dir).checkpoint("last")
    if path.is_file():
        check_saved_config(checkpoint.load(path), cfg, path, RESUMED_KEYS, RESUME_SKIPS)


def _brief(value: Any) -> str:
    text = shown(value)
    return text if len(text) <= 60 else text[:57] + "..."


_ABSENT = object()


def _select(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        tree = tree.get(part, _ABSENT) if isinstance(tree, dict) else _ABSENT
    return tree


def _difference_at(
    saved: dict[str, Any], now: dict[str, Any], dotted: str, skips: frozenset[str]
) -> tuple[str, Any, Any] | None:
    was = _select(saved, dotted)
    return None if was is _ABSENT else _first_difference(was, _select(now, dotted), dotted, skips)


def _first_difference(
    was: Any, now: Any, key: str, skips: frozenset[str] = frozenset()
) -> tuple[str, Any, Any] | None:
    """The first key (dotted) whose value differs; keys only one side has are skipped (added or
    removed by another version of posenc), as are the encoding's descriptive keys and values
    an imported run saved unresolved."""
    if key in skips:
        return None
    if isinstance(was, dict) and isinstance(now, dict):
        for name in was.keys() & now.keys():
            if key == "encoding" and name in META_KEYS - {"name"}:
                continue
            found = _first_difference(was[name], now[name], f"{key}.{name}", skips)
            if found is not None:
                return found
        return None
    if isinstance(was, str) and was.startswith("${"):
        return None
    if isinstance(was, list) and isinstance(now, list) and len(was) == len(now):
        for i, (a, b) in enumerate(zip(was, now, strict=True)):
            if _first_difference(a, b, f"{key}[{i}]") is not None:
                return key, was, now
        return None
    same = was == now and isinstance(was, bool) == isinstance(now, bool)
    return None if same else (key, was, now)
