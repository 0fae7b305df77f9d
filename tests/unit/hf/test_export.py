"""`posenc export-hf`: transformers loads the folder and computes posenc's logits."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.common.sizes import MAX_CONTEXT
from posenc_cli.config.compose import compose
from posenc_cli.config.extension import child_config
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import load_run_config
from posenc_cli.data.tokenizer import encode, load_tokenizer
from posenc_cli.engine import checkpoint
from posenc_cli.engine.build import build_model

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
#: float32 logits of size ~3 after two layers: both sides round differently in the last bits.
TOLERANCE = 1e-4


def posenc_logits(
    run: Path, ids: torch.Tensor, method: str = "none", factor: float = 1.0
) -> torch.Tensor:
    cfg = load_run_config(run)
    model = build_model(typed(cfg), 300)
    model.load_state_dict(checkpoint.load(run / "checkpoints" / "last.pt")["model"])
    model.encoding.extend_context(method, factor, int(cfg.train.context_length))
    with torch.no_grad():
        return model(ids)


def export(run: Path, out: Path, *extra: str) -> None:
    res = CliRunner().invoke(app, ["export-hf", str(run), str(out), *extra])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize(
    "overrides, scaling, family",
    [
        ([], [], "llama"),
        (["encoding.rotary_fraction=0.5", "encoding.theta=500"], [], "phi3"),
        (["encoding.theta=2000"], ["--rope-scaling", "pi", "--factor", "4"], "llama"),
        ([], ["--rope-scaling", "llama3", "--factor", "4"], "llama"),
        ([], ["--rope-scaling", "yarn", "--factor", "4"], "llama"),
        (["encoding.rotary_fraction=0.5"], ["--rope-scaling", "ntk", "--factor", "2"], "phi3"),
    ],
)
def test_transformers_gives_posencs_tokens_and_logits(
    overrides: list[str],
    scaling: list[str],
    family: str,
    make_run: Callable[..., Path],
    tmp_path: Path,
    text: str,
) -> None:
    run = make_run(overrides)
    out = tmp_path / "hf"
    export(run, out, *scaling)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == family and config["tie_word_embeddings"] is False
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    ids = encode(load_tokenizer(run / "tokenizer.json"), text[:300])
    assert hf_tok(text[:300])["input_ids"] == ids
    model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    batch = torch.tensor([ids[:64]])  # 4x the training length: scaling matters there
    with torch.no_grad():
        theirs = model(batch).logits
    method, factor = (scaling[1], float(scaling[3])) if scaling else ("none", 1.0)
    ours = posenc_logits(run, batch, method, factor)
    error = (theirs - ours).abs().max().item()
    assert error < TOLERANCE, error
    assert (theirs - posenc_logits(run, batch)).abs().max() > 100 * TOLERANCE or not scaling


def test_a_hybrid_run_is_exported_as_smollm3_and_imported_back(
    make_run: Callable[..., Path], tmp_path: Path, text: str
) -> None:
    """encoding=hybrid over 4 layers (NoPE in layer 3) is SmolLM3 with no_rope_layers
    [1, 1, 1, 0]: transformers computes posenc's logits at 4x the training length, and
    import-hf reads the folder back as the same hybrid."""
    run = make_run(["model.n_layers=4"], encoding="hybrid")
    out = tmp_path / "hf"
    export(run, out)
    config = json.loads((out / "config.json").read_text())
    assert (config["model_type"], config["no_rope_layers"]) == ("smollm3", [1, 1, 1, 0])
    ids = encode(load_tokenizer(run / "tokenizer.json"), text[:300])
    batch = torch.tensor([ids[:64]])
    model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        theirs = model(batch).logits
    assert (theirs - posenc_logits(run, batch)).abs().max().item() < TOLERANCE
    back = tmp_path / "back"
    res = CliRunner().invoke(app, ["import-hf", str(out), f"hydra.run.dir={back}"])
    assert res.exit_code == 0, res.output
    assert list(load_run_config(back).encoding.pattern) == ["rope", "rope", "rope", "none"]


def test_rope_with_nope_layers_is_exported_as_smollm3(
    make_run: Callable[..., Path], tmp_path: Path, text: str
) -> None:
    """encoding=rope with model.layers=[encoding, none] over 4 layers is SmolLM3 with
    no_rope_layers [1, 0, 1, 0], and transformers computes posenc's logits."""
    run = make_run(["model.n_layers=4", "model.layers=[encoding,none]"])
    out = tmp_path / "hf"
    export(run, out)
    config = json.loads((out / "config.json").read_text())
    assert (config["model_type"], config["no_rope_layers"]) == ("smollm3", [1, 0, 1, 0])
    batch = torch.tensor([encode(load_tokenizer(run / "tokenizer.json"), text[:300])[:64]])
    model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        theirs = model(batch).logits
    assert (theirs - posenc_logits(run, batch)).abs().max().item() < TOLERANCE


def extension_of(run: Path, method: str, factor: float) -> Path:
    """A `posenc extend` run of ``run`` (its weights unchanged: what matters here is that the
    export writes the method the run carries)."""
    child = run.parent / f"{run.name}-{method}"
    (child / ".hydra").mkdir(parents=True)
    (child / "checkpoints").mkdir()
    saved = checkpoint.load(run / "checkpoints" / "last.pt")
    ext = compose([f"extend.method={method}", f"extend.factor={factor}"]).extend
    cfg = child_config(load_run_config(run), ext, run, 3, checkpoint.state_digest(saved["model"]))
    OmegaConf.save(cfg, child / ".hydra" / "config.yaml")
    shutil.copy(run / "checkpoints" / "last.pt", child / "checkpoints" / "last.pt")
    shutil.copy(run / "tokenizer.json", child / "tokenizer.json")
    return child


@pytest.mark.parametrize("method", ["pi", "ntk", "dynamic_ntk", "yarn", "llama3"])
def test_an_extension_is_exported_with_its_method(
    method: str, make_run: Callable[..., Path], tmp_path: Path
) -> None:
    child = extension_of(make_run(), method, 4.0)
    export(child, tmp_path / "hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    batch = torch.arange(64)[None] % 300  # 4x the parent's length: the fine-tuned length
    with torch.no_grad():
        theirs = model(batch).logits
    cfg = load_run_config(child)
    ours = build_model(typed(cfg), 300)
    ours.load_state_dict(checkpoint.load(child / "checkpoints" / "last.pt")["model"])
    with torch.no_grad():
        error = (theirs - ours(batch)).abs().max().item()
    assert error < TOLERANCE, error
    assert (theirs - posenc_logits(child.parent / "run", batch)).abs().max() > 100 * TOLERANCE


def test_yarn_is_written_as_transformers_rope_scaling(
    make_run: Callable[..., Path], tmp_path: Path
) -> None:
    run = make_run()
    export(run, tmp_path / "hf", "--rope-scaling", "yarn", "--factor", "4")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["rope_scaling"] == {
        "rope_type": "yarn",
        "factor": 4.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "original_max_position_embeddings": 16,
    }
    assert config["max_position_embeddings"] == 64
    loaded = transformers.AutoConfig.from_pretrained(tmp_path / "hf")
    assert loaded.rope_parameters["rope_type"] == "yarn"


@pytest.mark.parametrize(
    "overrides, extra, says",
    [
        (["encoding=alibi"], [], "no equivalent"),
        (["encoding=irope"], [], "no equivalent"),
        (["encoding=alibi", "model.layers=[encoding,none]"], [], "no equivalent"),
        (["encoding=hybrid", "encoding.rotary_fraction=0.5"], [], "SmolLM3 has no equivalent"),
        (["encoding.p=0.5"], [], "p-RoPE"),
        (
            ["encoding.rotary_fraction=0.5"],
            ["--rope-scaling", "yarn", "--factor", "4"],
            "partial rotary",
        ),
        ([], ["--rope-scaling", "pi", "--factor", "1"], "does not extend"),
        ([], ["--rope-scaling", "rerope"], "unknown --rope-scaling"),
        ([], ["--factor", "4"], "--factor 4 has no effect without --rope-scaling"),
        ([], ["--rope-scaling", "yarn", "--factor", "nan"], "--factor nan is not a finite"),
        ([], ["--rope-scaling", "yarn", "--factor", "inf"], "--factor inf is not a finite"),
        ([], ["--rope-scaling", "pi", "--factor", "1e12"], "is 1.6e+13 tokens, above"),
        (
            [],
            ["--rope-scaling", "dynamic_ntk", "--factor", "1048577"],
            "--factor 1048577 times the run's training length 16 is 16777232 tokens, above the "
            "longest context posenc runs (16777216)",
        ),
        ([], ["--rope-scaling", "ntk", "--factor", "2e6"], "give --factor <= 1048576"),
    ],
)
def test_unexportable_runs_are_one_line_and_write_nothing(
    overrides: list[str], extra: list[str], says: str, make_run: Callable[..., Path], tmp_path: Path
) -> None:
    run = make_run(overrides)
    res = CliRunner().invoke(app, ["export-hf", str(run), str(tmp_path / "hf"), *extra])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error:") and says in lines[0]
    assert " — " in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_factor_up_to_posencs_longest_context_is_exported(
    make_run: Callable[..., Path], tmp_path: Path
) -> None:
    """S·L = MAX_CONTEXT exactly is the last extension written (16 x 2**20 = 2**24)."""
    export(make_run(), tmp_path / "hf", "--rope-scaling", "pi", "--factor", str(2**20))
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["max_position_embeddings"] == MAX_CONTEXT


def test_an_export_inside_a_file_is_one_line(make_run: Callable[..., Path], tmp_path: Path) -> None:
    run = make_run()
    (tmp_path / "afile").write_text("x")
    res = CliRunner().invoke(app, ["export-hf", str(run), str(tmp_path / "afile" / "hf")])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "is a file, so the export" in res.output
    assert (tmp_path / "afile").read_text() == "x"


def test_an_existing_folder_is_refused(make_run: Callable[..., Path], tmp_path: Path) -> None:
    run = make_run()
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "keep.txt").write_text("mine")
    res = CliRunner().invoke(app, ["export-hf", str(run), str(tmp_path / "hf")])
    assert res.exit_code == 2 and "already exists" in res.output
    assert [p.name for p in (tmp_path / "hf").iterdir()] == ["keep.txt"]
