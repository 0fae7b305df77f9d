"""Sizes that would exhaust the machine and inputs that used to end in "internal error": one
line, exit code 2, no traceback and nothing created (in-process through the Typer app)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models
from typer.testing import CliRunner

from posenc_cli.cli import crash
from posenc_cli.cli.app import app
from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.data.tokenizer import eot_id
from posenc_cli.engine.memory import n_params, training_needs


def refused(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("POSENC_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error: ") and " — " in lines[0]
    assert "Traceback" not in result.output and sorted(os.listdir(tmp_path)) == []
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["train", "train.batch_size=100000000"], "train.batch_size: a training batch needs"),
        (["train", "train.eval_batches=100000000"], "train.eval_batches: the validation windows"),
        (["train", "eval.factors=[1,100000000]"], "eval.factors: the evaluation's longest forward"),
        (
            ["inspect", "encoding=rope", "train.context_length=100000000"],
            "train.context_length: a forward of 100000000 tokens needs at least",
        ),
        (["train", "train.nproc=1000", "device=cpu"], "train.nproc=1000 but this machine has"),
        (["train", "seed=18446744073709551616"], "seed=18446744073709551616 is too large"),
    ],
)
def test_a_size_the_machine_cannot_hold_is_refused_before_anything_exists(
    args: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert expected in refused(args, tmp_path, monkeypatch)


def test_the_parameter_count_is_the_models_own() -> None:
    from posenc_cli.model import build_model

    cfg = compose(["model=tiny"])
    assert n_params(cfg, 300) == build_model(cfg, 300).num_parameters()


def test_the_estimate_grows_with_the_key_it_names() -> None:
    small = training_needs(compose(["train.batch_size=8"]), 4096)
    big = training_needs(compose(["train.batch_size=80"]), 4096)
    assert big[1].bytes > 9 * (small[1].bytes - small[0].bytes)
    assert big[0] == small[0] and big[2].bytes > small[2].bytes


def test_oversubscription_is_an_explicit_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    from posenc_cli.cli import ranks

    cfg = compose(["train.nproc=1000", "device=cpu"])
    with pytest.raises(PosencError):
        ranks.check_nproc(cfg)
    monkeypatch.setenv(ranks.OVERSUBSCRIBE, "1")
    assert ranks.check_nproc(cfg) is False


def test_a_tokenizer_without_endoftext_is_a_user_error() -> None:
    with pytest.raises(PosencError, match="has no <|endoftext|> token"):
        eot_id(Tokenizer(models.BPE(vocab={"a": 0}, merges=[])))


@pytest.mark.parametrize(
    "exc",
    [
        MemoryError(),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 12800000000 bytes."
        ),
    ],
)
def test_running_out_of_memory_is_one_line_not_a_bug(exc: Exception) -> None:
    line = crash.out_of_memory(exc)
    assert line is not None and line.startswith("posenc: error: out of memory")
    assert crash.out_of_memory(ValueError("out of memory")) is None


def test_a_traceback_file_is_private_new_and_never_a_planted_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    folder = crash.traceback_folder()
    for n in range(3):  # a link under every name a predictable scheme could use
        (folder / f"traceback-{n}.txt").symlink_to(victim)
    try:
        raise KeyError("boom")
    except KeyError:
        paths = {crash.save_traceback() for _ in range(3)}
    assert len(paths) == 3 and victim.read_text() == "keep"
    for p in paths:
        assert not p.is_symlink() and "KeyError: 'boom'" in p.read_text()
        assert stat.S_IMODE(p.stat().st_mode) == 0o600 and p.parent == folder
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 or sys.platform == "darwin"
