"""The provenance block at the end of every Markdown file `posenc compare` writes.

A table pasted into a page is only worth as much as a reader's ability to tell what it was
measured on and to make it again: the command, the code (posenc version and git commit), the
date, the runs (their result keys, seeds, devices and precisions, from their metrics.json) and
the machine that compared them. Nothing here is typed by hand, so no figure can drift from it.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
from importlib import metadata
from pathlib import Path

from posenc_cli.common.atomic import write_text_atomic
from posenc_cli.evals.base import task_of
from posenc_cli.report.runs import Run

HEADING = "### Provenance"


def command_line(dirs: list[Path], out: Path | None, baseline: str | None = None) -> str:
    """The `posenc compare` command that writes these files, as a shell would take it."""
    args = ["posenc", "compare", *map(str, dirs)]
    args += ["--out", str(out)] if out is not None else []
    return shlex.join([*args, "--baseline", baseline] if baseline is not None else args)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git_commit() -> str:
    """The checkout's commit ('+ local changes' when files differ), or why there is none."""
    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists():
        return "no git checkout"
    try:
        head = _git(repo, "rev-parse", "--short=12", "HEAD")
        dirty = _git(repo, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "git not available"
    return head + (" + local changes" if dirty else "")


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=10
    )
    return done.stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _values(runs: list[Run], key: str) -> str:
    found = sorted({str(r.metrics[key]) for r in runs if r.metrics.get(key) is not None})
    return ", ".join(found) or "not recorded"


def provenance(runs: list[Run], command: str) -> str:
    """The Markdown block: one bullet per subject, every value read, none assumed."""
    distinct = {r.path for r in runs}
    keys = ", ".join(sorted({k for r in runs for k in r.metrics if task_of(k)})) or "none"
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = (
        f"{platform.platform()}, {_cpu_model()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, torch {_version('torch')}"
    )
    lines = [
        HEADING,
        "",
        f"* command: `{command}`",
        f"* posenc {_version('posenc')}, commit {_git_commit()}; written {when}",
        f"* runs: {len(distinct)}; result keys: {keys}; seeds: {_values(runs, 'seed')}",
        f"* trained on device {_values(runs, 'device')}, precision {_values(runs, 'precision')}",
        f"* compared on: {machine}",
    ]
    return "\n".join(lines) + "\n"


def append_provenance(paths: list[Path], block: str) -> None:
    """Add the block to each Markdown file of ``paths`` (the others are data and figures)."""
    for path in paths:
        if path.suffix == ".md":
            write_text_atomic(path, path.read_text(encoding="utf-8") + "\n" + block)
