"""The one assertion of every robustness table: a bad input run in-process through the Typer app
ends with exit code 2 and exactly one stderr line `posenc: error: <what> — <fix>`, prints
nothing else (no traceback), creates nothing (in the working folder, the cache, or the
temporary folder) and leaves an earlier run's results byte for byte."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.common.run_layout import LOCK_FILE
from posenc_cli.config.run_config import typed
from posenc_cli.data.content_hash import MEMO

#: Where the working folder of a refused command keeps its earlier run.
EARLIER = Path("outputs") / "earlier"


def files_under(root: Path) -> dict[str, bytes]:
    """Every file and folder below ``root`` with its bytes (folders as empty bytes), but a
    run's lock file (a command on a run takes it first, and a run keeps it), the data
    cache's memo of file hashes (a hash is remembered only once its file is 2 s old,
    data/content_hash.py, so whether a command adds one depends on the clock, not on it) and
    torch's own compiler cache folder in the temporary folder, which importing torch._dynamo
    makes (the memory check counts the encoding's weights on torch's meta device)."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b""
        for p in sorted(root.rglob("*"))
        if p.name not in (LOCK_FILE, MEMO) and not p.name.startswith("torchinductor_")
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
    """refused(args, env=None, quiet=True): the one error line of ``posenc ARGS`` run in
    ``workdir``, after asserting the table's properties; ``env`` adds environment variables
    for the command; ``quiet`` asserts that nothing at all went to stdout (off where the
    command prints what it measured before refusing to store it)."""
    root = workdir.parent

    def run(args: list[str], env: dict[str, str] | None = None, quiet: bool = True) -> str:
        before = files_under(root)
        result = CliRunner().invoke(app, args, env=env)
        assert result.exit_code == 2, (result.output, result.exception)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("posenc: error: ") and " — " in lines[0], lines
        assert "Traceback" not in result.output and (result.stdout == "" or not quiet)
        assert files_under(root) == before
        return lines[0]

    return run


@pytest.fixture(scope="session")
def rope_run(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Path:
    """A run directory of a tiny random RoPE model on the test corpus: made once, copied."""
    import torch
    from omegaconf import OmegaConf

    from posenc_cli.config.compose import compose
    from posenc_cli.data.tokenizer import train_tokenizer
    from posenc_cli.engine.build import build_model

    cfg = compose(
        ["model=tiny", "train.context_length=16", "data=text", f"data.path={corpus}"]
        + ["data.vocab_size=300", "device=cpu", "train.precision=fp32"]
    )
    run = tmp_path_factory.mktemp("outputs") / "run"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    train_tokenizer(iter([corpus.read_text(encoding="utf-8")]), 300).save(
        str(run / "tokenizer.json")
    )
    torch.manual_seed(0)
    (run / "checkpoints").mkdir()
    state = build_model(typed(cfg), 300).state_dict()
    torch.save({"model": state, "step": 3}, run / "checkpoints" / "last.pt")
    return run


@pytest.fixture
def run(rope_run: Path, workdir: Path) -> Path:
    """This test's own copy of the RoPE run, inside the working folder."""
    return Path(shutil.copytree(rope_run, workdir / "run"))
