"""Values that used to be ignored, mislabelled or to break a run's layout (hydra keys, sweeps):
each is one line, exit code 2, no traceback, nothing created and nothing earlier lost — or,
where it can be honoured, it is (in-process through the Typer app)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.cli.sweep import plan
from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.config.resolvers import _folder_name

TINY = ["model=tiny", "train.steps=4", "train.warmup_steps=1", "device=cpu"]


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def refused(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The one error line of ``posenc ARGS`` run in a folder that holds an earlier run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("POSENC_CACHE", str(tmp_path.with_name(f"{tmp_path.name}-cache")))
    earlier = tmp_path / "outputs" / "earlier"
    earlier.mkdir(parents=True)
    (earlier / "metrics.json").write_text('{"encoding": "rope"}')
    (tmp_path / "a.txt").write_text("some text\n")
    before = files_under(tmp_path)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error: ") and " — " in lines[0]
    assert "Traceback" not in result.output
    assert files_under(tmp_path) == before and sorted(os.listdir(tmp_path)) == ["a.txt", "outputs"]
    assert os.listdir(tmp_path / "outputs") == ["earlier"]
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["hydra.output_subdir=null"], "hydra.output_subdir=null would leave the run without"),
        (["hydra.output_subdir=../x"], "hydra.output_subdir=../x would leave the run without"),
        (["hydra.job.chdir=true", "data=text", "data.path=a.txt"], "hydra.job.chdir=true would"),
        (["hydra.mode=MULTIRUN"], "hydra.mode=MULTIRUN: the command decides it"),
        (["hydra.run.dir=''"], "hydra.run.dir is empty"),
        (["data.path=a.txt"], "data.path is set but data=sotu reads its built-in corpus"),
        (["data.val_path=a.txt"], "data.val_path is set but data=sotu reads"),
        (
            ["eval.mode=sliding", "eval.stride=3000"],
            "eval.stride=3000 is longer than the longest evaluated length 2048",
        ),
        (
            ["eval.extrapolation.mode=sliding", "eval.extrapolation.stride=3000"],
            "eval.stride=3000 is longer than the longest evaluated length 2048",
        ),
        (
            ["eval.factors=[2,4]", "eval.mode=sliding", "eval.stride=513"],
            "longest evaluated length 512",
        ),
        (["eval.stride=16"], "eval.stride=16 has no effect with eval.mode=nonoverlapping"),
        (["eval.extrapolation.stride=16"], "eval.stride=16 has no effect"),
        (
            ["eval.tokens=1"],
            "eval.tokens=1 is less than one window of the shortest evaluated length 128",
        ),
        (["eval.extrapolation.tokens=127"], "eval.tokens=127 is less than one window"),
        (["eval.factors=[2,4]", "eval.tokens=255"], "shortest evaluated length 256"),
        (["train.warmup_steps=5"], "train.warmup_steps=5 is longer than the run (train.steps=4)"),
    ],
)
def test_train_refuses_a_value_that_would_not_take_effect(
    args: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert expected in refused(["train", *TINY, *args], tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["seed=0,1", "seed=2"], "seed is given twice ('seed=0,1' and 'seed=2')"),
        (["seed=2", "seed=0,1"], "seed is given twice"),
        (["train.steps=4,8", "+train.steps=6"], "train.steps is given twice"),
        (["seed=0,1", "hydra.output_subdir=null"], "hydra.output_subdir=null would leave"),
        (["seed=0,1", "eval.stride=8"], "eval.stride=8 has no effect"),
    ],
)
def test_sweep_refuses_before_it_starts(
    args: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert expected in refused(["sweep", *TINY, *args], tmp_path, monkeypatch)


def test_values_that_take_effect_or_harmless_defaults_still_compose() -> None:
    """A stride up to the longest length slides where it can (capped below it, each length's
    stride recorded); a budget above the shortest length scores it (longer lengths are skipped
    with the reason); a default warmup longer than a short run is honoured as configured."""
    for stride in (128, 1000, 2048):
        ex = compose(["eval.mode=sliding", f"eval.stride={stride}"]).eval.extrapolation
        assert (ex.mode, ex.stride) == ("sliding", stride)
    assert compose(["eval.tokens=128"]).eval.extrapolation.tokens == 128
    assert compose(["train.steps=100", "train.warmup_steps=100"]).train.warmup_steps == 100
    assert compose(["train.steps=4"]).train.warmup_steps == 100


def test_a_stride_a_saved_config_keeps_is_recorded_as_unused_outside_sliding() -> None:
    """`posenc eval RUN eval.mode=nonoverlapping` of a run evaluated with a sliding stride:
    the saved stride is not an error, and the result says no stride was used."""
    from posenc_cli.evals.extrapolation_result import length_record
    from posenc_cli.evals.run import apply_overrides

    saved = compose(["model=tiny", "eval.mode=sliding", "eval.stride=64"])
    cfg = apply_overrides(saved, ["eval.mode=nonoverlapping"])
    ex = cfg.eval.extrapolation
    assert (ex.mode, ex.stride) == ("nonoverlapping", 64)
    lengths = [128 * int(f) for f in ex.factors]
    assert length_record(ex, 128, lengths, {})["stride"] is None
    assert length_record(saved.eval.extrapolation, 128, lengths, {})["stride"] == 64
    with pytest.raises(PosencError, match="eval.stride=8 has no effect with eval.mode=nonover"):
        apply_overrides(saved, ["eval.mode=nonoverlapping", "eval.stride=8"])


def test_a_sweep_over_data_path_plans_one_job_per_file(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    b = tmp_path / "b.txt"
    for f in (a, b):
        f.write_text("text\n")
    base, jobs = plan([*TINY, "data=text", f"data.path={a},{b}"])
    assert str(base.data.path) == str(a)
    assert [j[-1] for j in jobs] == [f"data.path={a}", f"data.path={b}"]


def test_a_fixed_key_given_twice_is_the_last_value_as_in_train() -> None:
    base, jobs = plan([*TINY, "train.steps=8", "seed=0,1"])
    assert int(base.train.steps) == 8 and [j[-1] for j in jobs] == ["seed=0", "seed=1"]


def test_a_swept_path_names_a_folder_inside_the_sweep_never_a_path() -> None:
    assert _folder_name("data.path=../up/a.txt,seed=0") == "data.path=.._up_a.txt,seed=0"
    assert _folder_name("") == "job" and "/" not in _folder_name("data.path=/abs/a.txt")
