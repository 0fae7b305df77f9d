"""A posenc RoPE run written by hand (config, tokenizer, random weights), a transformers
LongRoPE checkpoint, and the Hugging Face libraries pinned offline, for the export and import
tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from posenc_cli.config.compose import compose
from posenc_cli.config.run_config import typed
from posenc_cli.data.tokenizer import train_tokenizer
from posenc_cli.engine.build import build_model

TEXT = (
    "The cat sat on the mat. The dog sat on the log! A cat, a dog and 42 mats met at the "
    "mat's edge; nobody knew why. "
) * 20


@pytest.fixture(autouse=True)
def offline(hf_offline: None) -> None:
    """Every test here runs without hub access (hf_offline)."""


def _make_run(root: Path, overrides: list[str], seed: int = 0, encoding: str = "rope") -> Path:
    cfg = compose(
        [
            f"encoding={encoding}",
            "model=tiny",
            "model.n_heads=2",
            "train.context_length=16",
            "data.vocab_size=300",
            *overrides,
        ]
    )
    run = root / "run"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    tok = train_tokenizer(iter([TEXT]), 300)
    tok.save(str(run / "tokenizer.json"))
    torch.manual_seed(seed)
    model = build_model(typed(cfg), tok.get_vocab_size())
    with torch.no_grad():  # RMSNorm gains start at 1: make them matter too
        for name, p in model.named_parameters():
            if "ln" in name:
                p.add_(0.3 * torch.randn_like(p))
    (run / "checkpoints").mkdir()
    torch.save({"model": model.state_dict(), "step": 3}, run / "checkpoints" / "last.pt")
    return run


@pytest.fixture
def make_run(tmp_path: Path) -> Callable[..., Path]:
    """make_run(overrides, seed=0, encoding="rope"): a run directory of a tiny random model
    (RoPE, or a RoPE-family encoding such as hybrid)."""
    return lambda overrides=(), seed=0, encoding="rope": _make_run(
        tmp_path, list(overrides), seed, encoding
    )


@pytest.fixture(scope="session")
def text() -> str:
    return TEXT


@pytest.fixture
def longrope(tmp_path: Path) -> Path:
    """A folder of a random LlamaForCausalLM with LongRoPE (transformers 5's rope_parameters)
    for 64 tokens, trained at 16: head_dim 8, so 4 pairs, the long set rising (as LongRoPE's
    search keeps it), the short one near 1; 300 embedding rows, a tokenizer of 300 tokens."""
    transformers = pytest.importorskip("transformers")
    params = {
        "rope_type": "longrope",
        "rope_theta": 500.0,
        "long_factor": [1.0, 1.7, 3.1, 5.5],
        "short_factor": [1.0, 1.05, 1.1, 1.3],
        "original_max_position_embeddings": 16,
    }
    config = transformers.LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        rope_parameters=params,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    folder = tmp_path / "longrope"
    model.save_pretrained(folder)
    train_tokenizer(iter([TEXT]), 300).save(str(folder / "tokenizer.json"))
    return folder
