"""Class 3, inputs that used to end in "internal error … this is a bug": each is one line now,
and the traceback file of a real bug is created exclusively, private, under a random name in
the user's own folder, never through a link planted there."""

from __future__ import annotations

import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models

from posenc_cli.common.errors import PosencError
from posenc_cli.data.tokenizer import eot_id
from posenc_cli.workflows import crash

#: (argv, what the line says). An infinite checkpoint iteration is a row of
#: test_tokenizer_files.py (it arrives through import-cs336); MemoryError is test_memory.py's.
CASES = [
    (["train", "seed=18446744073709551616"], "seed=18446744073709551616 is too large"),
    (["train", "seed=99999999999999999999"], "seed=99999999999999999999 is too large"),
    (["train", "seed=-1"], "seed=-1 is too small"),
]


@pytest.mark.parametrize(("args", "expected"), CASES, ids=[c[0][-1] for c in CASES])
def test_an_input_is_never_an_internal_error(
    args: list[str], expected: str, refused: Callable[..., str]
) -> None:
    assert expected in refused(args)


#: (a step a received checkpoint records, the command). Each used to end in an internal error
#: (export) or be evaluated as if it were a step.
STEPS = [
    (float("inf"), "export-cs336"),
    (float("inf"), "eval"),
    (-3, "eval"),
    ("7", "eval"),
    (True, "eval"),
]


@pytest.mark.parametrize(("step", "command"), STEPS, ids=[f"{c} {s!r}" for s, c in STEPS])
def test_a_checkpoint_step_that_is_not_a_count_is_one_line(
    step: object, command: str, run: Path, refused: Callable[..., str]
) -> None:
    import torch

    path = run / "checkpoints" / "last.pt"
    torch.save({**torch.load(path, weights_only=True), "step": step}, path)
    args = [command, str(run)] + (["out"] if command == "export-cs336" else [])
    assert f"records step {step!r}, not a whole number >= 0" in refused(args)


def test_a_tokenizer_without_endoftext_is_a_user_error() -> None:
    with pytest.raises(PosencError, match="has no <|endoftext|> token"):
        eot_id(Tokenizer(models.BPE(vocab={"a": 0}, merges=[])))


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


def test_tracebacks_go_to_the_cache_the_user_chose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$POSENC_CACHE moves every file posenc keeps for itself, the traceback files too."""
    monkeypatch.setenv("POSENC_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert crash.traceback_folder() == tmp_path / "mine" / "tracebacks"
    assert not (tmp_path / "xdg").exists()
