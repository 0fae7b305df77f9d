"""Class 6, signals: SIGTERM ends every command the way Ctrl-C does, with one line
`posenc: stopped by SIGTERM` and exit code 143, and leaves no half-written output. Each row
delivers a real SIGTERM to this process from inside the command, midway through its work. A
SIGKILL cannot be handled, so what it leaves is tested in a subprocess (test_exports.py); the
final evaluation of `posenc train` under SIGTERM and SIGINT is in
tests/e2e/test_run_dir_safety.py."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.cli.errors import user_errors
from tests.helpers.configs import CS336_EXPORT_FILES


def files(root: Path) -> set[Path]:
    """Every path below ``root`` but the data cache (which keeps what it finished tokenizing)
    and a run's lock file (a run keeps it: it is taken again, never deleted)."""
    return {
        p
        for p in root.rglob("*")
        if "cache" not in p.relative_to(root).parts and p.name != ".posenc.lock"
    }


def sigterm(*args: object, **kwargs: object) -> None:
    signal.raise_signal(signal.SIGTERM)


def export_midway(point: str, step: int, folder: Path) -> None:
    """The export's fault point, after its first file is in the temporary folder."""
    assert [p.name for p in folder.iterdir()], "the export had written nothing yet"
    sigterm()


#: (argv, the function replaced, what replaces it; RUN is the run's path). The evaluation is
#: stopped in its second task, after the first one's curves were written.
CASES = [
    (["export-cs336", "RUN", "out"], "posenc_cli.common.faults.pause", export_midway),
    (
        [
            "eval",
            "RUN",
            "eval.tokens=64",
            "eval.factors=[1,2]",
            "eval.tasks=[extrapolation,retrieval]",
        ],
        "posenc_cli.evals.tasks.retrieval.Retrieval.run",
        sigterm,
    ),
    (["compare", "RUN"], "posenc_cli.report.compare.load_runs", sigterm),
    (["export-hf", "RUN", "out"], "safetensors.torch.save_file", sigterm),  # config.json written
]


@pytest.mark.parametrize(("args", "where", "stop"), CASES, ids=[c[0][0] for c in CASES])
def test_sigterm_midway_is_one_line_exit_143_and_leaves_nothing(
    args: list[str],
    where: str,
    stop: Callable[..., None],
    run: Path,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = workdir.parent
    monkeypatch.setattr(where, stop)
    before = files(root)
    argv = [str(run) if a == "RUN" else a for a in args]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 143, (result.output, result.exception)
    assert result.stderr == "posenc: stopped by SIGTERM\n"
    assert files(root) == before and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert not (run / "metrics.json").exists() and not (workdir / "out").exists()


def test_an_export_stopped_by_sigterm_runs_again(
    run: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:
        patched.setattr("posenc_cli.common.faults.pause", export_midway)
        assert CliRunner().invoke(app, ["export-cs336", str(run), "out"]).exit_code == 143
    again = CliRunner().invoke(app, ["export-cs336", str(run), "out"])
    assert again.exit_code == 0, (again.output, again.exception)
    assert sorted(os.listdir(workdir / "out")) == CS336_EXPORT_FILES


def test_sigterm_ends_a_command_like_ctrl_c(capsys: pytest.CaptureFixture[str]) -> None:
    old = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with pytest.raises(SystemExit) as stop, user_errors():
            signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, old)
    assert stop.value.code == 143
    assert capsys.readouterr().err == "posenc: stopped by SIGTERM\n"
