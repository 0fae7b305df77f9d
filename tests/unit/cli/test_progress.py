"""Progress in a log: a line at the latest every 1 % of the steps and every 30 s, and an ETA
that a slow interval (a validation) moves a little, not tenfold."""

from __future__ import annotations

import pytest

from posenc_cli.workflows.progress import LogCadence, TrainProgress


def simulate(total: int, seconds_per_step: float) -> list[int]:
    """The steps at which a line is due, on a clock that advances ``seconds_per_step``."""
    cadence = LogCadence(total, 0)
    start = cadence.last_time
    lines = []
    for step in range(1, total + 1):
        now = start + step * seconds_per_step
        if cadence.due(step, now):
            cadence.eta(step, now)
            lines.append(step)
    return lines


def test_fast_steps_give_a_line_every_percent() -> None:
    lines = simulate(2000, 0.01)
    assert lines[0] == 20 and lines[-1] == 2000
    assert all(b - a == 20 for a, b in zip(lines, lines[1:], strict=False))


def test_slow_steps_give_a_line_at_least_every_30_seconds() -> None:
    lines = simulate(10_000, 7.0)  # 1 % = 100 steps = 700 s: the time bound comes first
    gaps = [b - a for a, b in zip([0, *lines], lines, strict=False)]
    assert max(gaps) * 7.0 <= 35.0 and lines[-1] == 10_000


def test_the_eta_is_smoothed_against_one_slow_interval() -> None:
    cadence = LogCadence(1000, 0)
    t = cadence.last_time
    for step in range(10, 501, 10):  # 1 s per step
        t += 10.0
        steady = cadence.eta(step, t)
    assert steady == pytest.approx(500.0)
    t += 10.0 + 120.0  # ten steps and a two-minute validation
    after = cadence.eta(510, t)
    weight = 10 / 250  # one interval's share of a quarter of the run
    assert after == pytest.approx(490.0 * ((1 - weight) * 1.0 + weight * 13.0))
    assert after < 1.5 * steady


def test_early_on_the_eta_is_the_mean_so_far() -> None:
    cadence = LogCadence(1000, 0)
    t = cadence.last_time
    cadence.eta(10, t + 60.0)  # a slow first interval (compilation, a cold cache)
    eta = cadence.eta(20, t + 70.0)
    assert eta == pytest.approx(980 * 70.0 / 20)


def test_a_log_gets_plain_lines(capsys: pytest.CaptureFixture[str]) -> None:
    with TrainProgress(200, 0, "rope seed 0") as bar:
        for step in range(1, 201):
            bar.update(step, 5.0, 1234.0, val_loss=4.5 if step == 100 else None)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("[rope seed 0] step 2/200 loss 5.000 1,234 tok/s eta ")
    assert any("val 4.5000" in line for line in out)
    assert out[-1].startswith("[rope seed 0] step 200/200") and out[-1].endswith("eta 0s")
