"""`posenc train` then `posenc eval` again with another protocol and on other text. The run is
trained by the installed CLI in a subprocess; the evaluations that follow run the same command
in this process (CliRunner), which spares each one an interpreter's start-up."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from tests.helpers.cli import run_cli

pytestmark = pytest.mark.slow


def write_text(path: Path, n_docs: int, seed: int) -> Path:
    rng = random.Random(seed)
    words = [
        rng.choice("abcdefghij") * rng.randint(1, 4) + rng.choice("klmnopq") for _ in range(200)
    ]
    docs = [" ".join(rng.choices(words, weights=range(200, 0, -1), k=500)) for _ in range(n_docs)]
    path.write_text("\n<|endoftext|>\n".join(docs))
    return path


def posenc_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """posenc(*args): `posenc train` as a subprocess, every other command in this process, in
    ``tmp_path`` with the cache under it; each must succeed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("POSENC_CACHE", str(tmp_path / "cache"))

    def posenc(*args: str) -> Any:
        if args[0] == "train":
            proc = run_cli(list(args), tmp_path, tmp_path / "cache", check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            return proc
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == 0, (result.output, result.exception)
        return result

    return posenc


def test_cli_train_then_eval_sliding_and_other_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    posenc = posenc_in(tmp_path, monkeypatch)

    corpus = write_text(tmp_path / "corpus.txt", 40, seed=0)
    other = write_text(tmp_path / "other.txt", 6, seed=1)
    run_dir = tmp_path / "run"
    posenc(
        "train",
        "model=tiny",
        "train.steps=20",
        "train.context_length=16",
        "data.vocab_size=300",
        "eval.tokens=512",
        f"hydra.run.dir={run_dir}",
        "data=text",
        f"data.path={corpus}",
        "device=cpu",
        "train.threads=1",
    )
    first = json.loads((run_dir / "metrics.json").read_text())
    assert first["extrapolation"]["tokens"] == 512 and (run_dir / "tokenizer.json").is_file()
    proc = posenc("eval", str(run_dir), "eval.mode=sliding", "eval.stride=8")
    assert "extrapolation_sliding8" in proc.stdout
    posenc("eval", str(run_dir), "data=text", f"data.path={other}")
    posenc("eval", str(run_dir), "eval.rope_scaling=yarn")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["extrapolation"] == first["extrapolation"]
    yarn = metrics["extrapolation_yarn"]
    assert yarn["rope_scaling"] == "yarn" and set(yarn["rope_factors"].values()) == {16.0}
    sliding = metrics["extrapolation_sliding8"]
    assert sliding["mode"] == "sliding" and sliding["tokens"] == 512
    assert sliding["strides"] == {"16": 8, "32": 8, "64": 8, "128": 8, "256": 8}
    (ood_key,) = [k for k in metrics if k.startswith("extrapolation_text_other_")]
    ood = metrics[ood_key]
    assert ood["data"] == ood_key.removeprefix("extrapolation_")
    assert len(ood["source"]["hash"]) == 8 and ood["source"]["path"] == str(other)
    assert all(v is not None for v in ood["ppl"].values())

    def tags(folder: Path) -> set[str]:
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        return set(acc.Tags()["scalars"])

    assert {"extrapolation/ppl", "val/loss"} <= tags(run_dir)
    assert "extrapolation_sliding8/ppl" in tags(run_dir / "eval" / "extrapolation_sliding8")
    assert f"{ood_key}/ppl" in tags(run_dir / "eval" / ood_key)
    posenc("eval", str(run_dir), "eval.mode=sliding", "eval.stride=8")  # the same again
    folder = run_dir / "eval" / "extrapolation_sliding8"
    assert len(list(folder.glob("events.out.tfevents.*"))) == 1
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    steps = [e.step for e in acc.Scalars("extrapolation_sliding8/ppl")]
    assert steps == sorted(set(steps)) == [16, 32, 64, 128, 256]


def test_results_are_keyed_by_content_and_precision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    posenc = posenc_in(tmp_path, monkeypatch)

    run_dir = tmp_path / "run"
    posenc(
        "train",
        "model=tiny",
        "train.steps=10",
        "train.context_length=16",
        "data.vocab_size=300",
        "eval.tokens=256",
        "eval.factors=[1,2]",
        "data=text",
        f"data.path={write_text(tmp_path / 'corpus.txt', 40, seed=0)}",
        f"hydra.run.dir={run_dir}",
        "train.precision=bf16",
    )
    first = json.loads((run_dir / "metrics.json").read_text())["extrapolation"]
    keys = []
    for folder, seed in (("a", 1), ("b", 2)):  # same file name, different text
        (tmp_path / folder).mkdir()
        other = write_text(tmp_path / folder / "other.txt", 6, seed=seed)
        posenc("eval", str(run_dir), "data=text", f"data.path={other}")
        metrics = json.loads((run_dir / "metrics.json").read_text())
        keys = [k for k in metrics if k.startswith("extrapolation_text_other_")]
    assert len(keys) == 2
    proc = posenc("eval", str(run_dir), "train.precision=fp32")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["extrapolation"] == first and first["precision"] == "bf16"
    assert metrics["extrapolation_fp32"]["precision"] == "fp32"
    assert "replaced" not in proc.stdout
    again = posenc("eval", str(run_dir), "train.precision=fp32")
    assert "replaced by this one" in again.stdout
