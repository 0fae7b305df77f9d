"""Shared fixtures: real configs shrunk to tiny sizes, a small generated corpus, a temp cache."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TINY = ["model=tiny", "train.steps=20", "train.batch_size=4", "train.context_length=16",
        "train.eval_every=10", "train.eval_batches=2", "train.checkpoint_every=10",
        "train.log_every=5", "train.warmup_steps=2", "data.vocab_size=300", "eval.tokens=256",
        "eval.factors=[1,2]"]

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from "
         "at which but have an they you were her she there been one all we their has would "
         "when if so no will more can what said who may up out them into some").split()


def make_corpus(path: Path, n_docs: int = 40, seed: int = 0) -> Path:
    """A deterministic English-like corpus with <|endoftext|> between documents."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))).capitalize()
                     + "." for _ in range(rng.randint(8, 20))]
        docs.append(" ".join(sentences))
    path.write_text("<|endoftext|>".join(docs), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("posenc-cache")
    os.environ["POSENC_CACHE"] = str(d)
    return d


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt")


def run_cli(args: list[str], cwd: Path, cache: Path, timeout: float = 300,
            **kw: object) -> subprocess.CompletedProcess[str]:
    """Run `posenc ARGS` in a subprocess, as a user would."""
    env = {**os.environ, "POSENC_CACHE": str(cache), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "posenc_cli.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, **kw)
