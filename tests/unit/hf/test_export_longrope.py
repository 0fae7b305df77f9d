"""`posenc export-hf --rope-scaling longrope`: the run's LongRoPE evaluation (both factor sets
and S) written as transformers' rope_scaling, which then computes posenc's logits; an imported
LongRoPE checkpoint comes back as the model it was; a run fine-tuned with longrope is written
with the sets it trained with (its extend.*), switching where posenc does. Partial rotary is
refused: Phi-3 applies the attention factor to the rotated dimensions only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import load_run_config
from posenc_cli.engine import checkpoint
from posenc_cli.engine.build import build_model
from posenc_cli.evals.context_extension import context_extension

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
#: float32 logits of size ~3 after two layers: both sides round differently in the last bits.
TOLERANCE = 1e-4
#: make_run's model: head_dim 16, 8 pairs.
LONG = [1.0, 1.0, 1.2, 1.6, 2.3, 3.0, 3.6, 4.4]
SHORT = [1.0, 1.0, 1.0, 1.0, 1.1, 1.1, 1.2, 1.2]


def invoke(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.output


def logits(folder: Path, ids: torch.Tensor) -> torch.Tensor:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(ids).logits


def test_an_imported_longrope_checkpoint_exports_as_it_came(longrope: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert invoke("import-hf", str(longrope), f"hydra.run.dir={run}")[0] == 0
    code, out = invoke("export-hf", str(run), str(tmp_path / "hf"), "--rope-scaling", "longrope")
    assert code == 0, out
    source = json.loads((longrope / "config.json").read_text())["rope_parameters"]
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert written["max_position_embeddings"] == 64
    assert written["rope_scaling"] == {
        "rope_type": "longrope",
        "long_factor": source["long_factor"],
        "short_factor": source["short_factor"],
        "factor": 4.0,
        "original_max_position_embeddings": 16,
    }
    for length in (16, 64):
        ids = torch.arange(length)[None] % 300
        error = (logits(longrope, ids) - logits(tmp_path / "hf", ids)).abs().max().item()
        assert error < TOLERANCE, error


def sets(long: list[float] = LONG, short: list[float] = SHORT) -> list[str]:
    return [
        "eval.rope_scaling=longrope",
        f"eval.rope_long_factor={long}",
        f"eval.rope_short_factor={short}",
    ]


@pytest.mark.parametrize("length", [16, 17, 64])
def test_transformers_computes_the_runs_longrope_evaluation(
    length: int, make_run: Callable[..., Path], tmp_path: Path
) -> None:
    run = make_run(["encoding.theta=500", *sets()])
    code, out = invoke(
        "export-hf", str(run), str(tmp_path / "hf"), "--rope-scaling", "longrope", "--factor", "4"
    )
    assert code == 0, out
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "llama"
    cfg = typed(load_run_config(run))
    model = build_model(cfg, 300).eval()
    model.load_state_dict(checkpoint.load(run / "checkpoints" / "last.pt")["model"])
    ids = torch.arange(length)[None] * 7 % 300
    with torch.no_grad(), context_extension(model, cfg.eval.extrapolation, 16, 64) as prepare:
        prepare(length)
        error = (logits(tmp_path / "hf", ids) - model(ids)).abs().max().item()
    assert error < TOLERANCE, error


def test_a_run_fine_tuned_with_longrope_exports_its_own_sets(
    make_run: Callable[..., Path], tmp_path: Path
) -> None:
    """No --rope-scaling: the sets, S and L of extend.*, as for every fine-tuned method."""
    recorded = ["method=longrope", "parent=parent", "parent_sha256=ab", "original_length=16"]
    extend = [*recorded, "factor=4", f"long_factor={LONG}", f"short_factor={SHORT}"]
    run = make_run(["encoding.theta=500", *(f"extend.{o}" for o in extend)])
    code, out = invoke("export-hf", str(run), str(tmp_path / "hf"))
    assert code == 0, out
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert written["max_position_embeddings"] == 64
    assert written["rope_scaling"] == {
        "rope_type": "longrope",
        "long_factor": LONG,
        "short_factor": SHORT,
        "factor": 4.0,
        "original_max_position_embeddings": 16,
    }
    model = build_model(typed(load_run_config(run)), 300).eval()
    model.load_state_dict(checkpoint.load(run / "checkpoints" / "last.pt")["model"])
    for length in (16, 17, 64):  # the short set, then the long one, in one model each
        ids = torch.arange(length)[None] * 7 % 300
        with torch.no_grad():
            error = (logits(tmp_path / "hf", ids) - model(ids)).abs().max().item()
        assert error < TOLERANCE, (length, error)


@pytest.mark.parametrize(
    "overrides, extra, says",
    [
        ([], ["--rope-scaling", "longrope", "--factor", "4"], "has no LongRoPE rescale factors"),
        (sets(), ["--rope-scaling", "longrope"], "config sets no eval.rope_factor, the S"),
        (sets(), ["--rope-scaling", "longrope", "--factor", "1"], "--factor 1.0 does not extend"),
        (
            ["encoding.rotary_fraction=0.5", *sets(LONG[:4], SHORT[:4])],
            ["--rope-scaling", "longrope", "--factor", "4"],
            "longrope with partial rotary: transformers' Phi-3 applies",
        ),
    ],
)
def test_longrope_without_its_settings_is_one_line_and_writes_nothing(
    overrides: list[str],
    extra: list[str],
    says: str,
    make_run: Callable[..., Path],
    tmp_path: Path,
) -> None:
    run = make_run(overrides)
    code, out = invoke("export-hf", str(run), str(tmp_path / "hf"), *extra)
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1 and says in lines[0], out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
