"""Keep a study's run records for a results page that regenerates:

    python -m posenc_cli.report.records [--drop KEY]... RUN_OR_SWEEP_DIR... DEST

copies each run's small records — metrics.json, .hydra/config.yaml, every
eval/<key>/units.csv or instances.csv and the per-instance record a result names (its
compare entry's "instances") — into DEST/<run folder name>/, and nothing else (no checkpoint,
tokenizer or event file). ``--drop KEY`` leaves out the result KEY and its records, for a
page about another of the runs' results (whose own page keeps them). Paths under the home
directory are written as ``~/…`` and paths under the current directory relative to it, so the
records name no machine's folders. `posenc compare DEST --out PAGE_DIR` then rebuilds the
page's tables from DEST alone.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from posenc_cli.common.atomic import write_text_atomic
from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import EVAL_DIR, RunDir
from posenc_cli.evals.instances import INSTANCES_FILE
from posenc_cli.evals.units import UNITS_FILE
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
    results of ``drop``; the runs kept."""
    found = find_metrics(sources)
    names = [m.parent.name for m in found]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise PosencError(
            f"two runs are named {twice[0]}, so their records would share a folder",
            "keep them with two commands into two folders, or rename one run directory",
        )
    kept = []
    for metrics in found:
        run = metrics.parent
        out = dest / run.name
        out.mkdir(parents=True, exist_ok=True)
        data = json.loads(metrics.read_text(encoding="utf-8"))
        data = {k: v for k, v in data.items() if k not in drop}
        copy = RunDir(out)
        write_text_atomic(copy.metrics_file, json.dumps(_portable(data), indent=2) + "\n")
        config = RunDir(run).config_file
        if config.is_file():
            write_text_atomic(copy.config_file, portable(config.read_text()))
        for record in _records(run, data, drop):
            target = out / record.relative_to(run)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(record, target)
        kept.append(out)
    return kept


def _records(run: Path, data: dict[str, Any], drop: tuple[str, ...]) -> list[Path]:
    """The run's record files of the results in ``data``: units and instances by their fixed
    names, and each per-instance record a result names, when it is a plain file name."""
    found = [
        record
        for name in (UNITS_FILE, INSTANCES_FILE)
        for record in run.glob(f"{EVAL_DIR}/*/{name}")
        if record.parent.name not in drop
    ]
    for key, result in data.items():
        spec = result.get("compare") if isinstance(result, dict) else None
        name = spec.get("instances") if isinstance(spec, dict) else None
        if isinstance(name, str) and Path(name).name == name and name not in ("", ".", ".."):
            record = run / EVAL_DIR / key / name
            if record.is_file() and not record.is_symlink() and Path(key).name == key:
                found.append(record)
    return found


def main(argv: list[str]) -> int:
    drop = tuple(argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--drop")
    paths = [a for i, a in enumerate(argv) if a != "--drop" and (i == 0 or argv[i - 1] != "--drop")]
    if len(paths) < 2:
        print("usage: python -m posenc_cli.report.records [--drop KEY]... RUN_OR_SWEEP_DIR... DEST")
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
