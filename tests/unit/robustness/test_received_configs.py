"""Class 5, received configs: a received run directory's saved config is data. posenc's own
interpolations resolve against the file; every other resolver is refused in one line, reads
nothing from the reader's environment, and writes nothing (no cache folder named after it)."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.compose import compose
from posenc_cli.config.run_config import typed
from posenc_cli.data.tokenizer import train_tokenizer
from posenc_cli.engine.build import build_model

SECRET = "s3cr3t-value-never-shown"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Path:
    """A run directory as `posenc train` leaves it (the config as Hydra saves it, unresolved)
    of a tiny random CoPE model: made once, copied by each test."""
    cfg = compose(
        ["encoding=cope", "model=tiny", "train.context_length=16", "data=text"]
        + [f"data.path={corpus}", "data.vocab_size=300", "device=cpu"]
    )
    run = tmp_path_factory.mktemp("received") / "run"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    tok = train_tokenizer(iter([corpus.read_text(encoding="utf-8")]), 300)
    tok.save(str(run / "tokenizer.json"))
    torch.manual_seed(0)
    (run / "checkpoints").mkdir()
    state = build_model(typed(cfg), 300).state_dict()
    torch.save({"model": state, "step": 3}, run / "checkpoints" / "last.pt")
    return run


def received(trained: Path, root: Path, key: str = "", value: str = "") -> Path:
    """A copy of the trained run whose saved config sets ``key`` (dotted) to ``value``."""
    run = Path(shutil.copytree(trained, root / "run"))
    if key:
        saved = run / ".hydra" / "config.yaml"
        cfg = OmegaConf.load(saved)
        OmegaConf.update(cfg, key, value, force_add=True)
        OmegaConf.save(cfg, saved)
    return run


@pytest.fixture(autouse=True)
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """The secret in the reader's environment."""
    monkeypatch.setenv("SECRET", SECRET)


#: (key of the saved config, the value a sender wrote there).
CASES = [
    ("data.name", "${oc.env:SECRET}"),
    ("data.name", "${oc.env:SECRET,fallback}"),
    ("data.name", "${posenc.add:${oc.env:SECRET},1}"),
    ("data.name", "x-${oc.env:SECRET}"),
    ("data.name", "${oc.decode:'${oc.env:SECRET}'}"),
    ("encoding.max_position", "${oc.create:{a: ${oc.env:SECRET}}}"),
    ("seed", "${oc.select:nope.nope,${oc.env:SECRET}}"),
    ("eval.tasks", "${oc.dict.keys:data}"),
]


@pytest.mark.parametrize(("key", "value"), CASES)
def test_a_resolver_in_a_received_config_is_refused_and_reads_nothing(
    key: str, value: str, trained: Path, workdir: Path, refused: Callable[..., str]
) -> None:
    run = received(trained, workdir, key, value)
    line = refused(["eval", str(run)])
    assert f"sets {key} to" in line and " — write the value itself" in line
    assert SECRET not in line


def test_a_saved_cope_run_still_loads_and_evaluates(trained: Path, workdir: Path) -> None:
    """CoPE's YAML derives max_position from the context length through posenc.add: a
    saved run of it resolves against its own train.context_length (16 + 1)."""
    run = received(trained, workdir)
    saved = (run / ".hydra" / "config.yaml").read_text()
    assert "max_position: ${posenc.add:${train.context_length},1}" in saved
    args = ["eval", str(run), "eval.tokens=64", "eval.factors=[1,2]"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    metrics = json.loads((run / "metrics.json").read_text())
    result = metrics["extrapolation_t64_x1-2"]
    assert result["lengths"] == [16, 32]
    for length, loss in result["loss"].items():
        assert result["ppl"][length] == pytest.approx(math.exp(loss))


#: (key of the saved config, the value a sender wrote, what the one line says).
MALFORMED = [
    ("train.bogus_key", "7", "unknown key 'train.bogus_key'"),
    ("train.batch_size", "four", "wrong type for 'train.batch_size'"),
    ("train.steps", "20.5", "wrong type for 'train.steps'"),
    ("model.d_model", "[1, 2]", "wrong type for 'model.d_model'"),
]


@pytest.mark.parametrize(
    ("key", "value", "says", "command"),
    [(*case, "eval") for case in MALFORMED] + [(*MALFORMED[0], "inspect")],
)
def test_a_received_config_with_an_unknown_key_or_a_wrong_type_is_one_line(
    key: str,
    value: str,
    says: str,
    command: str,
    trained: Path,
    workdir: Path,
    refused: Callable[..., str],
) -> None:
    """Every command that reads a run directory types its config the same way (config/
    run_config.typed), so a key or a type no posenc wrote is the line that names it, never
    an internal error."""
    run = received(trained, workdir, key, value)
    assert says in refused([command, str(run)])


@pytest.mark.parametrize("command", ["eval", "inspect"])
def test_a_damaged_checkpoint_is_one_line_and_the_run_keeps_its_files(
    command: str, trained: Path, workdir: Path, refused: Callable[..., str]
) -> None:
    """The run is read whole before anything is written into it (RUN/inspect/ included)."""
    run = received(trained, workdir)
    last = run / "checkpoints" / "last.pt"
    last.write_bytes(last.read_bytes()[:1000])
    assert "is damaged or unsafe" in refused([command, str(run)])
