"""Class 1, processes: train.nproc is bounded by the visible devices before anything is created
(oversubscription is an explicit choice), and a failed multi-process run ends in one line for
the cause and one short line per other rank, its launcher's temp files removed, "resume" only
suggested when a checkpoint exists. The ranks themselves run in tests/e2e/test_ddp.py (a
killed rank, then an exact resume); a true kill -9 of the launcher cannot be checked up front,
so its part here is the report built from torch's failure records."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from posenc_cli.cli import app
from posenc_cli.common.errors import PosencError, RankFailure
from posenc_cli.config.compose import compose, load
from posenc_cli.config.run_config import typed
from posenc_cli.workflows import ranks

#: (argv, extra environment, what the line says).
CASES = [
    (["train", "train.nproc=1000", "device=cpu"], {}, "train.nproc=1000 but this machine has"),
    (["train", "train.nproc=2", "device=mps"], {}, "torch.distributed has no MPS backend"),
    (
        ["train", "train.nproc=2", "device=cpu"],
        {"RANK": "0", "WORLD_SIZE": "2"},
        "train.nproc=2 under torchrun, which starts the processes itself",
    ),
]


@pytest.mark.parametrize(("args", "env", "expected"), CASES, ids=[c[2][:24] for c in CASES])
def test_a_process_count_this_machine_cannot_run_is_refused(
    args: list[str], env: dict[str, str], expected: str, refused: Callable[..., str]
) -> None:
    assert expected in refused(args, env)


def test_oversubscription_is_an_explicit_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = compose(["train.nproc=1000", "device=cpu"])
    with pytest.raises(PosencError):
        ranks.check_nproc(typed(cfg))
    monkeypatch.setenv(ranks.OVERSUBSCRIBE, "1")
    assert ranks.check_nproc(typed(cfg)) is False


def test_nproc_is_refused_under_torchrun_and_beyond_the_visible_gpus(monkeypatch) -> None:
    cfg = compose(["train.nproc=2"])
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(PosencError, match="under torchrun, which starts the processes itself"):
        ranks.check_nproc(typed(cfg))
    monkeypatch.delenv("RANK")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(PosencError) as exc:
        ranks.check_nproc(typed(cfg))
    assert str(exc.value) == (
        "train.nproc=2 but 1 CUDA GPU(s) are visible — use train.nproc "
        "<= 1 (one process per GPU), or device=cpu"
    )
    ranks.check_nproc(load(["train.nproc=2", "device=cpu"]))  # CPU ranks: any number


def test_only_training_runs_under_torchrun(monkeypatch, capsys) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(sys, "argv", ["posenc", "eval", "RUN"])
    with pytest.raises(SystemExit) as exc:
        app.main()
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("posenc: error: `posenc eval` under torchrun")


class FakeFailure:
    def __init__(self, message: object, exitcode: int, timestamp: int = 0) -> None:
        self.message = message
        self.exitcode = exitcode
        self.timestamp = timestamp

    def signal_name(self) -> str:
        return "SIGKILL"


def failed(**by_rank: FakeFailure) -> SimpleNamespace:
    return SimpleNamespace(failures={int(r.removeprefix("r")): f for r, f in by_rank.items()})


def reported(line: str, code: int = 2) -> dict[str, object]:
    return {"message": f"RankFailure: [exit {code}] {line}", "extraInfo": {}}


def test_the_failed_rank_is_reported_as_it_said_or_as_what_killed_it(tmp_path) -> None:
    out = ranks.first_failure(
        failed(r1=FakeFailure(reported("posenc: error: x — y"), 1)), 2, tmp_path
    )
    assert (out.code, out.line) == (2, "posenc: error: x — y")
    killed = failed(r1=FakeFailure("Signal 9 (SIGKILL) received", -9))
    out = ranks.first_failure(killed, 2, tmp_path)
    assert isinstance(out, RankFailure) and out.code == 2
    assert out.line == (
        "posenc: error: rank 1 of 2 stopped (SIGKILL), so every rank was "
        "stopped — no checkpoint was written yet; start the run again"
    )
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"")
    assert ranks.first_failure(killed, 2, tmp_path).line == (
        f"posenc: error: rank 1 of 2 stopped (SIGKILL), so every rank was stopped — continue "
        f"from the last checkpoint with: posenc resume {tmp_path}"
    )


def test_the_cause_wins_over_the_peer_that_failed_because_of_it(tmp_path) -> None:
    """A rank waiting in a collective fails as an internal error when its peer dies."""
    peer = FakeFailure(
        reported(
            "posenc: internal error on rank 1 of 2 (RuntimeError: Connection closed by peer)", 1
        ),
        1,
        timestamp=5,
    )
    cause = FakeFailure(
        reported("posenc: error: the corpus is too short (rank 0 of 2)"), 1, timestamp=6
    )
    assert ranks.first_failure(failed(r0=cause, r1=peer), 2, tmp_path).code == 2
    killed = FakeFailure("Signal 9 (SIGKILL) received", -9, timestamp=7)
    assert (
        "rank 0 of 2 stopped (SIGKILL)"
        in ranks.first_failure(failed(r0=killed, r1=peer), 2, tmp_path).line
    )
    first = FakeFailure(reported("posenc: error: a (rank 1 of 2)"), 1, timestamp=3)
    assert ranks.first_failure(failed(r0=cause, r1=first), 2, tmp_path).line.endswith(
        "a (rank 1 of 2)"
    )


def test_every_failed_rank_gets_one_line_after_the_cause(tmp_path) -> None:
    cause = FakeFailure(reported("posenc: error: the corpus is too short (rank 2 of 7) — add"), 1)
    echo = FakeFailure(reported("posenc: internal error on rank 0 of 7 (RuntimeError: x)", 1), 1)
    own = FakeFailure(reported("posenc: error: disk full (rank 5 of 7) — free space"), 1, 4)
    killed = FakeFailure("Signal 9 (SIGKILL) received", -9, timestamp=2)
    quiet = FakeFailure("", 3, timestamp=3)
    out = ranks.failure_report(failed(r0=echo, r2=cause, r4=killed, r5=own, r6=quiet), 7, tmp_path)
    assert out.code == 2
    assert out.line.splitlines() == [
        "posenc: error: the corpus is too short (rank 2 of 7) — add",
        "  rank 0: stopped after rank 2 failed",
        "  rank 4: killed by SIGKILL",
        "  rank 5: disk full — free space",
        "  rank 6: ended with exit code 3",
        "  ranks 1, 3: stopped after rank 2 failed",
    ]
    alone = ranks.failure_report(failed(r1=killed), 5, tmp_path).line.splitlines()
    assert alone[1:] == ["  ranks 0, 2-4: stopped after rank 1 failed"]


def test_the_launcher_files_are_removed_however_the_run_ends(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(ranks.tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RuntimeError), ranks._launcher_files(3) as logs:
        folder = Path(logs.root_log_dir)
        (folder / "error.json").write_text("{}")
        assert folder.parent == tmp_path and ranks.tempfile.gettempdir() == str(folder)
        raise RuntimeError
    assert list(tmp_path.iterdir()) == [] and ranks.tempfile.gettempdir() == str(tmp_path)
