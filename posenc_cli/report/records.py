"""Keep a study's run records for a results page that regenerates:

    python -m posenc_cli.report.records [--drop KEY]... RUN_OR_SWEEP_DIR... DEST

copies each run's small records — metrics.json, .hydra/config.yaml, every
eval/<key>/units.csv or instances.csv and the per-instance record a result names (its
compare entry's "instances") — into DEST/<run folder name>/, and nothing else (no checkpoint,
tokenizer or event file). The per-unit and per-instance records are stored gzip-compressed
(``units.csv.gz``; a quarter of the size, and every reader takes either form), written
without a time stamp so that keeping the same records twice writes the same bytes.
``--drop KEY`` leaves out the result KEY and its records, for a page about another of the
runs' results (whose own page keeps them). Paths under the home
directory are written as ``~/…`` and paths under the current directory relative to it, so the
records name no machine's folders. `posenc compare DEST --out PAGE_DIR` then rebuilds the
page's tables from DEST alone.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

from posenc_cli.common.atomic import write_atomic, write_text_atomic
from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import EVAL_DIR, RunDir
from posenc_cli.evals.instances import INSTANCES_FILE
from posenc_cli.evals.units import COMPRESSED, MAX_BYTES, UNITS_FILE, stored_record
from posenc_cli.report.result_tables import PLAIN, view_of
from posenc_cli.report.runs import find_metrics


def portable(text: str) -> str:
    """``text`` with paths under the current directory made relative to it and paths under
    the home directory written ``~/…`` (whole path components only: /home/al is no prefix
    of /home/alice)."""
    for root, short in ((Path.cwd(), ""), (Path.home(), "~/")):
        text = re.sub(rf"{re.escape(str(root))}/", short, text)
        text = re.sub(rf"{re.escape(str(root))}(?=[\s\"'),]|$)", short.rstrip("/") or ".", text)
    return text


def _portable(value: Any) -> Any:
    if isinstance(value, str):
        return portable(value)
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_portable(v) for v in value]
    return value


def keep_records(sources: list[Path], dest: Path, drop: tuple[str, ...] = ()) -> list[Path]:
    """Copy the records of every run in or below ``sources`` to ``dest``, without the
    results of ``drop``; the runs kept. Every run is read and checked before anything is
    written, and ``dest`` may not lie in a source (the copies would replace the runs' own)."""
    found = find_metrics(sources)
    names = [m.parent.name for m in found]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise PosencError(
            f"two runs are named {twice[0]}, so their records would share a folder",
            "keep them with two commands into two folders, or rename one run directory",
        )
    _check_dest(dest, [*sources, *(m.parent for m in found)])
    runs = [(m.parent, _read(m, drop)) for m in found]
    kept = []
    for run, data in runs:
        out = dest / run.name
        out.mkdir(parents=True, exist_ok=True)
        copy = RunDir(out)
        write_text_atomic(copy.metrics_file, json.dumps(_portable(data), indent=2) + "\n")
        config = RunDir(run).config_file
        if _plain_file(run, config):
            write_text_atomic(copy.config_file, portable(config.read_text(encoding="utf-8")))
        for record in _records(run, data, drop):
            _keep_compressed(record, out / record.relative_to(run))
        kept.append(out)
    return kept


def _keep_compressed(record: Path, target: Path) -> None:
    """``record`` written to ``target``'s compressed name (copied where it is compressed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    data = record.read_bytes()
    if record.name.endswith(COMPRESSED):
        write_atomic(target, lambda f: f.write(data))
    else:
        packed = gzip.compress(data, compresslevel=9, mtime=0)
        write_atomic(target.with_name(target.name + COMPRESSED), lambda f: f.write(packed))


def _check_dest(dest: Path, sources: list[Path]) -> None:
    where = dest.resolve()
    if dest.exists() and not dest.is_dir():
        raise PosencError(f"'{dest}' is not a folder", "name a new or existing folder as DEST")
    for src in sources:
        if where == src.resolve() or src.resolve() in where.parents:
            raise PosencError(
                f"'{dest}' lies in '{src}', so the copies would replace the runs' own files",
                "keep the records in a folder outside the runs, e.g. docs/results/records/NAME",
            )


def _read(metrics: Path, drop: tuple[str, ...]) -> dict[str, Any]:
    """A run's metrics.json without the results of ``drop``, checked: a regular file of at
    most 16 MB holding a posenc run's JSON object."""
    try:
        if not metrics.is_file() or metrics.stat().st_size > 16 * 2**20:
            raise ValueError("it is not a regular file of at most 16 MB")
        data = json.loads(metrics.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or "encoding" not in data:
            raise ValueError("it is not a posenc run's metrics.json")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PosencError(
            f"cannot keep the records of '{metrics}': {exc}",
            "pass only run directories posenc wrote",
        ) from None
    return {k: v for k, v in data.items() if k not in drop}


def _plain_file(run: Path, path: Path) -> bool:
    """Whether ``path`` is a regular file of at most MAX_BYTES reached from ``run`` through
    no link (a record must not bring in a file from outside the run)."""
    rel = path.relative_to(run).parts
    if any((run / Path(*rel[:i])).is_symlink() for i in range(1, len(rel) + 1)):
        return False
    return path.is_file() and path.stat().st_size <= MAX_BYTES


def _records(run: Path, data: dict[str, Any], drop: tuple[str, ...]) -> list[Path]:
    """The run's record files of the results in ``data``: units and instances by their fixed
    names, and the per-instance record each result's task names (report/result_tables.py)."""
    named = [
        p.with_name(name)
        for name in (UNITS_FILE, INSTANCES_FILE)
        for stored_name in (name, name + COMPRESSED)
        for p in run.glob(f"{EVAL_DIR}/*/{stored_name}")
    ]
    for key in filter(PLAIN.fullmatch, data):
        view = view_of(key)
        if view is not None and view.instances is not None:
            named.append(run / EVAL_DIR / key / view.instances)
    found = {stored for p in named if (stored := stored_record(p)) is not None}
    return sorted(p for p in found if p.parent.name not in drop and _plain_file(run, p))


def main(argv: list[str]) -> int:
    drop = tuple(argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--drop")
    paths = [a for i, a in enumerate(argv) if a != "--drop" and (i == 0 or argv[i - 1] != "--drop")]
    if len(paths) < 2 or argv[-1] == "--drop" or any(a.startswith("-") for a in paths):
        print(
            "posenc: error: records takes [--drop KEY]... RUN_OR_SWEEP_DIR... DEST — e.g. "
            "python -m posenc_cli.report.records outputs/study docs/results/records/study",
            file=sys.stderr,
        )
        return 2
    try:
        kept = keep_records([Path(a) for a in paths[:-1]], Path(paths[-1]), drop)
    except PosencError as exc:
        print(f"posenc: error: {exc.what} — {exc.fix}", file=sys.stderr)
        return 2
    for out in kept:
        print(f"kept {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
