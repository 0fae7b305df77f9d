"""Bad values and bad usage are refused in one line, exit 2, before any folder is created."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc_cli.cli.app import app, main


@pytest.fixture(autouse=True)
def shared_cache(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One data cache for the session: the built-in corpus's tokenizer is trained once, not
    once per test that gets as far as preparing the data."""
    monkeypatch.setenv("POSENC_CACHE", str(cache_dir))


def one_line_exit_2(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error: "), lines
    assert not (tmp_path / "outputs").exists()
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["train", "train.lr=inf"],
        ["train", "train.weight_decay=nan"],
        ["train", "train.beta1=nan"],
        ["train", "train.grad_clip=nan"],
        ["bench", "bench.case_timeout_s=inf"],
        ["train", "encoding.theta=0"],
        ["train", "encoding.theta=abc"],
        ["train", "~encoding.theta"],
        ["train", "encoding=sinusoidal", "encoding.base=-1"],
        ["train", "hydra.run.dir="],
        ["bench", "bench.encodings=5"],
        ["bench", "bench.encodings=[]"],
        ["bench", "encoding=rope"],  # bench measures bench.encodings: never silently ignored
        ["bench", "train.attention=flex"],
        ["bench", "train.threads=1"],
        ["bench", "model=tiny", "model.n_layers=100000"],  # sizes checked before any case
        ["bench", "model=tiny", "bench.batch_size=100000000"],
        # the shorthand eval.factors is what the window rule reads, not the default factors
        ["train", "encoding=rnope_swa", "train.context_length=16", "eval.factors=[1,2]"],
        ["sweep", "encoding=rope,alibi", "hydra.sweep.subdir=/tmp/elsewhere"],
        ["train", "task=copy", "hydra.run.dir=/proc/posenc-test"],  # no corpus to prepare
        ["train", "~train"],
    ],
)
def test_refused_up_front(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one_line_exit_2(args, tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["resume"], "Missing argument"),
        (["bogus"], "No such command 'bogus'"),
        (["train", "--foo"], "No such option: --foo"),
    ],
)
def test_usage_errors_are_one_line(
    argv: list[str],
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(sys, "argv", ["posenc", *argv])
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1
    assert err[0].startswith("posenc: error: ") and expected in err[0]


def test_an_uncreatable_sweep_folder_is_one_line(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_line_exit_2(
        [
            "sweep",
            "encoding=none,rope",
            "data=text",
            f"data.path={corpus}",
            "data.vocab_size=300",
            "hydra.sweep.dir=/proc/posenc-test",
        ],
        tmp_path,
        monkeypatch,
    )


def test_more_threads_than_cores_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POSENC_OVERSUBSCRIBE", raising=False)
    line = one_line_exit_2(["train", "train.threads=1000"], tmp_path, monkeypatch)
    assert "train.threads=1000 but this machine has" in line and "use train.threads <=" in line
