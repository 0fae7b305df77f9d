"""`posenc extend`'s bad inputs: one line, exit 2, nothing created (in-process Typer app); a
grid of swept values is planned whole before anything is created; extend.factor=1 is
continued training at the parent's length (extend.method=none only)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.compose import compose, load
from posenc_cli.config.overrides import expand_sweep
from posenc_cli.engine.build import build_model
from posenc_cli.engine.extension import ANOTHER
from posenc_cli.workflows.extend_plan import plan_jobs
from tests.helpers.locks import locked_elsewhere


@functools.cache
def saved_config(encoding: str) -> str:
    return OmegaConf.to_yaml(compose(["model=tiny", f"encoding={encoding}"]))


def parent(tmp_path: Path, encoding: str) -> Path:
    """A run directory of ``encoding`` with no checkpoint."""
    run = tmp_path / "parent"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(saved_config(encoding))
    return run


@pytest.mark.parametrize(
    ("encoding", "args", "expected"),
    [
        ("alibi", ["extend.method=yarn"], "extend.method=yarn needs a RoPE-family encoding"),
        ("rope", ["extend.method=pi"], "parent has no checkpoints/last.pt"),
        (
            "rope",
            ["extend.factor=1", "extend.method=yarn"],
            "extend.factor=1 keeps the training length, so extend.method=yarn has nothing to "
            "extend — use extend.method=none for continued training at the training length, "
            "or extend.factor > 1 with yarn, e.g. extend.factor=4",
        ),
        ("rope", ["extend.factor=1.0", "extend.method=pi", "extend.steps=0"], "method=pi has"),
        ("alibi", ["extend.factor=1", "extend.method=ntk"], "extend.method=ntk has nothing"),
        ("rope", ["extend.factor=1", "extend.steps=0"], "extend.method=none is the parent"),
        ("rope", ["extend.factor=0.5"], "extend.factor=0.5 would shorten the context"),
        ("rope", ["extend.passkey_share=1.5"], "extend.passkey_share=1.5 is too large"),
        (
            "rope",
            ["extend.method=pi", "extend.steps=0", "extend.passkey_share=0.5"],
            "extend.passkey_share=0.5 with extend.steps=0: nothing is trained",
        ),
        ("rope", ["train.steps=5"], "`posenc extend` cannot set train.steps"),
        ("rope", ["extend.parent=elsewhere"], "`posenc extend` cannot set extend.parent"),
        ("rope", ["eval.rope_factor=2"], "`posenc extend` cannot set eval.rope_factor"),
        ("rope", ["extend.steps=0"], "extend.steps=0 with extend.method=none is the parent"),
        (
            "rope",
            ["extend.method=yarn", "extend.steps=0", "hydra.run.dir=elsewhere"],
            "extend.steps=0 evaluates the parent in place",
        ),
        (
            "rope",
            ["extend.method=yarn", "extend.factor=1e9", "extend.steps=0"],
            "above the longest",
        ),
        (
            "rope",
            ["extend.steps=10", "extend.warmup_steps=50"],
            "extend.warmup_steps=50 is longer than the run (extend.steps=10), so the learning "
            "rate would never reach extend.lr — use extend.warmup_steps <= 10",
        ),
    ],
)
def test_one_line_and_nothing_created(
    encoding: str, args: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = parent(tmp_path, encoding)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["extend", str(run.name), *args])
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error: ") and expected in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]
    assert sorted(p.name for p in run.iterdir()) == [".hydra"]


def trained_parent(tmp_path: Path, encoding: str) -> Path:
    """A run directory of ``encoding`` whose checkpoint holds its (untrained) tiny model."""
    run = parent(tmp_path, encoding)
    (run / "checkpoints").mkdir()
    model = build_model(load(["model=tiny", f"encoding={encoding}"]), 64)
    torch.save({"model": model.state_dict(), "step": 5}, run / "checkpoints" / "last.pt")
    return run


@pytest.mark.parametrize(
    ("saved", "steps", "expected"),
    [
        ({"model": {"w": torch.zeros(2)}, "step": 5}, 0, "does not fit the parent's config"),
        ({"model": {"w": torch.zeros(2)}, "step": 5}, 5, "does not fit the parent's config"),
        ({"model": {"w": "x"}, "step": "abc"}, 5, "records step 'abc'"),
        ({"step": 5}, 5, "holds no model state"),
    ],
)
def test_a_parent_checkpoint_that_cannot_be_used_is_one_line_and_nothing_created(
    saved: dict, steps: int, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """steps 0: the method evaluated on the parent; else a fine-tune."""
    run = parent(tmp_path, "rope")
    (run / "checkpoints").mkdir()
    torch.save(saved, run / "checkpoints" / "last.pt")
    monkeypatch.chdir(tmp_path)
    args = ["extend", "parent", "extend.method=pi", f"extend.steps={steps}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("posenc: error: checkpoint") and expected in line
    assert line.endswith(ANOTHER)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]
    assert sorted(p.name for p in run.iterdir()) == [".hydra", "checkpoints"]


@pytest.mark.parametrize(
    ("encoding", "expected"),
    [
        ("rope", {"none-5", "dynamic_ntk-0", "dynamic_ntk-5"}),
        ("alibi", {"none-5"}),  # the RoPE methods do not apply; none-0 is the parent itself
    ],
)
def test_a_grid_plans_every_combination_that_applies_and_creates_nothing(
    encoding: str, expected: set[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained_parent(tmp_path, encoding)
    monkeypatch.chdir(tmp_path)
    sweep = ["extend.method=none,dynamic_ntk", "extend.steps=0,5", "hydra.run.dir=grid"]
    jobs, root = plan_jobs(run, sweep)
    assert root == Path("grid") and {f"{j.method}-{j.steps}" for j in jobs} == expected
    for job in jobs:
        if job.steps:
            assert job.planned == Path("grid") / f"{job.method}-{job.steps}"
            assert job.cfg is not None and job.cfg.train.steps == job.steps
        else:  # the parent evaluated with the method: a factor except for dynamic NTK
            factor = () if job.method == "dynamic_ntk" else ("eval.rope_factor=4",)
            assert job.eval_overrides == (f"eval.rope_scaling={job.method}", *factor)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]


def test_the_study_sweeps_every_method_at_0_100_and_400_steps() -> None:
    cfg = compose(["experiment=context_extension"], with_hydra=True)
    params = {str(k): str(v) for k, v in cfg.hydra.sweeper.params.items()}
    jobs = expand_sweep(["experiment=context_extension"], params)
    assert cfg.extend.factor == 4.0 and len(jobs) == 7 * 3
    assert {o for job in jobs for o in job if o.startswith("extend.method=")} == {
        f"extend.method={m}"
        for m in ("none", "pi", "ntk", "dynamic_ntk", "yarn", "llama3", "longrope")
    }
    assert {o for job in jobs for o in job if o.startswith("extend.steps=")} == {
        "extend.steps=0",
        "extend.steps=100",
        "extend.steps=400",
    }


def test_a_grid_over_other_keys_gives_each_job_its_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained_parent(tmp_path, "rope")
    monkeypatch.chdir(tmp_path)
    jobs, _ = plan_jobs(run, ["extend.method=yarn", "extend.factor=2,4", "hydra.run.dir=grid"])
    assert [j.planned for j in jobs] == [
        Path("grid") / "yarn-400-factor=2",
        Path("grid") / "yarn-400-factor=4",
    ]
    assert [j.cfg.train.context_length for j in jobs] == [256, 512]  # the parent: 128
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]


@pytest.mark.parametrize("steps", ["0", "5"])
def test_a_grid_of_one_value_written_twice_is_refused(
    steps: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """extend.factor=2,2.0 names two folders but one fine-tune (or one evaluation)."""
    run = trained_parent(tmp_path, "rope")
    monkeypatch.chdir(tmp_path)
    grid = ["extend.method=pi", "extend.factor=2,2.0", f"extend.steps={steps}", "hydra.run.dir=g"]
    with pytest.raises(PosencError, match="two jobs of this grid are the same"):
        plan_jobs(run, grid)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]


def test_a_grid_of_steps_that_are_not_whole_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained_parent(tmp_path, "rope")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PosencError, match="extend.steps=2.0 is not a whole number"):
        plan_jobs(run, ["extend.method=yarn", "extend.factor=2", "extend.steps=2,2.0"])


def test_a_parent_still_in_use_is_refused_before_anything_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained_parent(tmp_path, "rope")
    monkeypatch.chdir(tmp_path)
    with locked_elsewhere(run):  # as the process training it holds it
        result = CliRunner().invoke(app, ["extend", "parent", "hydra.run.dir=child"])
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "'parent' is in use by another posenc process" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]


def test_factor_1_with_none_plans_continued_training_at_the_parents_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained_parent(tmp_path, "rope")
    monkeypatch.chdir(tmp_path)
    args = ["extend.factor=1", "extend.steps=5", "extend.warmup_steps=1"]
    (job,), root = plan_jobs(run, args)
    assert root is None and job.cfg is not None and job.planned is not None
    t = job.cfg.train
    assert (t.context_length, t.batch_size, t.steps) == (128, 8, 5)  # the parent's L and batch
    ext = job.cfg.extend
    assert (ext.method, ext.factor, ext.original_length, ext.passkey_share) == ("none", 1, 128, 0)
    assert job.planned.name.endswith("-rope-nonex1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]


def test_passkeys_for_a_parent_without_a_tokenizer_are_refused_before_anything_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained_parent(tmp_path, "rope")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PosencError, match="has no tokenizer.json, so its passkey windows"):
        plan_jobs(run, ["extend.factor=1", "extend.steps=5", "extend.passkey_share=1"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]


def test_a_grid_leaves_the_scaling_methods_out_at_factor_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Continued training at L is the control of a study; yarn at factor 1 has nothing to do."""
    run = trained_parent(tmp_path, "rope")
    monkeypatch.chdir(tmp_path)
    grid = ["extend.method=yarn,none", "extend.factor=1,2", "extend.steps=0,5", "hydra.run.dir=g"]
    jobs, _ = plan_jobs(run, grid)
    assert {(j.method, j.steps, j.planned) for j in jobs} == {
        ("yarn", 0, None),  # the parent evaluated with yarn at factor 2
        ("yarn", 5, Path("g") / "yarn-5-factor=2"),
        ("none", 5, Path("g") / "none-5-factor=1"),
        ("none", 5, Path("g") / "none-5-factor=2"),
    }
    lengths = {j.planned.name: j.cfg.train.context_length for j in jobs if j.cfg is not None}
    assert lengths == {"yarn-5-factor=2": 256, "none-5-factor=1": 128, "none-5-factor=2": 256}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]


def no_digits(path: Path) -> None:
    """A word-level tokenizer with no token for any digit, saved at ``path``."""
    vocab = {"the": 0, "pass": 1, "key": 2, "[UNK]": 3}
    Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")).save(str(path))


@pytest.mark.parametrize(
    ("share", "tokenizer", "expected"),
    [
        ("0.5", no_digits, "has no token of its own for each digit, so a passkey window"),
        ("0.01", None, "extend.passkey_share=0.01 of a batch of 8 windows is no passkey window"),
    ],
)
def test_passkey_windows_that_cannot_be_made_are_refused_before_anything_is_created(
    share: str, tokenizer: Any, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained_parent(tmp_path, "rope")
    if tokenizer is not None:
        tokenizer(RunDir(run).tokenizer_file)
    before = sorted(p.name for p in run.iterdir())
    monkeypatch.chdir(tmp_path)
    args = ["extend", "parent", "extend.factor=1", f"extend.passkey_share={share}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("posenc: error: ") and expected in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]
    assert sorted(p.name for p in run.iterdir()) == before


def test_a_grid_with_no_job_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = trained_parent(tmp_path, "rope")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PosencError, match="no combination of the grid is a job"):
        plan_jobs(run, ["extend.factor=1", "extend.method=yarn,pi", "extend.steps=2"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]


def test_a_parent_stopped_before_its_steps_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its last checkpoint (step 5 of 2,000) is extended as it is; the command says so."""
    from posenc_cli.cli.extend_command import _print_unfinished_parent

    run = trained_parent(tmp_path, "rope")
    monkeypatch.chdir(tmp_path)
    jobs, _ = plan_jobs(run, ["extend.method=pi", "extend.factor=2", "extend.steps=5"])
    _print_unfinished_parent(run, jobs)
    assert f"note: {run} stopped at step 5 of its 2000" in capsys.readouterr().out
    evaluations, _ = plan_jobs(run, ["extend.method=pi", "extend.factor=2", "extend.steps=0"])
    _print_unfinished_parent(run, evaluations)  # evaluates the parent in place: its own note
    assert capsys.readouterr().out == ""
