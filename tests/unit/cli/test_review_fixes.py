"""Defects found by trying posenc as an attacker and a demanding user, each pinned down."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.cli.app import app, main
from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.config.rundir import lock_run_dir


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
        ["sweep", "encoding=rope,alibi", "hydra.sweep.subdir=/tmp/elsewhere"],
        ["train", "hydra.run.dir=/proc/posenc-test"],
        ["train", "~train"],
    ],
)
def test_refused_up_front(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one_line_exit_2(args, tmp_path, monkeypatch)


def test_a_planted_lock_link_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".posenc.lock").symlink_to(victim)
    with pytest.raises(PosencError, match="symbolic link"):
        lock_run_dir(run)
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("where", ["checkpoints", "eval/extrapolation", "tokenizer.json"])
def test_links_where_posenc_writes_are_refused(where: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "elsewhere").mkdir()
    (run / where).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PosencError, match="is a symbolic link"):
        lock_run_dir(run)
    assert list((tmp_path / "elsewhere").iterdir()) == []


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


def test_resume_changes_only_the_keys_it_is_given(tmp_path: Path) -> None:
    from posenc_cli.engine.resume import resume_config

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    saved = compose(["model=tiny", "train.threads=1"])
    OmegaConf.save(saved, run / ".hydra" / "config.yaml")
    cfg = resume_config(run, compose(["device=cpu"]), ["device=cpu"])
    assert cfg.device == "cpu" and cfg.train.threads == 1  # not reset to the default (null)


def test_a_resumed_run_must_see_its_own_tokenizer(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from posenc_cli.cli.jobs import _keep_tokenizer

    cached = tmp_path / "cached.json"
    cached.write_text('{"model": 1}')
    run = tmp_path / "run"
    data = SimpleNamespace(tokenizer_path=cached)
    _keep_tokenizer(run, data, True)  # a new run keeps a copy
    assert (run / "tokenizer.json").read_text() == '{"model": 1}'
    _keep_tokenizer(run, data, True)  # the same one again: fine, untouched
    cached.write_text('{"model": 2}')
    with pytest.raises(PosencError, match="tokenizer differs"):
        _keep_tokenizer(run, data, True)
    assert (run / "tokenizer.json").read_text() == '{"model": 1}'


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
