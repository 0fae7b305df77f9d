"""`posenc compare`: the grouped runs as tables (terminal, Markdown, CSV) and plots."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from posenc_cli.common.atomic import write_text_atomic
from posenc_cli.common.console import console
from posenc_cli.common.errors import PosencError
from posenc_cli.evals.keys import TAIL
from posenc_cli.report.output_dir import writing_into
from posenc_cli.report.paired_report import (
    LEGEND,
    PairedTable,
    choose_baseline,
    paired_tables,
    write_paired,
)
from posenc_cli.report.paired_report import cells as paired_cells
from posenc_cli.report.provenance import append_provenance, command_line, provenance
from posenc_cli.report.result_report import pair_results, report_results
from posenc_cli.report.result_tables import result_tables
from posenc_cli.report.runs import Group, Row, Stat, group_runs, load_runs
from posenc_cli.report.settings import describe, split_keys
from posenc_cli.report.table import markdown_table, rich_table
from posenc_cli.report.task_paired import task_tables
from posenc_cli.report.tasks import group_tasks, is_task_run, report_tasks

OUTPUTS = ("comparison.csv", "comparison.md", "ppl_vs_length.png", "loss_by_position.png")
CAPTION = (
    "perplexity, mean ± std over n seeds, or [95 % bootstrap interval over units] for one run "
    "(lower is better); lowest per column in bold — whether two rows differ is in the paired "
    "tables, not in whether these intervals overlap; n/a = not applicable (e.g. beyond a "
    "learned position table)"
)
SPEED_CAPTION = (
    "; tokens/s = the mean over each run's training steps, measured under whatever load that run "
    "had, so it ranks nothing (`posenc bench` compares speed); n/a: a run that recorded only its "
    "last interval's rate"
)
TAIL_CAPTION = (
    f"{TAIL}: the same targets at every length, each scored as the end of a window of that "
    "length, so every one has at least length − L/2 tokens of context (no early-token effect; "
    "docs/evaluation.md)"
)
#: A column of ``cells``: its stats, what picks the best mean (None: none is best), the digits
#: (None: by magnitude) and whether the spread is shown.
Column = tuple[list[Stat | None], Callable[[list[float]], float] | None, int | None, bool]


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


def cells(group: Group, tail: bool = False) -> tuple[list[str], list[list[tuple[str, bool]]]]:
    """Header and (text, is best) cells, shared by the terminal and the markdown table: the
    perplexity of eval.mode with val loss and tokens/s, or (``tail``) of the tail protocol."""
    tl = group.train_length
    header = ["encoding", "n", *(f"{n} ({n / tl:g}x)" if tl else str(n) for n in group.lengths)]
    ppl = [tail_ppl(r, group.lengths) if tail else r.ppl for r in group.rows]
    columns: list[Column] = [([p[n] for p in ppl], min, None, True) for n in group.lengths]
    if not tail:
        header.append("val loss")
        columns.append(([r.val_loss for r in group.rows], min, 3, True))
    if not tail and shows_speed(group):
        header.append("tokens/s")
        columns.append(([r.tokens_per_s for r in group.rows], None, 0, False))
    body = [[(r.label, False), (str(len(r.runs)), False)] for r in group.rows]
    for i, (stats, pick, digits, spread) in enumerate(columns):
        means = [s.mean for s in stats if s is not None]
        best = pick(means) if pick is not None and len(means) > 1 else None
        for row, r, s in zip(body, group.rows, stats, strict=True):
            ci = r.ci.get(group.lengths[i]) if i < len(group.lengths) and not tail else None
            is_best = s is not None and s.mean == best
            row.append((_cell(s, len(r.runs), digits, spread) + _interval(ci, s), is_best))
    return header, body


def shows_speed(group: Group) -> bool:
    """Whether any run of the group recorded its mean tokens/s (a column of n/a says nothing)."""
    return any(r.tokens_per_s is not None for r in group.rows)


def caption(groups: list[Group]) -> str:
    return CAPTION + (SPEED_CAPTION if any(shows_speed(g) for g in groups) else "")


def tail_ppl(row: Row, lengths: list[int]) -> dict[int, Stat | None]:
    """The tail protocol's perplexity by length over the row's seeds."""
    parts = [((run.result or {}).get(TAIL) or {}).get("ppl") or {} for run in row.runs]
    return {n: Stat.of([p.get(str(n)) for p in parts]) for n in lengths}


def has_tail(group: Group) -> bool:
    return any(s is not None for r in group.rows for s in tail_ppl(r, group.lengths).values())


def _interval(ci: tuple[float, float] | None, stat: Stat | None) -> str:
    """' [lo–hi]': a single run's own interval (not a comparison with any other row)."""
    if ci is None or stat is None:
        return ""
    digits = 0 if stat.mean >= 1000 else 1 if stat.mean >= 100 else 2
    return f" [{ci[0]:,.{digits}f}–{ci[1]:,.{digits}f}]"


def _title(group: Group, tail: bool = False) -> str:
    what = "perplexity by evaluation length" + (f", {TAIL} protocol" if tail else "")
    return what + (f" — {group.title}" if group.title else "")


def render(group: Group, tail: bool = False) -> Any:
    """The rich table for the terminal, best per column in bold green."""
    return rich_table(_title(group, tail), *cells(group, tail))


def markdown(groups: list[Group], paired: Sequence[PairedTable] = ()) -> str:
    """Markdown tables ready to paste into a README: perplexity, then the tail protocol's,
    then the paired ratios, each with its legend."""
    parts = [markdown_table(_title(g).capitalize(), *cells(g)) for g in groups]
    common = describe(groups[0].settings, split_keys(groups)[0])
    parts.append(f"_{caption(groups)}._  \n_Settings: {common}._")
    tails = [g for g in groups if has_tail(g)]
    parts += [markdown_table(_title(g, True).capitalize(), *cells(g, True)) for g in tails]
    parts += [f"_{TAIL_CAPTION}._"] if tails else []
    parts += [markdown_table(t.title.capitalize(), *paired_cells(t)) for t in paired]
    parts += [f"_{LEGEND}._"] if paired else []
    return "\n\n".join(parts) + "\n"


def write_csv(groups: list[Group], path: Path) -> None:
    """One row per encoding and setting group; empty cells where a value does not exist."""

    lengths = sorted({n for g in groups for n in g.lengths})
    stats = ["final_val_loss", "tokens_per_s", *(f"ppl_{n}" for n in lengths)]
    fields = [
        "encoding",
        *dict.fromkeys(k for g in groups for k in g.settings),
        "n_seeds",
        "seeds",
        *(f"{s}_{part}" for s in stats for part in ("mean", "std")),
    ]
    f = io.StringIO(newline="")
    writer = csv.DictWriter(f, fields)
    writer.writeheader()
    for g in groups:
        for r in g.rows:
            rec = {
                "encoding": r.label,
                **g.settings,
                "n_seeds": len(r.runs),
                "seeds": " ".join(str(x.metrics.get("seed")) for x in r.runs),
            }
            values = {
                "final_val_loss": r.val_loss,
                "tokens_per_s": r.tokens_per_s,
                **{f"ppl_{n}": s for n, s in r.ppl.items()},
            }
            for name, s in values.items():
                rec[f"{name}_mean"] = f"{s.mean:.6g}" if s else None
                rec[f"{name}_std"] = f"{s.std:.6g}" if s and s.std is not None else None
            writer.writerow(rec)
    write_text_atomic(path, f.getvalue())


def write_outputs(
    groups: list[Group], paired: list[PairedTable], out_dir: Path, notes: list[str]
) -> list[Path]:
    """The files of OUTPUTS; a plot with nothing to show is left out (and a stale one removed)."""
    # deferred: matplotlib only when figures are written
    from posenc_cli.report.paired_plot import plot_by_length
    from posenc_cli.report.plots import plot_loss_by_position, plot_ppl_vs_length

    paths = [out_dir / name for name in OUTPUTS]
    with writing_into(out_dir):
        write_csv(groups, paths[0])
        write_text_atomic(paths[1], markdown(groups, paired))
        for plot, path in zip((plot_ppl_vs_length, plot_loss_by_position), paths[2:], strict=True):
            if not plot(groups, path):
                path.unlink(missing_ok=True)
                notes.append(f"{path.name} not written: no run has the data for it")
        paths += write_paired(paired, out_dir)
        if plot_by_length(paired, out_dir / "ratio_vs_length.png"):
            paths.append(out_dir / "ratio_vs_length.png")
        else:
            (out_dir / "ratio_vs_length.png").unlink(missing_ok=True)
    return [p for p in paths if p.exists()]


def compare(dirs: list[Path], out: Path | None, baseline: str | None = None) -> None:
    """The `posenc compare` command: tables on the terminal, files in the output directory;
    ``baseline`` the row the paired tables divide by (report/paired_report.py)."""
    notes: list[str] = []
    runs = load_runs(dirs, notes)
    # read before writing: files written into the checkout must not count as local changes
    block = provenance(runs, command_line(dirs, out, baseline))
    out_dir = out or (dirs[0] if len(dirs) == 1 else Path.cwd())
    lm = [r for r in runs if not is_task_run(r)]
    groups = group_runs(lm, notes) if lm else []
    task_groups = group_tasks([r for r in runs if is_task_run(r)], notes)
    labels = [r.label for g in groups for r in g.rows] + [
        r.label for g in task_groups for r in g.rows
    ]
    base = choose_baseline(labels, baseline)
    results = pair_results(result_tables(runs, notes), base, baseline is not None, notes)
    if results and not any(g.lengths for g in groups):
        groups = []  # a study of another result (retrieval alone): no perplexity to tabulate
    paired = [t for g in groups for t in paired_tables(g, base, baseline is not None, notes)]
    task_paired = [
        t for g in task_groups for t in task_tables(g, base, baseline is not None, notes)
    ]
    written = write_outputs(groups, paired, out_dir, notes) if groups else []
    shown = console
    if not (console.is_terminal or "COLUMNS" in os.environ):
        shown = Console(highlight=False, width=240)  # piped: wrapped cells help no one
    if groups:
        _show(shown, groups, paired)
    if task_groups:
        written += report_tasks(task_groups, task_paired, out_dir, shown)
    written += report_results(results, out_dir, shown)
    _sign(written, block)
    notes = list(dict.fromkeys(notes))  # a run's note once, though several tables read it
    for line in [*(f"note: {n}" for n in notes), *(f"wrote {p}" for p in written)]:
        shown.print(line, style="yellow" if line.startswith("note") else None, soft_wrap=True)


def _show(shown: Console, groups: list[Group], paired: list[PairedTable]) -> None:
    """The perplexity tables of both protocols and the paired tables, each with its legend."""
    common = describe(groups[0].settings, split_keys(groups)[0])
    shown.print(f"settings: {common}", style="dim", soft_wrap=True)
    for g in groups:
        shown.print(render(g))
    shown.print(caption(groups), style="dim", soft_wrap=True)
    tails = [g for g in groups if has_tail(g)]
    for g in tails:
        shown.print(render(g, tail=True))
    if tails:
        shown.print(TAIL_CAPTION, style="dim", soft_wrap=True)
    for t in paired:
        shown.print(rich_table(t.title, *paired_cells(t)))
    if paired:
        shown.print(LEGEND, style="dim", soft_wrap=True)


def _sign(written: list[Path], block: str) -> None:
    """Every Markdown file written gets the provenance block (report/provenance.py)."""
    try:
        append_provenance(written, block)
    except OSError as exc:
        raise PosencError(
            f"cannot add the provenance to '{exc.filename}': {exc.strerror or exc}",
            "choose a writable directory with --out DIR",
        ) from exc
