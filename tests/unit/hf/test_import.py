"""`posenc import-hf`: a random transformers Llama (GQA, tied embeddings) as a posenc run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import load_run_config, unlock_run_dir
from posenc_cli.data.tokenizer import eot_id, train_tokenizer
from posenc_cli.engine import checkpoint
from posenc_cli.engine.build import build_model
from posenc_cli.engine.metrics import read_metrics

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
#: float32 logits of size ~3 after two layers: both sides round differently in the last bits.
TOLERANCE = 1e-4
VOCAB = 300
#: Embedding rows past the tokenizer's tokens, as many published models pad theirs.
ROWS = 320
TRAIN_LENGTH = 16
ROPE_TARGET = "posenc_cli.encodings.rope.RotaryEncoding"


def save_model(
    family: str, folder: Path, text: str, tied: bool = True, layers: int = 2, **extra: object
) -> Path:
    """A random ``family`` causal LM (4 query heads on 2 key/value heads, θ=500, gains away
    from 1, ROWS embedding rows) saved by transformers, with a tokenizer of VOCAB tokens."""
    configs = {
        "llama": transformers.LlamaConfig,
        "mistral": transformers.MistralConfig,
        "qwen2": transformers.Qwen2Config,
        "smollm3": transformers.SmolLM3Config,
    }
    if family == "mistral":
        extra["sliding_window"] = None
    if family == "smollm3":  # its defaults name token ids past this vocabulary
        extra.update(pad_token_id=None, bos_token_id=None, eos_token_id=None)
    config = configs[family](
        vocab_size=ROWS,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=TRAIN_LENGTH,
        rope_theta=500.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tied,
        **extra,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    model.save_pretrained(folder)
    tok = train_tokenizer(iter([text]), VOCAB)
    assert tok.get_vocab_size() == VOCAB
    tok.save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture
def llama(tmp_path: Path, text: str) -> Path:
    """A random LlamaForCausalLM with tied embeddings (save_model)."""
    return save_model("llama", tmp_path / "llama", text)


def invoke(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.output


def imported(llama: Path, run: Path) -> Path:
    code, out = invoke("import-hf", str(llama), f"hydra.run.dir={run}")
    assert code == 0, out
    return run


def max_logit_error(folder: Path, run: Path) -> float:
    """max |Δ| between transformers' logits and posenc's on the imported run, at 3x its length."""
    cfg = typed(load_run_config(run))
    model = build_model(cfg, ROWS)
    model.load_state_dict(checkpoint.load(run / "checkpoints" / "last.pt")["model"])
    ids = torch.randint(0, ROWS, (2, 3 * TRAIN_LENGTH), generator=torch.Generator().manual_seed(1))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        expected = theirs(ids).logits
        got = model(ids)
    assert expected.abs().max() > 100 * TOLERANCE  # the logits are not all ~0
    return (expected - got).abs().max().item()


def test_posenc_computes_transformers_logits(llama: Path, tmp_path: Path) -> None:
    run = imported(llama, tmp_path / "run")
    cfg = typed(load_run_config(run))
    assert (cfg.model.n_heads, cfg.model.n_kv_heads, cfg.model.tie_embeddings) == (4, 2, True)
    assert (cfg.encoding.params["theta"], cfg.model.rms_norm_eps) == (500.0, 1e-6)
    state = checkpoint.load(run / "checkpoints" / "last.pt")["model"]
    assert torch.equal(state["lm_head.weight"], state["token_embeddings.weight"])
    error = max_logit_error(llama, run)
    print(f"import-hf max |Δlogits| = {error:.2e}")
    assert error < TOLERANCE, error
    assert read_metrics(run)["imported"]["from"] == "hf"


def test_an_untied_mistral_without_sliding_window_imports(tmp_path: Path, text: str) -> None:
    folder = save_model("mistral", tmp_path / "mistral", text, tied=False)
    run = imported(folder, tmp_path / "run")
    assert load_run_config(run).model.tie_embeddings is False
    error = max_logit_error(folder, run)
    assert error < TOLERANCE, error


def test_smollm3s_layers_without_rope_import_as_a_hybrid(tmp_path: Path, text: str) -> None:
    """transformers' SmolLM3 leaves every 4th layer unrotated (no_rope_layers [1, 1, 1, 0]):
    the run is encoding=hybrid with that pattern and computes transformers' logits at 3x the
    training length; as plain rope (the NoPE layer rotated) it would not."""
    folder = save_model("smollm3", tmp_path / "smollm3", text, layers=4)
    run = imported(folder, tmp_path / "run")
    cfg = load_run_config(run)
    assert cfg.encoding.name == "hybrid"
    assert list(cfg.encoding.pattern) == ["rope", "rope", "rope", "none"]
    error = max_logit_error(folder, run)
    assert error < TOLERANCE, error
    cfg.encoding = OmegaConf.merge(cfg.encoding, {"name": "rope", "_target_": ROPE_TARGET})
    del cfg.encoding["pattern"]
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    rotated = max_logit_error(folder, run)
    assert rotated > TOLERANCE and rotated > 100 * error, (rotated, error)


@pytest.mark.parametrize("flags", [[1, 1, 0], [1, 1, 2, 0], "1110"])
def test_a_malformed_no_rope_layers_is_one_line(tmp_path: Path, text: str, flags: object) -> None:
    folder = save_model("smollm3", tmp_path / "smollm3", text, layers=4)
    config = json.loads((folder / "config.json").read_text())
    config["no_rope_layers"] = flags
    (folder / "config.json").write_text(json.dumps(config))
    code, out = invoke("import-hf", str(folder), f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 2 and "no_rope_layers" in out and len(out.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_qwen2_with_its_projection_biases_is_refused(tmp_path: Path, text: str) -> None:
    folder = save_model("qwen2", tmp_path / "qwen2", text)
    code, out = invoke("import-hf", str(folder), f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 2 and "the checkpoint has biases" in out and len(out.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_posenc_eval_scores_the_imported_model_with_and_without_scaling(
    llama: Path, tmp_path: Path, text: str
) -> None:
    run = imported(llama, tmp_path / "run")
    (tmp_path / "val.txt").write_text(text * 3)
    common = ["eval.factors=[1,2]", "eval.tokens=512", "data=text", f"data.path={tmp_path}/val.txt"]
    for scaling in ([], ["eval.rope_scaling=yarn", "eval.rope_factor=2"]):
        code, out = invoke("eval", str(run), *common, *scaling)
        assert code == 0, out
        unlock_run_dir(run)  # the command's lock lasts as long as its process, here the test's
    results = {k: v for k, v in read_metrics(run).items() if k.startswith("extrapolation")}
    assert len(results) == 2 and sum("yarn" in k for k in results) == 1, sorted(results)
    plain, yarn = sorted(results.values(), key=lambda r: "yarn" in json.dumps(r))
    for result in (plain, yarn):
        assert set(result["ppl"]) == {str(TRAIN_LENGTH), str(2 * TRAIN_LENGTH)}
    assert yarn["ppl"][str(2 * TRAIN_LENGTH)] != plain["ppl"][str(2 * TRAIN_LENGTH)]


def test_resuming_an_imported_model_names_where_it_came_from(llama: Path, tmp_path: Path) -> None:
    run = imported(llama, tmp_path / "run")
    unlock_run_dir(run)
    code, out = invoke("resume", str(run))
    assert code == 2 and "imported from a Hugging Face model" in out, out
    assert len(out.strip().splitlines()) == 1


@pytest.mark.slow
def test_posenc_inspect_draws_the_imported_model(llama: Path, tmp_path: Path) -> None:
    run = imported(llama, tmp_path / "run")
    code, out = invoke("inspect", str(run))
    assert code == 0, out
    summary = (run / "inspect" / "summary.md").read_text()
    assert "RoPE" in summary and any((run / "inspect").glob("*.png"))


def _gpt2(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))


def _pickle_only(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    torch.save({"lm_head.weight": torch.zeros(1)}, folder / "pytorch_model.bin")


def _wider(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 64}))


@pytest.mark.parametrize(
    "damage, says",
    [
        (_gpt2, "not a Llama-family one"),
        (_pickle_only, "only as a pickle (pytorch_model.bin)"),
        (_wider, "config.json and the weights disagree"),
    ],
)
def test_bad_checkpoints_are_one_line_and_write_nothing(
    damage, says: str, llama: Path, tmp_path: Path
) -> None:
    damage(llama)
    code, out = invoke("import-hf", str(llama), f"hydra.run.dir={tmp_path / 'run'}")
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1, out
    assert lines[0].startswith("posenc: error:") and says in lines[0], lines[0]
    assert not (tmp_path / "run").exists()


def test_an_uncached_hub_id_is_not_downloaded(tmp_path: Path) -> None:
    code, out = invoke("import-hf", "nobody-here/no-such-model", f"hydra.run.dir={tmp_path / 'r'}")
    assert code == 2 and "not available in the local cache" in out, out
    assert not (tmp_path / "r").exists()


def test_an_imported_tokenizer_separates_documents_with_its_own_end_of_text() -> None:
    vocab = {"a": 0, "</s>": 1, "<|end_of_text|>": 2}
    assert eot_id(Tokenizer(models.BPE(vocab=vocab, merges=[]))) == 2
    del vocab["<|end_of_text|>"]
    assert eot_id(Tokenizer(models.BPE(vocab=vocab, merges=[]))) == 1


def test_an_import_stopped_midway_leaves_no_run_directory(
    llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    monkeypatch.setattr(
        "posenc_cli.interchange.imported_run.save_atomic",
        lambda *a, **k: signal.raise_signal(signal.SIGTERM),
    )
    result = CliRunner().invoke(app, ["import-hf", str(llama), f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.exit_code == 143 and result.stderr == "posenc: stopped by SIGTERM\n"
    assert not (tmp_path / "run").exists()


def test_an_import_killed_midway_leaves_only_a_hidden_folder_the_next_one_removes(
    llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL cannot be caught: the run is written into a hidden sibling and renamed into
    place whole, so a killed import leaves nothing that looks like a run."""
    import subprocess

    from posenc_cli.engine.checkpoint import save_atomic

    dead = subprocess.Popen(["true"])
    dead.wait()
    left = tmp_path / f".12-00-00-rope.partial{dead.pid}"  # a default name holds the time
    (left / "checkpoints").mkdir(parents=True)
    seen: list[bool] = []

    def save_watching(state: object, path: Path) -> None:
        seen.append((tmp_path / "run").exists())
        save_atomic(state, path)

    monkeypatch.setattr("posenc_cli.interchange.imported_run.save_atomic", save_watching)
    result = CliRunner().invoke(app, ["import-hf", str(llama), f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.exit_code == 0, result.output
    assert seen == [False, False]
    assert (tmp_path / "run" / "checkpoints" / "last.pt").is_file()
    assert not left.exists() and not list(tmp_path.glob(".*partial*"))
