"""The run's clock: seconds by phase, the mean tokens/s over training steps, carried across a
resume, and an older checkpoint's total kept without inventing a breakdown."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from posenc_cli.common.errors import Interrupted
from posenc_cli.engine import checkpoint
from posenc_cli.engine.clock import PhaseClock
from tests.helpers.trainer import tiny_trainer


@contextlib.contextmanager
def silent(total: int, start: int, label: str):  # noqa: ANN201 - the trainer's progress factory
    class Bar:
        def update(self, *args: object, **kwargs: object) -> None:
            return None

    yield Bar()


def test_phases_add_up_and_the_rate_counts_only_steps() -> None:
    clock = PhaseClock()
    with clock.timing("steps"):
        time.sleep(0.02)
        clock.timed_tokens += 1000
        assert clock.elapsed("steps") >= 0.02  # the running block counts before it ends
    with clock.timing("validation"):
        time.sleep(0.04)
    clock.add("evaluation", 1.5)
    assert clock.total == pytest.approx(sum(clock.seconds.values()))
    assert clock.tokens_per_s == pytest.approx(1000 / clock.seconds["steps"])
    record = clock.record()
    # the wall time is the sum of the phases as written, within their rounding of the clock
    assert record["wall_time_s"] == round(sum(record["time_s"].values()), 2)
    assert abs(record["wall_time_s"] - clock.total) <= 0.005 * len(record["time_s"]) + 1e-9
    assert "unattributed" not in record["time_s"]  # shown only when an old checkpoint had it
    assert PhaseClock().tokens_per_s is None


@pytest.mark.parametrize(
    "saved",
    [
        None,  # a checkpoint from before phases were kept
        {"seconds": {"steps": -1.0}, "timed_tokens": 10},
        {"seconds": {"steps": 1.0, "coffee": 2.0}, "timed_tokens": 10},
        {"seconds": {"steps": 1.0}, "timed_tokens": True},
        {"seconds": {"steps": float("nan")}, "timed_tokens": 10},
        "not a dict",
    ],
)
def test_an_unusable_saved_clock_keeps_only_the_total(saved: object) -> None:
    clock = PhaseClock.restore(saved, 12.5)
    assert clock.total == 12.5 and clock.seconds["unattributed"] == 12.5
    assert clock.timed_tokens == 0 and clock.tokens_per_s is None


def test_the_clock_survives_a_resume(tmp_path: Path, corpus: Path, cache_dir: Path) -> None:
    run = tmp_path / "run"
    first = tiny_trainer(run, corpus, "train.steps=4", "train.checkpoint_every=2")
    first.cfg.train.steps = 2
    first.fit(silent)
    first.close()
    saved = first.state.clock
    assert saved.timed_tokens == 2 * first._tokens_per_rank
    second = tiny_trainer(run, corpus, "train.steps=4", "train.checkpoint_every=2")
    second.resume()
    restored = second.state.clock
    assert restored.timed_tokens == saved.timed_tokens
    assert restored.seconds["steps"] == pytest.approx(saved.seconds["steps"])
    second.fit(silent)
    second.close()
    clock = second.state.clock
    assert clock.timed_tokens == second.state.tokens == 4 * second._tokens_per_rank
    assert clock.seconds["steps"] > saved.seconds["steps"]
    ck = checkpoint.load(run / "checkpoints" / "last.pt")
    assert ck["clock"]["timed_tokens"] == clock.timed_tokens
    assert ck["wall_s"] == pytest.approx(PhaseClock.restore(ck["clock"], 0).total)


def test_a_signal_during_a_long_validation_stops_it_at_once_and_saves(
    tmp_path: Path, corpus: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A validation of thousands of batches would hold SIGTERM for minutes: the signal ends it
    within a batch, the steps trained are saved and the stop says how to resume."""
    trainer = tiny_trainer(tmp_path / "run", corpus, "train.eval_every=2", "train.steps=4")

    def endless_validation(model: object, rt: object) -> float:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(3000):  # 30 s of "batches" unless the signal ends it
            time.sleep(0.01)
        return 0.0

    monkeypatch.setattr(trainer.stream, "validation_loss", endless_validation)
    started = time.perf_counter()
    with pytest.raises(Interrupted) as stopped:
        trainer.fit(silent)
    assert time.perf_counter() - started < 10
    assert stopped.value.code == 143 and "after step 2" in str(stopped.value)
    assert checkpoint.load(tmp_path / "run" / "checkpoints" / "last.pt")["step"] == 2
    trainer.close()


def test_a_run_stopped_between_log_lines_resumes_to_the_same_final_loss(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    """Stopped after step 2 of a 4-step log interval: the resumed run's final train loss is the
    mean of the same four steps an uninterrupted run averages (one process, one thread)."""
    args = ("train.steps=4", "train.log_every=4", "train.eval_every=4", "train.precision=fp32")
    whole = tiny_trainer(tmp_path / "whole", corpus, *args)
    whole.fit(silent)
    whole.close()

    @contextlib.contextmanager
    def stop_at_2(total: int, start: int, label: str):  # noqa: ANN202 - a progress factory
        class Bar:
            def update(self, step: int, *rest: object, **kw: object) -> None:
                if step == 2:
                    os.kill(os.getpid(), signal.SIGTERM)

        yield Bar()

    cut = tiny_trainer(tmp_path / "cut", corpus, *args)
    with pytest.raises(Interrupted):
        cut.fit(stop_at_2)
    cut.close()
    assert checkpoint.load(tmp_path / "cut" / "checkpoints" / "last.pt")["pending_loss"][0] == 2
    resumed = tiny_trainer(tmp_path / "cut", corpus, *args)
    resumed.resume()
    resumed.fit(silent)
    resumed.close()
    assert resumed.state.last_train == whole.state.last_train
