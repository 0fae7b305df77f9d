"""One `posenc bench` case (bench/case.py), in this process: its ratio to `none` comes from
steps that alternate with `none`'s, the order swapped every round."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from posenc_cli.bench import case
from posenc_cli.bench.plan import cases
from posenc_cli.bench.suite import compose_bench
from posenc_cli.config.run_config import typed

#: A tiny bench: `none` and ALiBi, evaluated at 8 tokens, four timed forwards.
TINY_BENCH = [
    "model=tiny",
    "bench.encodings=[none,alibi]",
    "bench.context_length=8",
    "bench.eval_factors=[1]",
    "bench.eval_steps=4",
    "bench.threads=1",
    "data.vocab_size=300",
]


@pytest.fixture
def specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """The evaluation case of each encoding, as `posenc bench` plans it."""
    monkeypatch.chdir(tmp_path)
    run = typed(compose_bench(TINY_BENCH)[0])
    assert run.bench is not None
    return {s["name"]: s for s in cases(run, run.bench)[1:] if s["kind"] == "eval"}


def test_the_ratio_to_none_is_measured_interleaved(
    specs: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = specs["alibi"]
    calls: list[Callable[[], Any]] = []
    clock = iter(range(1000))
    real = case.timed

    def counted(fn: Callable[[], Any], *_: Any) -> float:
        calls.append(fn)
        real(fn)
        return float(next(clock))

    monkeypatch.setattr(case, "timed", counted)
    result = case.run(spec)
    own, base = result["interleaved_step_times_s"], result["interleaved_none_step_times_s"]
    assert len(own) == len(base) == spec["timed"]
    assert result["ratio_vs_none_interleaved"] == statistics.median(own) / statistics.median(base)
    assert result["attention"] == "sdpa" and result["peak_rss_mb"] > 0
    timed_alone = 1 + spec["timed"]  # the first step, then the timed ones
    pairs = calls[timed_alone:]
    first, second = pairs[0], pairs[1]
    assert first is not second and pairs[2:4] == [second, first] and pairs[4:6] == [first, second]


def test_none_is_not_timed_against_itself(specs: dict[str, dict[str, Any]]) -> None:
    result = case.run(specs["none"])
    assert "ratio_vs_none_interleaved" not in result and result["tokens_per_s"] > 0
