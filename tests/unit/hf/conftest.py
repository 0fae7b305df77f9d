"""A posenc RoPE run written by hand (config, tokenizer, random weights) and the Hugging Face
libraries pinned offline, for the export and import tests."""

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


def _make_run(root: Path, overrides: list[str], seed: int = 0) -> Path:
    cfg = compose(
        [
            "encoding=rope",
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
    """make_run(overrides, seed=0): a run directory of a tiny random RoPE model."""
    return lambda overrides=(), seed=0: _make_run(tmp_path, list(overrides), seed)


@pytest.fixture(scope="session")
def text() -> str:
    return TEXT
