"""Runs read for `posenc compare`, grouped by setting and aggregated over seeds.

Seeds are averaged only when everything else about the runs is equal; every distinct training or
evaluation setting gets its own group (one table), so no number mixes two settings.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc_cli.common.errors import PosencError
from posenc_cli.common.regular_file import read_regular_text
from posenc_cli.common.run_layout import METRICS_FILE
from posenc_cli.evals.base import view_task
from posenc_cli.report.extension_rows import own_rows, row_suffix
from posenc_cli.report.saved_params import saved_params
from posenc_cli.report.settings import describe, model_settings, setting_key, split_keys
from posenc_cli.report.validity import implausible

#: metrics.json keys (plus the model dims) that make runs comparable; the seed is not among them.
TRAIN_KEYS = (
    "data",
    "vocab_size",
    "train_length",
    "steps",
    "train_tokens",
    "precision",
    "position_range",
)
EVAL_KEYS = ("mode", "stride", "tokens")


@dataclass
class Run:
    """One run directory: its metrics and the encoding parameters from its saved config."""

    path: Path
    metrics: dict[str, Any]
    params: dict[str, Any]
    #: The evaluation-time variant this row shows (a RoPE scaling method), None for the run's
    #: own evaluation.
    variant: str | None = None

    @property
    def encoding(self) -> str:
        return str(self.metrics.get("encoding"))

    @property
    def result(self) -> dict[str, Any] | None:
        """The result of the by-length table's task this row shows (None: not evaluated)."""
        ex = self.metrics.get(self.key)
        return ex if isinstance(ex, dict) else None

    @property
    def key(self) -> str:
        task = view_task("by_length")
        return task if self.variant is None else f"{task}_{self.variant}"


def scaling_variants(run: Run) -> list[Run]:
    """One row per RoPE-scaling evaluation of the run's own data and protocol (its key is
    ``<task>_<method>[factor]``), so compare shows each method beside plain RoPE."""
    out = []
    for key, result in run.metrics.items():
        suffix = key.removeprefix(f"{view_task('by_length')}_")
        if (
            key != suffix
            and isinstance(result, dict)
            and result.get("rope_scaling")
            and re.fullmatch(rf"{result['rope_scaling']}[0-9.]*", suffix)
        ):
            out.append(Run(run.path, run.metrics, run.params, suffix))
    return out


@dataclass
class Stat:
    """Mean, sample std (None for one seed) and range over the seeds that have a value."""

    mean: float
    std: float | None
    n: int
    lo: float
    hi: float

    @classmethod
    def of(cls, values: list[Any]) -> Stat | None:
        xs = [float(v) for v in values if isinstance(v, (int, float)) and not math.isnan(v)]
        if not xs:
            return None
        mean = sum(xs) / len(xs)
        std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
        return cls(mean, std, len(xs), min(xs), max(xs))


@dataclass
class Row:
    """One encoding (variant) within one setting group, aggregated over its seeds."""

    label: str
    runs: list[Run]
    ppl: dict[int, Stat | None]
    val_loss: Stat | None
    tokens_per_s: Stat | None
    #: The 95 % bootstrap interval of a single run's perplexity (seeds give mean ± std).
    ci: dict[int, tuple[float, float] | None] = field(default_factory=dict)


@dataclass
class Group:
    """Runs that share every setting but the encoding and the seed: one table."""

    settings: dict[str, Any]
    runs: list[Run]
    title: str = ""
    rows: list[Row] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    @property
    def train_length(self) -> int | None:
        return self.settings.get("train_length")


def find_metrics(dirs: list[Path]) -> list[Path]:
    """Every metrics.json in or below the given directories, each once."""
    found: dict[Path, Path] = {}
    for d in dirs:
        paths = sorted(d.rglob(METRICS_FILE)) if d.is_dir() else []
        if not paths:
            raise PosencError(
                f"no metrics.json in or below '{d}'",
                "pass a run directory (it gets metrics.json when training ends) "
                "or a directory that contains run directories",
            )
        for p in paths:
            found.setdefault(p.resolve(), p)
    return list(found.values())


def load_runs(dirs: list[Path], notes: list[str]) -> list[Run]:
    """Read every metrics.json; unreadable ones become notes, so one bad file spoils nothing."""
    runs = []
    paths = find_metrics(dirs)
    for path in paths:
        try:
            metrics = json.loads(read_regular_text(path))
        except (OSError, ValueError) as exc:
            notes.append(f"skipped {path}: unreadable ({exc})")
            continue
        if not isinstance(metrics, dict) or "encoding" not in metrics:
            notes.append(f"skipped {path}: not a posenc metrics.json (no 'encoding')")
            continue
        if (why := implausible(metrics)) is not None:
            notes.append(f"skipped {path}: {why}")
            continue
        run = Run(
            path.parent, metrics, saved_params(path.parent, "encoding", str(metrics["encoding"]))
        )
        runs += own_rows(run, scaling_variants(run))
    if not runs:
        raise PosencError(
            f"none of the {len(paths)} metrics.json files could be read",
            "pass other run directories, or rerun `posenc eval` on these",
        )
    return runs


def settings_of(run: Run) -> dict[str, Any]:
    """What two seeds of one experiment share (`posenc extend` runs: what the parent trained)."""
    m = run.metrics
    ex = run.result
    parent = (m.get("extend") or {}).get("parent")
    m = {**m, **parent} if isinstance(parent, dict) else m
    return {
        **{k: m.get(k) for k in TRAIN_KEYS},
        **model_settings(m),
        **({f"eval_{k}": ex.get(k) for k in EVAL_KEYS} if ex is not None else {}),
    }


def _why_none(run: Run) -> str:
    """Why a run has no result to show: results under other evaluation settings only (a
    `posenc eval RUN eval=…` with other tokens or lengths), or none at all."""
    prefix = f"{view_task('by_length')}_"
    others = sorted(
        k for k, v in run.metrics.items() if k.startswith(prefix) and isinstance(v, dict)
    )
    if others:
        return f"only {', '.join(others)}, evaluated with other settings, which no table pools"
    return "eval.at_end=false or evaluation unfinished"


def group_runs(runs: list[Run], notes: list[str]) -> list[Group]:
    """Split runs by setting; a run without evaluation joins the one group it trained like."""
    groups: dict[str, Group] = {}
    for run in sorted(runs, key=lambda r: r.result is None):
        s = settings_of(run)
        if run.result is None:
            notes.append(
                f"{run.path}: {run.encoding} seed {run.metrics.get('seed')} has no "
                f"{view_task('by_length')} results of its own settings ({_why_none(run)})"
            )
            same = [
                g
                for g in groups.values()
                if setting_key({k: g.settings.get(k) for k in s}) == setting_key(s)
            ]
            if len(same) == 1:
                same[0].runs.append(run)
                continue
        groups.setdefault(setting_key(s), Group(s, [])).runs.append(run)
    ordered = sorted(groups.values(), key=lambda g: (g.train_length or 0, setting_key(g.settings)))
    labels = row_labels(runs)
    for g in ordered:
        _fill_rows(g, labels, notes)
    differ = split_keys(ordered)[1]
    for g in ordered:
        g.title = describe(g.settings, differ)
    if differ:
        notes.insert(
            0,
            f"the runs differ in {', '.join(differ)}: {len(ordered)} tables, one per "
            "setting (runs are never averaged across settings)",
        )
    return ordered


def row_labels(runs: list[Run]) -> dict[int, str]:
    """Row label per run: the encoding name, plus the parameters where variants of it differ."""
    variants: dict[str, dict[str, dict[str, Any]]] = {}
    for r in runs:
        variants.setdefault(r.encoding, {})[setting_key(r.params)] = r.params
    labels = {}
    for r in runs:
        params = list(variants[r.encoding].values())
        differ = sorted({k for p in params for k in p if any(q.get(k) != p.get(k) for q in params)})
        extra = ", ".join(f"{k}={r.params.get(k)}" for k in differ)
        label = f"{r.encoding} ({extra})" if extra else r.encoding
        labels[id(r)] = label + row_suffix(r)
    return labels


def _fill_rows(group: Group, labels: dict[int, str], notes: list[str]) -> None:
    """One row per label, seeds aggregated; duplicate seeds are kept but pointed out."""
    ppls = {id(r): (r.result or {}).get("ppl") or {} for r in group.runs}
    group.lengths = sorted({int(k) for p in ppls.values() for k in p if str(k).isdigit()})
    by_label: dict[str, list[Run]] = {}
    for r in sorted(group.runs, key=_seed_order):
        by_label.setdefault(labels[id(r)], []).append(r)
    for label, runs in sorted(by_label.items()):
        seeds = [r.metrics.get("seed") for r in runs]
        if len({str(s) for s in seeds}) < len(seeds):
            notes.append(f"{label}: a seed appears more than once ({seeds}); all are averaged")
        ppl = {n: Stat.of([ppls[id(r)].get(str(n)) for r in runs]) for n in group.lengths}
        group.rows.append(
            Row(
                label,
                runs,
                ppl,
                Stat.of([r.metrics.get("final_val_loss") for r in runs]),
                # the mean over training steps; older runs kept only the last interval's rate
                Stat.of([r.metrics.get("tokens_per_s") for r in runs if "time_s" in r.metrics]),
                _intervals(runs, group),
            )
        )


def _intervals(runs: list[Run], group: Group) -> dict[int, tuple[float, float] | None]:
    if len(runs) != 1:
        return {}
    ci = (runs[0].result or {}).get("ppl_ci95") or {}
    return {
        n: tuple(ci[str(n)]) if isinstance(ci.get(str(n)), list) and len(ci[str(n)]) == 2 else None
        for n in group.lengths
    }


def _seed_order(run: Run) -> tuple[bool, int, str]:
    seed = run.metrics.get("seed")
    return (not isinstance(seed, int), seed if isinstance(seed, int) else 0, str(seed))
