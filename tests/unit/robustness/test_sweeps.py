"""Class 8, sweeps: every job is composed and checked before the sweep starts, so a key given
both swept and fixed, or a value no job could use, is one line naming it; data.path can be
swept, one job per file, each in a folder inside the sweep."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from posenc_cli.config.resolvers import folder_name
from posenc_cli.workflows.sweep import plan

#: A run that would take seconds, were it not refused.
TINY = ["model=tiny", "train.steps=4", "train.warmup_steps=1", "device=cpu"]

#: (overrides, what the line says).
CASES = [
    (["seed=0,1", "seed=2"], "seed is given twice ('seed=0,1' and 'seed=2')"),
    (["seed=2", "seed=0,1"], "seed is given twice"),
    (["train.steps=4,8", "+train.steps=6"], "train.steps is given twice"),
    (["seed=0,1", "hydra.output_subdir=null"], "hydra.output_subdir=null would leave"),
    (["seed=0,1", "eval.stride=8"], "eval.stride=8 has no effect"),
    (["seed=0,0"], "two identical jobs [seed=0] would both write to the folder 'seed=0'"),
    (["seed=0,00"], "are the same run"),  # two folders, one configuration
    (["train.lr=0.001,1e-3"], "train.lr=0.001"),
    (["seed=0,1", "hydra.run.dir=one"], "hydra.run.dir names one run's folder"),
]


@pytest.mark.parametrize(("args", "expected"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_sweep_refuses_before_it_starts(
    args: list[str], expected: str, refused: Callable[..., str]
) -> None:
    assert expected in refused(["sweep", *TINY, *args])


def test_a_sweep_over_data_path_plans_one_job_per_file(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    b = tmp_path / "b.txt"
    for f in (a, b):
        f.write_text("text\n")
    base, jobs, _ = plan([*TINY, "data=text", f"data.path={a},{b}"])
    assert str(base.data.path) == str(a)
    assert [j[-1] for j in jobs] == [f"data.path={a}", f"data.path={b}"]


def test_two_paths_that_name_one_folder_are_refused_before_any_job(
    tmp_path: Path, refused: Callable[..., str]
) -> None:
    """d/a.txt and d_a.txt both name the folder data.path=d_a.txt ('/' becomes '_'): the
    second job would train over the first and leave a run whose config names the wrong file."""
    (tmp_path / "d").mkdir()
    for name in ("d/a.txt", "d_a.txt"):
        (tmp_path / name).write_text("text\n")
    paths = f"{tmp_path}/d/a.txt,{tmp_path}/d_a.txt"
    assert "would both write to the folder" in refused(
        ["sweep", *TINY, "data=text", f"data.path={paths}"]
    )


def test_a_fixed_key_given_twice_is_the_last_value_as_in_train() -> None:
    base, jobs, _ = plan([*TINY, "train.steps=8", "seed=0,1"])
    assert int(base.train.steps) == 8 and [j[-1] for j in jobs] == ["seed=0", "seed=1"]


def test_a_swept_path_names_a_folder_inside_the_sweep_never_a_path() -> None:
    assert folder_name("data.path=../up/a.txt,seed=0") == "data.path=.._up_a.txt,seed=0"
    assert folder_name("") == "job" and "/" not in folder_name("data.path=/abs/a.txt")
