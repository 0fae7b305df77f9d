"""Class 7, Hydra keys that control the run directory's layout are checked like any other key:
a value that would make the run unusable (no .hydra/ for eval and resume to read, relative paths
read from inside the run) is refused before the run directory exists."""

from __future__ import annotations

from collections.abc import Callable

import pytest

#: A run that would take seconds, were it not refused.
TINY = ["model=tiny", "train.steps=4", "train.warmup_steps=1", "device=cpu"]

#: (overrides, what the line says).
CASES = [
    (["hydra.output_subdir=null"], "hydra.output_subdir=null would leave the run without"),
    (["hydra.output_subdir=../x"], "hydra.output_subdir=../x would leave the run without"),
    (["hydra.job.chdir=true", "data=text", "data.path=a.txt"], "hydra.job.chdir=true would"),
    (["hydra.mode=MULTIRUN"], "hydra.mode=MULTIRUN: the command decides it"),
    (["hydra.run.dir=''"], "hydra.run.dir is empty"),
]


@pytest.mark.parametrize(("args", "expected"), CASES, ids=[c[0][0] for c in CASES])
def test_a_hydra_key_that_would_make_the_run_unusable_is_refused(
    args: list[str], expected: str, refused: Callable[..., str]
) -> None:
    assert expected in refused(["train", *TINY, *args])
