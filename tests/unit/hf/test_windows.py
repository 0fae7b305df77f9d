"""Sliding windows through the Hugging Face bridge: a run with model.windows (or rnope_swa)
exports as SmolLM3 with one sliding_window and per-layer layer_types, and transformers
computes posenc's logits past the window; SmolLM3's and Mistral's windowed checkpoints import
as model.windows and compute transformers' logits."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import load_run_config
from posenc_cli.data.tokenizer import encode, load_tokenizer
from posenc_cli.engine import checkpoint
from posenc_cli.engine.build import build_model

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
#: float32 logits of size ~3 after two layers: both sides round differently in the last bits.
TOLERANCE = 1e-4


def logits(run: Path, ids: torch.Tensor) -> torch.Tensor:
    model = build_model(typed(load_run_config(run)), 300)
    model.load_state_dict(checkpoint.load(run / "checkpoints" / "last.pt")["model"])
    with torch.no_grad():
        return model(ids)


def theirs(folder: Path, ids: torch.Tensor) -> torch.Tensor:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(ids).logits


def cli(*args: str) -> None:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output


def batch(run: Path, text: str) -> torch.Tensor:
    """64 tokens of held-out-like text: four times the training length, 16 times the window."""
    return torch.tensor([encode(load_tokenizer(run / "tokenizer.json"), text[:400])[:64]])


@pytest.mark.parametrize(
    ("overrides", "encoding", "rotates", "types"),
    [
        (["model.windows=[4,null]"], "rope", [1, 1, 1, 1], ["sliding", "full"] * 2),
        (
            ["model.layers=[encoding,encoding,encoding,none]", "model.windows=[4,4,4,null]"],
            "rope",
            [1, 1, 1, 0],
            ["sliding"] * 3 + ["full"],
        ),
        (["encoding.window=4"], "rnope_swa", [1, 1, 1, 0], ["sliding"] * 3 + ["full"]),
    ],
)
def test_a_windowed_run_is_smollm3_and_comes_back(
    make_run: Callable[..., Path],
    tmp_path: Path,
    text: str,
    overrides: list[str],
    encoding: str,
    rotates: list[int],
    types: list[str],
) -> None:
    run = make_run(["model.n_layers=4", *overrides], encoding=encoding)
    out = tmp_path / "hf"
    cli("export-hf", str(run), str(out))
    config = json.loads((out / "config.json").read_text())
    assert (config["model_type"], config["no_rope_layers"]) == ("smollm3", rotates)
    assert (config["use_sliding_window"], config["sliding_window"]) == (True, 4)
    assert config["layer_types"] == [f"{t}_attention" for t in types]
    ids = batch(run, text)
    assert (theirs(out, ids) - logits(run, ids)).abs().max().item() < TOLERANCE
    back = tmp_path / "back"
    cli("import-hf", str(out), f"hydra.run.dir={back}")
    windows = [4 if t == "sliding" else None for t in types]
    assert list(load_run_config(back).model.windows) == windows
    assert (theirs(out, ids) - logits(back, ids)).abs().max().item() < TOLERANCE


def test_mistrals_sliding_window_imports_as_one_window_for_every_layer(
    make_run: Callable[..., Path], tmp_path: Path, text: str
) -> None:
    """The same weights as transformers' Mistral (Llama's decoder with sliding_window in every
    layer): imported as model.windows=[4]; as a global model the logits would differ."""
    run = make_run(["model.windows=[4]"])
    out = tmp_path / "hf"
    cli("export-hf", str(run), str(out))
    config = json.loads((out / "config.json").read_text())
    for key in ("no_rope_layers", "layer_types"):
        del config[key]
    # transformers' Mistral applies sliding_window whatever use_sliding_window says
    config.update(architectures=["MistralForCausalLM"], model_type="mistral")
    config["use_sliding_window"] = False
    (out / "config.json").write_text(json.dumps(config))
    ids = batch(run, text)
    back = tmp_path / "back"
    cli("import-hf", str(out), f"hydra.run.dir={back}")
    assert list(load_run_config(back).model.windows) == [4]
    expected = theirs(out, ids)
    assert (expected - logits(back, ids)).abs().max().item() < TOLERANCE
    cfg = load_run_config(back)
    cfg.model.windows = None
    OmegaConf.save(cfg, back / ".hydra" / "config.yaml")
    assert (expected - logits(back, ids)).abs().max().item() > 100 * TOLERANCE


def test_windows_of_two_sizes_are_refused(make_run: Callable[..., Path], tmp_path: Path) -> None:
    run = make_run(["model.windows=[4,8]"])
    res = CliRunner().invoke(app, ["export-hf", str(run), str(tmp_path / "hf")])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert "one sliding_window for every windowed layer" in res.output
    assert not (tmp_path / "hf").exists()


def test_smollm3s_layer_types_decide_its_windows(
    make_run: Callable[..., Path], tmp_path: Path, text: str
) -> None:
    """transformers builds SmolLM3's masks from layer_types even with use_sliding_window off,
    so the import follows layer_types too."""
    run = make_run(["model.windows=[4,null]"])
    out = tmp_path / "hf"
    cli("export-hf", str(run), str(out))
    config = json.loads((out / "config.json").read_text())
    config["use_sliding_window"] = False
    (out / "config.json").write_text(json.dumps(config))
    back = tmp_path / "back"
    cli("import-hf", str(out), f"hydra.run.dir={back}")
    assert list(load_run_config(back).model.windows) == [4, None]
    ids = batch(run, text)
    assert (theirs(out, ids) - logits(back, ids)).abs().max().item() < TOLERANCE
