"""Evaluation fixtures: composed configs of a tiny model trained at length 16, a randomly
initialised model of them, random held-out ids. Most properties need no training."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import DictConfig

from posenc_cli.config.compose import compose, load
from posenc_cli.config.run_config import RunConfig
from posenc_cli.data.cache import TokenData
from posenc_cli.engine.build import build_model
from posenc_cli.engine.runtime import Runtime
from posenc_cli.model import TransformerLM

EVAL_VOCAB = 300
EVAL_TRAIN_LEN = 16
BASE = ("model=tiny", f"train.context_length={EVAL_TRAIN_LEN}", "eval.tokens=512", "device=cpu")


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Tiny matmuls: a second thread only adds contention on a shared 2-core machine."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@functools.cache
def _composed(*overrides: str) -> RunConfig:
    return load([*BASE, *overrides])


@pytest.fixture(scope="session")
def composed() -> Callable[..., DictConfig]:
    """composed(*overrides): BASE + overrides as composed, before it is typed (what `posenc
    eval`'s overrides apply to)."""
    return lambda *overrides: compose([*BASE, *overrides])


@pytest.fixture(scope="session")
def config() -> Callable[..., RunConfig]:
    """config(*overrides): the composed config of BASE + overrides (a private copy)."""
    return lambda *overrides: copy.deepcopy(_composed(*overrides))


@pytest.fixture(scope="session")
def rt() -> Runtime:
    return Runtime(torch.device("cpu"), "fp32")


@pytest.fixture(scope="session")
def model_for() -> Callable[..., TransformerLM]:
    """model_for(cfg, seed=0): the config's model, randomly initialised, in eval mode."""

    def make(cfg: RunConfig, seed: int = 0) -> TransformerLM:
        torch.manual_seed(seed)
        return build_model(cfg, EVAL_VOCAB).eval()

    return make


def _val_ids(n: int = 3000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, EVAL_VOCAB, n).astype(np.uint16)


@pytest.fixture(scope="session")
def val_ids() -> Callable[..., np.ndarray]:
    """val_ids(n=3000, seed=0): random held-out ids of the vocabulary."""
    return _val_ids


@pytest.fixture(scope="session")
def token_data() -> Callable[..., TokenData]:
    """token_data(n=3000): TokenData with val_ids(n) as both splits."""

    def make(n: int = 3000) -> TokenData:
        ids = _val_ids(n)
        return TokenData(ids, ids, Path("unused-tokenizer.json"), {"vocab_size": EVAL_VOCAB})

    return make
