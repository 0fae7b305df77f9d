"""What is kept when things go wrong: full disks, divergence, signals, corrupt metrics."""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from posenc_cli.common.errors import Interrupted, PosencError
from posenc_cli.engine import checkpoint
from posenc_cli.engine.clock import PhaseClock
from posenc_cli.engine.meter import Throughput
from posenc_cli.engine.metrics import merge_metrics, read_metrics
from posenc_cli.engine.signals import InterruptNow
from tests.helpers.trainer import tiny_trainer


def test_a_full_disk_during_a_checkpoint_is_one_line_and_keeps_the_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "last.pt"
    checkpoint.save_atomic({"model": {"w": torch.ones(2)}, "step": 1}, path)

    def full_disk(obj: object, fh: object) -> None:
        fh.write(b"x" * 1000)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(
        PosencError, match="could not write checkpoint .* previous checkpoint is intact"
    ):
        checkpoint.save_atomic({"model": {"w": torch.zeros(2)}, "step": 2}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
    assert checkpoint.load(path)["step"] == 1


def test_an_oserror_enospc_is_one_line_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def enospc(obj: object, fh: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", enospc)
    with pytest.raises(PosencError, match="No space left"):
        checkpoint.save_atomic({"model": {}, "step": 1}, tmp_path / "last.pt")
    assert list(tmp_path.iterdir()) == []


def test_corrupt_metrics_are_kept_aside_and_merges_keep_every_key(tmp_path: Path) -> None:
    (tmp_path / "metrics.json").write_text("{not json")
    merged = merge_metrics(tmp_path, {"a": 1})
    assert merged == {"a": 1}
    assert (tmp_path / "metrics.json.corrupt-1").read_text() == "{not json"
    merge_metrics(tmp_path, {"extrapolation_sliding32": {"ppl": {}}})
    merge_metrics(tmp_path, {"a": 2})
    assert read_metrics(tmp_path) == {"a": 2, "extrapolation_sliding32": {"ppl": {}}}


def test_throughput_counts_only_training_time() -> None:
    clock = PhaseClock()
    meter = Throughput(tokens_per_step=100, clock=clock)
    for _ in range(4):
        with clock.timing("steps"):
            meter.add(torch.tensor(2.0))
        with clock.timing("validation"):
            time.sleep(0.05)
    loss, rate = meter.take()
    assert loss == 2.0
    assert rate > 4 * 100 / 0.05  # the 0.2 s of validation would cap it at 2,000 tokens/s
    assert clock.timed_tokens == 400 and clock.seconds["validation"] >= 0.2
    assert clock.tokens_per_s == pytest.approx(400 / clock.seconds["steps"])


def test_a_signal_outside_the_loop_says_what_was_kept() -> None:
    with pytest.raises(Interrupted) as info, InterruptNow("the model is saved"):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert info.value.code == 143 and "SIGTERM" in str(info.value)
    assert "the model is saved" in str(info.value)


def test_non_finite_weights_are_never_checkpointed(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    trainer = tiny_trainer(tmp_path, corpus)
    with torch.no_grad():
        next(trainer.lm.parameters()).fill_(math.nan)
    with pytest.raises(
        PosencError,
        match="diverged .* no checkpoint was written — start a new run with a lower train.lr",
    ):
        trainer.save()
    assert not (tmp_path / "checkpoints" / "last.pt").exists()
    json.dumps(trainer.metrics())


def test_a_full_disk_in_the_final_evaluation_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from types import SimpleNamespace

    from posenc_cli.workflows import jobs

    def enospc(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jobs, "run_tasks", enospc)
    trainer = SimpleNamespace(
        run_dir=tmp_path,
        rt=SimpleNamespace(is_main=True),
        cfg=None,
        lm=None,
        state=SimpleNamespace(step=1),
        ckpt_dir=tmp_path,
        open_writer=lambda: None,
    )
    with pytest.raises(
        PosencError,
        match=f"could not write the evaluation of {tmp_path}: No "
        f"space left on device — free disk space, then "
        f"`posenc eval {tmp_path}`",
    ):
        jobs._evaluate(trainer, None)


def test_a_checkpoint_without_optimizer_state_is_one_line(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    trainer = tiny_trainer(tmp_path, corpus)
    checkpoint.save_atomic(
        {"model": trainer.lm.state_dict(), "step": 3}, tmp_path / "checkpoints" / "last.pt"
    )
    with pytest.raises(PosencError, match="does not match this run \\('optimizer'\\)"):
        trainer.resume()


def test_an_optimizer_of_another_parameter_layout_says_the_weights_still_serve(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    """The weights load, the optimizer's groups do not (a run saved when an encoding's
    weights were laid out otherwise): eval, inspect and extend can still read it."""
    trainer = tiny_trainer(tmp_path, corpus)
    optimizer = trainer.opt.state_dict()
    optimizer["param_groups"][0]["params"] = optimizer["param_groups"][0]["params"][:-1]
    state = {"model": trainer.lm.state_dict(), "optimizer": optimizer, "step": 3}
    checkpoint.save_atomic(state, tmp_path / "checkpoints" / "last.pt")
    with pytest.raises(PosencError, match="another layout of the encoding's weights: eval, insp"):
        trainer.resume()
