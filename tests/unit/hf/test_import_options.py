"""import-hf takes only what it uses: a setting it would save unread (train.threads, device)
would later keep `posenc eval`, which may not change it, from evaluating the run, and the hub's
options mean nothing for a local folder; each is one line and nothing is created."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.rundir import load_run_config
from tests.unit.hf.test_import import save_model

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

SETTABLE = "set only train.context_length, eval.*, data.*, seed, hydra.run.dir"


def tree(root: Path) -> list[str]:
    """Every path below ``root``: what a refused command must leave as it found it."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["train.threads=1000"], "does not take 'train.threads' (an imported run is evaluated"),
        (["+train.steps=5"], "does not take 'train.steps'"),
        (["device=cpu"], "does not take 'device'"),
        (["model.d_model=64"], "does not take 'model.d_model' (its config.json fixes the model)"),
        (["encoding=alibi"], "does not take 'encoding' (its config.json fixes the model)"),
        (["--revision", "main"], "--revision is for a hub id only, and '"),
        (["--allow-download"], "--allow-download is for a hub id only"),
        (["--revision", "v1", "--allow-download"], "--revision and --allow-download are for"),
    ],
    ids=["threads", "steps", "device", "model", "encoding", "revision", "download", "both"],
)
def test_what_an_import_does_not_use_is_one_line_and_creates_nothing(
    args: list[str], says: str, tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = save_model("llama", tmp_path / "llama", text)
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    res = CliRunner().invoke(app, ["import-hf", str(folder), *args, "hydra.run.dir=imp"])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error: "), lines
    assert says in lines[0] and " — " in lines[0], lines[0]
    assert res.stdout == "" and tree(tmp_path) == before
    if "--" not in args[0]:  # the accepted keys the line lists are the ones taken
        assert lines[0].endswith(SETTABLE), lines[0]


def test_the_keys_the_refusal_lists_are_taken(
    tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = save_model("llama", tmp_path / "llama", text)
    monkeypatch.chdir(tmp_path)
    taken = ["train.context_length=32", "eval=default", "eval.tokens=128", "data.val_every_nth=10"]
    res = CliRunner().invoke(app, ["import-hf", str(folder), *taken, "seed=3", "hydra.run.dir=i"])
    assert res.exit_code == 0, res.output
    cfg = load_run_config(tmp_path / "i")
    assert (cfg.train.context_length, cfg.eval.tokens, cfg.seed) == (32, 128, 3)
    assert cfg.data.val_every_nth == 10 and cfg.train.threads is None
