"""Task runs train like language models: every task with every encoding, learning, an exact
resume, evaluation with a learned table too short, and the CLI's files and one-line errors."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.common import faults
from posenc_cli.config.compose import load
from posenc_cli.engine.build import build_model
from posenc_cli.engine.runtime import make_runtime
from posenc_cli.engine.step import make_optimizer, train_step
from posenc_cli.engine.trainer import Trainer
from posenc_cli.evals.tasks.length_generalization import LengthGeneralization
from posenc_cli.synthetic.base import build_task
from posenc_cli.synthetic.batches import collate, draw, evaluation_set
from posenc_cli.synthetic.config import task_config
from posenc_cli.synthetic.scoring import score_answers

TINY = [
    "model=tiny",
    "train.batch_size=16",
    "train.warmup_steps=5",
    "train.precision=fp32",
    "train.eval_every=1000",
    "train.checkpoint_every=1000",
    "train.log_every=10",
    "train.eval_batches=1",
    "task.test_instances=20",
]


@pytest.fixture(autouse=True)
def shared_cache(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A language-modelling run by mistake would train a tokenizer: the session's cache."""
    monkeypatch.setenv("POSENC_CACHE", str(cache_dir))


class _Quiet:
    def update(self, *args: object, **kwargs: object) -> None:
        pass


@contextlib.contextmanager
def quiet(*args: object) -> Iterator[_Quiet]:
    yield _Quiet()


def task_names(repo: Path) -> list[str]:
    return sorted(p.stem for p in (repo / "configs" / "task").glob("*.yaml") if p.stem != "lm")


@pytest.mark.encodings
def test_every_task_trains_and_scores_with_this_encoding(name: str, repo: Path) -> None:
    cfg = load([f"encoding={name}", *TINY[:-1]])
    rt = make_runtime(cfg)
    for task_name in task_names(repo):
        values = OmegaConf.to_container(
            OmegaConf.load(repo / "configs" / "task" / f"{task_name}.yaml")
        )
        task = build_task(
            task_config({**values["task"], "train_lengths": [1, 4], "test_lengths": [4, 8]})
        )
        cfg.train.context_length = task.sequence_length(4) - 1
        torch.manual_seed(0)
        model = build_model(cfg, task.vocab_size)
        x, y = collate(draw(task, (1, 4), 4, (0, 1)), width=24)  # one shape for every task
        loss, _ = train_step(model, make_optimizer(model, cfg.train), x, y, rt, 1.0)
        assert torch.isfinite(loss)
        score = score_answers(model.eval(), evaluation_set(task, 8, 4))
        assert 0 <= score.exact_match <= 1 and score.tokens > 0


def trainer(cfg_overrides: list[str], run_dir: Path) -> Trainer:
    cfg = load(cfg_overrides)
    return Trainer(cfg, run_dir, make_runtime(cfg), None)


COPY = [
    "task=copy",
    "encoding=rope",
    *TINY,
    "task.train_lengths=[1,4]",
    "task.symbols=4",
    "task.test_lengths=[4,8]",
    "train.batch_size=32",
]


def test_a_short_copy_run_learns(tmp_path: Path) -> None:
    tr = trainer([*COPY, "train.steps=60", "train.lr=1e-2"], tmp_path)
    tr.fit(quiet)
    score = score_answers(tr.lm.eval(), evaluation_set(build_task(tr.cfg.task), 4, 200))
    tr.close()
    assert score.exact_match > 0.5  # chance: (1/8)^4 per instance


def test_a_resumed_task_run_continues_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [*COPY, "train.steps=20", "train.checkpoint_every=10"]
    side = tmp_path / "at10.pt"

    def keep_step_10(point: str, step: int, folder: Path) -> None:
        if point == "after_save" and step == 10:
            shutil.copyfile(folder / "last.pt", side)

    monkeypatch.setattr(faults, "pause", keep_step_10)
    straight = trainer(args, tmp_path / "a")
    straight.fit(quiet)
    straight.close()
    (tmp_path / "b" / "checkpoints").mkdir(parents=True)
    shutil.copyfile(side, tmp_path / "b" / "checkpoints" / "last.pt")
    resumed = trainer(args, tmp_path / "b")
    resumed.resume()
    assert resumed.state.step == 10
    resumed.fit(quiet)
    resumed.close()
    for (k, a), b in zip(
        straight.lm.state_dict().items(), resumed.lm.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), k


def test_lengths_past_a_learned_table_are_not_applicable() -> None:
    cfg = load(
        [
            "task=copy",
            "encoding=learned",
            "encoding.max_len=40",
            *TINY,
            "task.train_lengths=[1,8]",
            "task.test_lengths=[8,16,32]",
        ]
    )
    torch.manual_seed(0)
    model = build_model(cfg, build_task(cfg.task).vocab_size).eval()
    result = LengthGeneralization().run(model, None, cfg, make_runtime(cfg))
    assert result["exact_match"]["8"] is not None and result["exact_match"]["16"] is not None
    assert result["exact_match"]["32"] is None and "encoding.max_len" in result["skipped"]["32"]


def test_the_cli_writes_results_and_tensorboard(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["train", *COPY, "train.steps=4", "train.warmup_steps=2", f"hydra.run.dir={run}"]
    )
    assert result.exit_code == 0, result.output
    import json

    metrics = json.loads((run / "metrics.json").read_text())
    res = metrics["length_generalization"]
    assert res["task"] == "copy" and set(res["exact_match"]) == {"4", "8"}
    assert "extrapolation" not in metrics and metrics["task"] == "copy"
    saved = OmegaConf.load(run / ".hydra" / "config.yaml")  # what ran, not the default 128
    assert saved.train.context_length == metrics["train_length"] != 128
    acc = EventAccumulator(str(run))
    acc.Reload()
    assert [e.step for e in acc.Scalars("task/exact_match")] == [4, 8]
    assert not (run / "tokenizer.json").exists()


def test_progress_and_sweep_lines_name_the_task_of_a_task_run() -> None:
    lm, copy = (load(["encoding=rope", "seed=2", f"task={task}"]) for task in ("lm", "copy"))
    assert [lm.label(), copy.label()] == ["rope seed 2", "rope copy seed 2"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["task=copy", "task.train_lengths=[5,2]"], "not a range"),
        (["task=copy", "task.train_lengths=[]"], "not a list"),
        (["task=copy", "task.test_lengths=[4,8]"], "reach the longest training length"),
        (["task=associative_recall", "task.key_symbols=10"], "too small"),
        (["task=copy", "task.symbols=1"], "too small"),
        (["task=copy", "task.symbols=abc"], "not a whole number"),
        (["task=copy", "+task.bogus=1"], "has no key task.bogus"),
        (["+task.symbols=4"], "task=lm"),
    ],
)
def test_bad_task_configs_are_one_line(
    args: list[str], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", *args])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("posenc: error: ") and says in lines[0], lines[0]
    assert not (tmp_path / "outputs").exists()
