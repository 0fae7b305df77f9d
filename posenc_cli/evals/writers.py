"""`posenc eval`'s TensorBoard runs (one per result key, under RUN/eval/<key>/) and the rule
that a non-finite evaluation never replaces a finite one.

A key's earlier event files are removed only once the new evaluation under it is complete and
accepted, so an evaluation that fails, is interrupted or gives NaN leaves the earlier curve
as it was (and metrics.json keeps the earlier result: evals/run.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter

from posenc_cli.common.atomic import write_text_atomic
from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.engine.metrics import non_finite
from posenc_cli.evals.base import RECORDS


class EvalWriters:
    """A writer per result key; ``close`` settles which event files stay."""

    def __init__(self, run_dir: Path) -> None:
        self.root = RunDir(run_dir).eval_dir
        self.open: dict[str, SummaryWriter] = {}
        self.earlier: dict[str, list[Path]] = {}
        self.new_folders: list[Path] = [] if self.root.exists() else [self.root]

    def get(self, key: str) -> SummaryWriter:
        if key not in self.open:
            folder = self.root / key
            if any(p.is_symlink() for p in (self.root, folder)):
                raise PosencError(
                    f"'{folder}' is a link out of the run directory",
                    "remove it (posenc writes TensorBoard files there)",
                )
            self.earlier[key] = _event_files(folder)
            if not folder.exists():
                self.new_folders.insert(0, folder)
            self.open[key] = SummaryWriter(str(folder))
        return self.open[key]

    def close(self, keep_earlier: Collection[str] = ()) -> None:
        """Close every writer. A key's earlier event files are replaced by the new ones,
        except for the keys of ``keep_earlier``, whose new files are removed instead."""
        for key, writer in self.open.items():
            writer.close()
            earlier = self.earlier[key]
            now = _event_files(self.root / key)
            drop = [p for p in now if p not in earlier] if key in keep_earlier else earlier
            for path in drop:
                path.unlink(missing_ok=True)
        for folder in self.new_folders:  # an evaluation that wrote nothing leaves no folder
            with contextlib.suppress(OSError):
                folder.rmdir()


def take_records(out: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The files of every result (RECORDS), taken out of it: {key: {file name: text}}."""
    return {
        key: result.pop(RECORDS)
        for key, result in out.items()
        if isinstance(result, dict) and RECORDS in result
    }


def write_records(run_dir: Path, files: dict[str, dict[str, str]], results: dict[str, Any]) -> None:
    """Write the files of the results kept in metrics.json (``results``) to eval/<key>/ of the
    run directory, each atomically, replacing an earlier evaluation's; a non-finite result
    pairs with nothing and keeps no record. Call it once metrics.json holds the results."""
    for key, named in files.items():
        if key not in results or non_finite(results[key]):
            continue
        folder = RunDir(run_dir).eval_dir / key
        if any(p.is_symlink() for p in (folder.parent, folder)):
            raise PosencError(
                f"'{folder}' is a link out of the run directory",
                "remove it (posenc writes the evaluation's records there)",
            )
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in named.items():
            target = folder / name
            if target.is_symlink():
                target.unlink()
            write_text_atomic(target, text)


def _event_files(folder: Path) -> list[Path]:
    return [p for p in folder.glob("events.out.tfevents.*") if p.is_file() and not p.is_symlink()]


def replaces_finite(out: dict[str, Any], metrics: dict[str, Any]) -> dict[str, str]:
    """{key: first non-finite place} of the new results that hold NaN or infinity where
    metrics.json holds a finite result under the same key (to be kept, not replaced)."""
    kept = {}
    for key, result in out.items():
        earlier = metrics.get(key)
        bad = non_finite(result)
        finite_before = (
            isinstance(earlier, dict)
            and "non_finite" not in earlier
            and not isinstance(earlier.get("skipped"), str)  # a task that did not apply
        )
        if bad and finite_before:
            kept[key] = bad[0]
    return kept


def refuse_non_finite(kept: dict[str, str]) -> None:
    """One line for the evaluations whose earlier finite results were kept."""
    if kept:
        key, where = next(iter(kept.items()))
        raise PosencError(
            f"the evaluation under '{key}' gave a non-finite {where} (NaN or infinite), so "
            "the earlier finite result there and its TensorBoard curve were kept",
            "check checkpoints/last.pt (a diverged model?), or evaluate with train.precision=fp32",
        )
