"""`posenc compare`: put the runs' metrics.json side by side, one row per encoding.

Seeds are averaged only when everything else about the runs is equal; every distinct training or
evaluation setting gets its own table, so no number mixes two settings.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc_cli.errors import PosencError

#: metrics.json keys (plus the model dims) that make runs comparable; the seed is not among them.
TRAIN_KEYS = ("data", "vocab_size", "train_length", "steps", "train_tokens", "precision")
EVAL_KEYS = ("mode", "stride", "tokens")
OUTPUTS = ("comparison.csv", "comparison.md", "ppl_vs_length.png", "loss_by_position.png")
CAPTION = ("perplexity, mean ± std over n seeds (lower is better); best per column in bold; "
           "n/a = not applicable (e.g. beyond a learned position table)")
_ENCODING_META = {"name", "description", "paper", "_target_"}


@dataclass
class Run:
    """One run directory: its metrics and the encoding parameters from its saved config."""

    path: Path
    metrics: dict[str, Any]
    params: dict[str, Any]

    @property
    def encoding(self) -> str:
        return str(self.metrics.get("encoding"))

    @property
    def extrapolation(self) -> dict[str, Any] | None:
        ex = self.metrics.get("extrapolation")
        return ex if isinstance(ex, dict) else None


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
        paths = sorted(d.rglob("metrics.json")) if d.is_dir() else []
        if not paths:
            raise PosencError(f"no metrics.json in or below '{d}'",
                              "pass a run directory (it gets metrics.json when training ends) "
                              "or a directory that contains run directories")
        for p in paths:
            found.setdefault(p.resolve(), p)
    return list(found.values())


def load_runs(dirs: list[Path], notes: list[str]) -> list[Run]:
    """Read every metrics.json; unreadable ones become notes, so one bad file spoils nothing."""
    runs = []
    paths = find_metrics(dirs)
    for path in paths:
        try:
            metrics = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            notes.append(f"skipped {path}: unreadable ({exc})")
            continue
        if not isinstance(metrics, dict) or "encoding" not in metrics:
            notes.append(f"skipped {path}: not a posenc metrics.json (no 'encoding')")
            continue
        runs.append(Run(path.parent, metrics, _encoding_params(path.parent)))
    if not runs:
        raise PosencError(f"none of the {len(paths)} metrics.json files could be read",
                          "pass other run directories, or rerun `posenc eval` on these")
    return runs


def _encoding_params(run_dir: Path) -> dict[str, Any]:
    """Encoding parameters (e.g. RoPE theta) are only in .hydra/config.yaml; absent is fine."""
    saved = run_dir / ".hydra" / "config.yaml"
    if not saved.is_file():
        return {}
    from omegaconf import OmegaConf

    try:
        enc = OmegaConf.to_container(OmegaConf.load(saved).get("encoding") or {}, resolve=False)
    except Exception:  # a damaged optional file must not stop the comparison
        return {}
    if not isinstance(enc, dict):
        return {}
    return {k: v for k, v in enc.items() if k not in _ENCODING_META}


def settings_of(run: Run) -> dict[str, Any]:
    """What must be equal for two runs to be seeds of one experiment."""
    m, ex = run.metrics, run.extrapolation
    model = m.get("model")
    return {**{k: m.get(k) for k in TRAIN_KEYS}, **(model if isinstance(model, dict) else {}),
            **({f"eval_{k}": ex.get(k) for k in EVAL_KEYS} if ex is not None else {})}


def _key(d: Any) -> str:
    return json.dumps(d, sort_keys=True, default=str)


def group_runs(runs: list[Run], notes: list[str]) -> list[Group]:
    """Split runs by setting; a run without evaluation joins the one group it trained like."""
    groups: dict[str, Group] = {}
    for run in sorted(runs, key=lambda r: r.extrapolation is None):
        s = settings_of(run)
        if run.extrapolation is None:
            notes.append(f"{run.path}: {run.encoding} seed {run.metrics.get('seed')} has no "
                         "extrapolation results (eval.at_end=false or evaluation unfinished)")
            same = [g for g in groups.values()
                    if _key({k: g.settings.get(k) for k in s}) == _key(s)]
            if len(same) == 1:
                same[0].runs.append(run)
                continue
        groups.setdefault(_key(s), Group(s, [])).runs.append(run)
    ordered = sorted(groups.values(), key=lambda g: (g.train_length or 0, _key(g.settings)))
    labels = _labels(runs)
    for g in ordered:
        _fill_rows(g, labels, notes)
    differ = split_keys(ordered)[1]
    for g in ordered:
        g.title = describe(g.settings, differ)
    if differ:
        notes.insert(0, f"the runs differ in {', '.join(differ)}: {len(ordered)} tables, one per "
                        "setting (runs are never averaged across settings)")
    return ordered


def _labels(runs: list[Run]) -> dict[int, str]:
    """Row label per run: the encoding name, plus the parameters where variants of it differ."""
    variants: dict[str, dict[str, dict[str, Any]]] = {}
    for r in runs:
        variants.setdefault(r.encoding, {})[_key(r.params)] = r.params
    labels = {}
    for r in runs:
        params = list(variants[r.encoding].values())
        differ = sorted({k for p in params for k in p if any(q.get(k) != p.get(k) for q in params)})
        extra = ", ".join(f"{k}={r.params.get(k)}" for k in differ)
        labels[id(r)] = f"{r.encoding} ({extra})" if extra else r.encoding
    return labels


def _fill_rows(group: Group, labels: dict[int, str], notes: list[str]) -> None:
    """One row per label, seeds aggregated; duplicate seeds are kept but pointed out."""
    ppls = {id(r): (r.extrapolation or {}).get("ppl") or {} for r in group.runs}
    group.lengths = sorted({int(k) for p in ppls.values() for k in p if str(k).isdigit()})
    by_label: dict[str, list[Run]] = {}
    for r in sorted(group.runs, key=_seed_order):
        by_label.setdefault(labels[id(r)], []).append(r)
    for label, runs in sorted(by_label.items()):
        seeds = [r.metrics.get("seed") for r in runs]
        if len({str(s) for s in seeds}) < len(seeds):
            notes.append(f"{label}: a seed appears more than once ({seeds}); all are averaged")
        ppl = {n: Stat.of([ppls[id(r)].get(str(n)) for r in runs]) for n in group.lengths}
        group.rows.append(Row(
            label, runs, ppl, Stat.of([r.metrics.get("final_val_loss") for r in runs]),
            Stat.of([r.metrics.get("tokens_per_s") for r in runs])))


def _seed_order(run: Run) -> tuple[bool, int, str]:
    seed = run.metrics.get("seed")
    return (not isinstance(seed, int), seed if isinstance(seed, int) else 0, str(seed))


def describe(settings: dict[str, Any], keys: list[str]) -> str:
    """'train_length=128, steps=2000' for the given keys."""
    return ", ".join(f"{k}={settings.get(k)}" for k in keys)


def split_keys(groups: list[Group]) -> tuple[list[str], list[str]]:
    """Setting keys equal in all groups (set ones only), and the keys that tell groups apart."""
    keys = list(dict.fromkeys(k for g in groups for k in g.settings))
    differ = [k for k in keys if len({_key(g.settings.get(k)) for g in groups}) > 1]
    return [k for k in keys if k not in differ and groups[0].settings.get(k) is not None], differ


def _cell(stat: Stat | None, n_row: int, digits: int | None, spread: bool = True) -> str:
    """'61.00 ± 1.00': digits follow the mean's size; '(n=2)' when not every run has a value."""
    if stat is None:
        return "n/a"
    if digits is None:
        digits = 0 if abs(stat.mean) >= 1000 else 1 if abs(stat.mean) >= 100 else 2
    text = f"{stat.mean:,.{digits}f}"
    if spread and stat.std is not None:
        text += f" ± {stat.std:,.{digits}f}"
    return text if stat.n == n_row else f"{text} (n={stat.n})"


def cells(group: Group) -> tuple[list[str], list[list[tuple[str, bool]]]]:
    """Header and (text, is best) cells, shared by the terminal and the markdown table."""
    tl = group.train_length
    header = ["encoding", "n", *(f"{n} ({n / tl:g}x)" if tl else str(n) for n in group.lengths),
              "val loss", "tokens/s"]
    columns = [([r.ppl[n] for r in group.rows], min, None, True) for n in group.lengths]
    columns += [([r.val_loss for r in group.rows], min, 3, True),
                ([r.tokens_per_s for r in group.rows], max, 0, False)]
    body = [[(r.label, False), (str(len(r.runs)), False)] for r in group.rows]
    for stats, pick, digits, spread in columns:
        means = [s.mean for s in stats if s is not None]
        best = pick(means) if len(means) > 1 else None
        for row, r, s in zip(body, group.rows, stats):
            row.append((_cell(s, len(r.runs), digits, spread), s is not None and s.mean == best))
    return header, body


def _title(group: Group) -> str:
    return "perplexity by evaluation length" + (f" — {group.title}" if group.title else "")


def render(group: Group) -> Any:
    """The rich table for the terminal, best per column in bold green."""
    from rich.table import Table
    from rich.text import Text

    header, body = cells(group)
    table = Table(title=_title(group))
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=i < 2)
    for row in body:
        table.add_row(*(Text(t, style="bold green" if best else "dim" if t == "n/a" else "")
                        for t, best in row))
    return table


def markdown(groups: list[Group]) -> str:
    """Markdown tables ready to paste into a README."""
    parts = []
    for g in groups:
        header, body = cells(g)
        lines = [f"**{_title(g).capitalize()}**", "", "| " + " | ".join(header) + " |",
                 "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
        lines += ["| " + " | ".join(f"**{t}**" if best else t for t, best in row) + " |"
                  for row in body]
        parts.append("\n".join(lines))
    common = describe(groups[0].settings, split_keys(groups)[0])
    return "\n\n".join([*parts, f"_{CAPTION}._  \n_Settings: {common}._"]) + "\n"


def write_csv(groups: list[Group], path: Path) -> None:
    """One row per encoding and setting group; empty cells where a value does not exist."""
    import csv

    lengths = sorted({n for g in groups for n in g.lengths})
    stats = ["final_val_loss", "tokens_per_s", *(f"ppl_{n}" for n in lengths)]
    fields = ["encoding", *dict.fromkeys(k for g in groups for k in g.settings), "n_seeds",
              "seeds", *(f"{s}_{part}" for s in stats for part in ("mean", "std"))]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        for g in groups:
            for r in g.rows:
                rec = {"encoding": r.label, **g.settings, "n_seeds": len(r.runs),
                       "seeds": " ".join(str(x.metrics.get("seed")) for x in r.runs)}
                values = {"final_val_loss": r.val_loss, "tokens_per_s": r.tokens_per_s,
                          **{f"ppl_{n}": s for n, s in r.ppl.items()}}
                for name, s in values.items():
                    rec[f"{name}_mean"] = f"{s.mean:.6g}" if s else None
                    rec[f"{name}_std"] = f"{s.std:.6g}" if s and s.std is not None else None
                writer.writerow(rec)


def write_outputs(groups: list[Group], out_dir: Path, notes: list[str]) -> list[Path]:
    """The files of OUTPUTS; a plot with nothing to show is left out (and a stale one removed)."""
    from posenc_cli.plots import plot_loss_by_position, plot_ppl_vs_length

    paths = [out_dir / name for name in OUTPUTS]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_csv(groups, paths[0])
        paths[1].write_text(markdown(groups), encoding="utf-8")
        for plot, path in zip((plot_ppl_vs_length, plot_loss_by_position), paths[2:]):
            if not plot(groups, path):
                path.unlink(missing_ok=True)
                notes.append(f"{path.name} not written: no run has the data for it")
    except OSError as exc:
        raise PosencError(f"cannot write the comparison to '{out_dir}': {exc.strerror or exc}",
                          "choose a writable directory with --out DIR") from exc
    return [p for p in paths if p.exists()]


def compare(dirs: list[Path], out: Path | None) -> None:
    """The `posenc compare` command: tables on the terminal, files in the output directory."""
    from posenc_cli.progress import console

    notes: list[str] = []
    groups = group_runs(load_runs(dirs, notes), notes)
    written = write_outputs(groups, out or (dirs[0] if len(dirs) == 1 else Path.cwd()), notes)
    if not (console.is_terminal or "COLUMNS" in os.environ):
        from rich.console import Console

        console = Console(highlight=False, width=240)  # piped: wrapped cells help no one
    console.print(f"settings: {describe(groups[0].settings, split_keys(groups)[0])}",
                  style="dim", soft_wrap=True)
    for g in groups:
        console.print(render(g))
    console.print(CAPTION, style="dim", soft_wrap=True)
    for line in [*(f"note: {n}" for n in notes), *(f"wrote {p}" for p in written)]:
        console.print(line, style="yellow" if line.startswith("note") else None, soft_wrap=True)
