"""`posenc train` end to end through the CLI, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers.cli import run_cli
from tests.helpers.configs import TINY

pytestmark = pytest.mark.slow

TAGS = {
    "train/loss",
    "train/lr",
    "train/grad_norm",
    "train/tokens_per_s_last_interval",
    "val/loss",
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, corpus: Path, cache_dir: Path) -> Path:
    work = tmp_path_factory.mktemp("work")
    res = run_cli(
        [
            "train",
            *TINY,
            "encoding=rope",
            "data=text",
            f"data.path={corpus}",
            "hydra.run.dir=runs/first",
        ],
        work,
        cache_dir,
    )
    assert res.returncode == 0, res.stderr + res.stdout
    (work / "summary.txt").write_text(res.stdout)
    return work / "runs" / "first"


def test_train_writes_a_complete_run_directory(trained: Path) -> None:
    assert (trained / ".hydra" / "config.yaml").is_file()
    assert "train.steps=20" in (trained / ".hydra" / "overrides.yaml").read_text()
    ckpt = torch.load(trained / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["step"] == 20 and "model" in ckpt and "optimizer" in ckpt
    assert {"batch_rng", "torch_rng", "config"} <= set(ckpt)
    metrics = json.loads((trained / "metrics.json").read_text())
    for key in (
        "encoding",
        "seed",
        "train_length",
        "final_val_loss",
        "tokens_per_s",
        "n_params",
        "wall_time_s",
    ):
        assert key in metrics
    assert metrics["encoding"] == "rope" and metrics["train_length"] == 16


def test_one_wall_time_and_a_mean_rate_everywhere(trained: Path) -> None:
    """tokens/s is the tokens trained over the seconds of the training steps; the wall time is
    the sum of the phases, and the summary prints the figures metrics.json holds."""
    metrics = json.loads((trained / "metrics.json").read_text())
    parts = metrics["time_s"]
    assert {"setup", "steps", "validation", "checkpoints", "evaluation"} <= set(parts)
    assert all(v >= 0 for v in parts.values()) and parts["evaluation"] > 0
    assert metrics["wall_time_s"] == round(sum(parts.values()), 2)
    tokens, steps = metrics["train_tokens"], parts["steps"]  # steps is rounded to 0.01 s
    assert tokens / (steps + 0.005) <= metrics["tokens_per_s"] <= tokens / max(steps - 0.005, 1e-3)
    summary = (trained.parent.parent / "summary.txt").read_text()
    assert f"{metrics['wall_time_s']:,.1f} s" in summary
    assert f"{metrics['tokens_per_s']:,.0f}" in summary
    assert "val perplexity" not in summary  # the evaluation's perplexity at L is the one shown


def test_event_file_holds_the_documented_tags(trained: Path) -> None:
    acc = EventAccumulator(str(trained))
    acc.Reload()
    assert TAGS <= set(acc.Tags()["scalars"])
    steps = [e.step for e in acc.Scalars("train/loss")]
    assert steps == sorted(set(steps)) and steps[-1] == 20
    loss = [e.value for e in acc.Scalars("train/loss")]
    assert loss[-1] < loss[0]


def test_existing_run_directory_is_never_overwritten(
    trained: Path, corpus: Path, cache_dir: Path
) -> None:
    before = (trained / "metrics.json").read_bytes()
    res = run_cli(
        ["train", *TINY, "data=text", f"data.path={corpus}", "hydra.run.dir=runs/first"],
        trained.parent.parent,
        cache_dir,
    )
    assert res.returncode == 2
    assert "already exists" in res.stderr
    assert (trained / "metrics.json").read_bytes() == before


def test_default_run_directories_are_unique(tmp_path: Path, corpus: Path, cache_dir: Path) -> None:
    args = [
        "train",
        *TINY,
        "train.steps=2",
        "data=text",
        f"data.path={corpus}",
        "eval.at_end=false",
    ]
    for _ in range(2):
        assert run_cli(args, tmp_path, cache_dir).returncode == 0
    runs = sorted((tmp_path / "outputs").glob("*/*"))
    assert len(runs) == 2 and all(r.name.split("-")[3].startswith("rope") for r in runs)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["encoding=ropee"], "unknown encoding 'ropee' (did you mean 'rope'?)"),
        (["train.steps=many"], "wrong type for 'train.steps'"),
        (["nonsense"], "cannot parse override"),
    ],
)  # through the installed entry point; the other messages in-process (tests/unit/cli/)
def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, cache_dir: Path, args: list[str], needle: str
) -> None:
    res = run_cli(["train", *args], tmp_path, cache_dir)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error: "), res.stderr
    assert needle in lines[0]
    assert " — " in lines[0]
    assert "Traceback" not in res.stderr + res.stdout
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("content", [b"", b"\x80\x81\x82 not utf8"])
def test_bad_data_files_are_one_line(tmp_path: Path, cache_dir: Path, content: bytes) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    res = run_cli(["train", "data=text", f"data.path={bad}"], tmp_path, cache_dir)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "posenc: error:" in res.stderr
    assert not (tmp_path / "outputs").exists()


def test_corpus_shorter_than_a_window_fails_before_the_run(
    tmp_path: Path, corpus: Path, cache_dir: Path
) -> None:
    res = run_cli(
        # no evaluation at the end: TINY's eval.tokens would be refused first (no tokenizing)
        ["train", *TINY, "train.context_length=100000", "eval.at_end=false"]
        + ["data=text", f"data.path={corpus}"],
        tmp_path,
        cache_dir,
    )
    assert res.returncode == 2
    assert "posenc: error: the corpus is too short" in res.stderr
    assert not (tmp_path / "outputs").exists()


def test_help_lists_groups_and_options(tmp_path: Path, cache_dir: Path) -> None:
    for args in (["--help"], ["train", "--help"]):
        res = run_cli(args, tmp_path, cache_dir)
        assert res.returncode == 0
        assert "encoding:" in res.stdout and "rope" in res.stdout and "model:" in res.stdout


def test_encodings_lists_every_yaml(tmp_path: Path, cache_dir: Path) -> None:
    from posenc_cli.config.groups import group_options

    res = run_cli(["encodings"], tmp_path, cache_dir)
    assert res.returncode == 0
    for name in group_options("encoding"):
        assert name in res.stdout
