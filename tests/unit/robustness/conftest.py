"""The one assertion of every robustness table: a bad input run in-process through the Typer app
ends with exit code 2 and exactly one stderr line `posenc: error: <what> — <fix>`, prints
nothing else (no traceback), creates nothing (in the working folder, the cache, or the
temporary folder) and leaves an earlier run's results byte for byte."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc_cli.cli.app import app

#: Where the working folder of a refused command keeps its earlier run.
EARLIER = Path("outputs") / "earlier"


def files_under(root: Path) -> dict[str, bytes]:
    """Every file and folder below ``root`` with its bytes (folders as empty bytes)."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b""
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder a command runs in: it holds an earlier run (results and a checkpoint) and two
    small text files; the data cache and the temporary folder are fresh and empty."""
    work = tmp_path / "work"
    earlier = work / EARLIER
    (earlier / "checkpoints").mkdir(parents=True)
    (earlier / "metrics.json").write_text('{"encoding": "rope", "final_val_loss": 4.2}')
    (earlier / "checkpoints" / "last.pt").write_bytes(os.urandom(64))
    for name in ("a.txt", "b.txt"):
        (work / name).write_text("some text\n" * 20)
    for folder in ("cache", "tmp"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("POSENC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return work


@pytest.fixture
def refused(workdir: Path) -> Callable[..., str]:
    """refused(args, env=None): the one error line of ``posenc ARGS`` run in ``workdir``, after
    asserting the table's properties; ``env`` adds environment variables for the command."""
    root = workdir.parent

    def run(args: list[str], env: dict[str, str] | None = None) -> str:
        before = files_under(root)
        result = CliRunner().invoke(app, args, env=env)
        assert result.exit_code == 2, (result.output, result.exception)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("posenc: error: ") and " — " in lines[0], lines
        assert "Traceback" not in result.output and result.stdout == ""
        assert files_under(root) == before
        return lines[0]

    return run
