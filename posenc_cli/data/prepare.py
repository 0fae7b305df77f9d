"""The training corpus as cached token ids: tokenizer trained once, ids written once.

prepare() is called by the CLI before a run directory exists, so data errors never leave a
half-made run behind; the trainer then only opens the cached files.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from posenc_cli.common.digest import file_digest
from posenc_cli.common.errors import PosencError
from posenc_cli.data.cache import TokenData, cache_root, ensure
from posenc_cli.data.config import DataConfig
from posenc_cli.data.progress import PrepProgress
from posenc_cli.data.sources import DataSource, open_corpus
from posenc_cli.data.stages import Stages
from posenc_cli.data.tokenizer import eot_id, load_tokenizer, train_tokenizer
from posenc_cli.data.tokens import id_dtype, write_ids

FORMAT_VERSION = 3  # 3: universal newlines


def cache_key(data_cfg: DataConfig, corpus: DataSource, cache_dir: Path) -> str:
    """Corpus content + every setting that changes the tokens."""
    settings = f"{FORMAT_VERSION}|{data_cfg.kind}|{data_cfg.vocab_size}|{data_cfg.val_every_nth}"
    digest = hashlib.blake2b(
        f"{settings}|{corpus.fingerprint(cache_dir)}".encode(), digest_size=10
    ).hexdigest()
    return f"{data_cfg.name}-v{data_cfg.vocab_size}-{digest}"


def prepare(data_cfg: DataConfig) -> TokenData:
    """Train the tokenizer and write token files once; later calls reuse the checked cache.
    An interrupted preparation continues from its last finished stage (stages.py)."""
    cache_dir = cache_root(data_cfg)
    corpus = open_corpus(data_cfg)
    target = cache_dir / cache_key(data_cfg, corpus, cache_dir)
    stages = Stages(target)
    try:
        data = ensure(
            target,
            lambda tmp: _build(corpus, data_cfg.vocab_size, tmp, stages),
            ("train", "val"),
            {"format": FORMAT_VERSION},
        )
    except PosencError:
        stages.clear()  # a corpus that cannot be prepared leaves nothing behind
        raise
    stages.clear()
    return data


def _build(corpus: DataSource, vocab_size: int, tmp: Path, stages: Stages) -> dict[str, Any]:
    tok, tokenizer_seconds = _tokenizer_stage(corpus, vocab_size, tmp, stages)
    digest = file_digest(tmp / "tokenizer.json")
    dtype = id_dtype(tok.get_vocab_size())
    counts: dict[str, int] = {}
    t1 = time.perf_counter()
    for part, segments, limit in (
        ("train", corpus.train_segments, corpus.train_limit),
        ("val", corpus.val_segments, corpus.val_limit),
    ):
        done = stages.done(part, f"{part}.bin", digest)
        if done is not None:
            stages.restore(f"{part}.bin", tmp)
            counts[part] = int(done["ids"])
            continue
        with PrepProgress(part) as shown:
            counts[part], _ = write_ids(tok, segments(), tmp / f"{part}.bin", dtype, limit, shown)
        stages.keep(part, tmp / f"{part}.bin", {"ids": counts[part], "tokenizer": digest})
    if counts["train"] == 0 or counts["val"] == 0:
        raise PosencError(
            "the corpus is too small to hold out validation text",
            "give more text (a few KB at least) or fewer data.val_every_nth",
        )
    return {
        "format": FORMAT_VERSION,
        "vocab_size": tok.get_vocab_size(),
        "dtype": np.dtype(dtype).name,
        "train_tokens": counts["train"],
        "val_tokens": counts["val"],
        "eot_id": eot_id(tok),
        "tokenizer_seconds": tokenizer_seconds,
        "encode_seconds": round(time.perf_counter() - t1, 2),
    }


def _tokenizer_stage(
    corpus: DataSource, vocab_size: int, tmp: Path, stages: Stages
) -> tuple[Tokenizer, float]:
    """The tokenizer (trained, or kept from an interrupted run) saved in tmp, and how long
    its training took."""
    done = stages.done("tokenizer", "tokenizer.json", None)
    if done is not None:
        stages.restore("tokenizer.json", tmp)
        return load_tokenizer(tmp / "tokenizer.json"), float(done["seconds"])
    t0 = time.perf_counter()
    with PrepProgress("tokenizer") as shown:
        tok = train_tokenizer(shown.counted(corpus.tokenizer_segments()), vocab_size)
    if tok.get_vocab_size() < vocab_size:  # refused before the corpus is encoded and cached
        raise _too_few_tokens(tok.get_vocab_size(), vocab_size)
    tok.save(str(tmp / "tokenizer.json"))
    seconds = round(time.perf_counter() - t0, 2)
    stages.keep("tokenizer", tmp / "tokenizer.json", {"seconds": seconds})
    return tok, seconds


def check_data_fits(data: TokenData, data_cfg: DataConfig, L: int) -> None:
    """Enough tokens for one window each side of length ``L``, and the vocabulary that was
    asked for."""
    if len(data.train) <= L + 1 or len(data.val) <= L + 1:
        raise PosencError(
            f"the corpus is too short: {len(data.train)} training and {len(data.val)} validation "
            f"tokens for windows of {L}",
            "give more text or a smaller train.context_length",
        )
    if data_cfg.vocab_size != data.meta["vocab_size"]:
        raise _too_few_tokens(data.meta["vocab_size"], data_cfg.vocab_size)


def _too_few_tokens(learned: int, asked: int) -> PosencError:
    return PosencError(
        f"the tokenizer learned only {learned} tokens, fewer than data.vocab_size={asked}",
        "give more text or a smaller data.vocab_size",
    )
