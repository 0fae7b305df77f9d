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

from posenc_cli.common.errors import PosencError
from posenc_cli.data.cache import TokenData, cache_root, ensure
from posenc_cli.data.progress import PrepProgress
from posenc_cli.data.sources import Corpus, HfCorpus, open_corpus
from posenc_cli.data.tokenizer import eot_id, train_tokenizer
from posenc_cli.data.tokens import id_dtype, write_ids

FORMAT_VERSION = 3  # 3: universal newlines


def cache_key(data_cfg: Any, corpus: Corpus | HfCorpus, cache_dir: Path) -> str:
    """Corpus content + every setting that changes the tokens."""
    settings = f"{FORMAT_VERSION}|{data_cfg.kind}|{data_cfg.vocab_size}|{data_cfg.val_every_nth}"
    digest = hashlib.blake2b(
        f"{settings}|{corpus.fingerprint(cache_dir)}".encode(), digest_size=10
    ).hexdigest()
    return f"{data_cfg.name}-v{data_cfg.vocab_size}-{digest}"


def prepare(data_cfg: Any) -> TokenData:
    """Train the tokenizer and write token files once; later calls reuse the checked cache."""
    cache_dir = cache_root(data_cfg)
    corpus = open_corpus(data_cfg)
    target = cache_dir / cache_key(data_cfg, corpus, cache_dir)
    return ensure(
        target,
        lambda tmp: _build(corpus, int(data_cfg.vocab_size), tmp),
        ("train", "val"),
        {"format": FORMAT_VERSION},
    )


def _build(corpus: Corpus | HfCorpus, vocab_size: int, tmp: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    with PrepProgress("tokenizer") as shown:
        tok = train_tokenizer(shown.counted(corpus.tokenizer_segments()), vocab_size)
    tok.save(str(tmp / "tokenizer.json"))
    t1 = time.perf_counter()
    dtype = id_dtype(tok.get_vocab_size())
    parts = (
        ("train", corpus.train_segments(), corpus.train_limit),
        ("val", corpus.val_segments(), corpus.val_limit),
    )
    counts: dict[str, int] = {}
    for part, segments, limit in parts:
        with PrepProgress(part) as shown:
            counts[part], _ = write_ids(tok, segments, tmp / f"{part}.bin", dtype, limit, shown)
    n_train, n_val = counts["train"], counts["val"]
    if n_train == 0 or n_val == 0:
        raise PosencError(
            "the corpus is too small to hold out validation text",
            "give more text (a few KB at least) or fewer data.val_every_nth",
        )
    return {
        "format": FORMAT_VERSION,
        "vocab_size": tok.get_vocab_size(),
        "dtype": np.dtype(dtype).name,
        "train_tokens": n_train,
        "val_tokens": n_val,
        "eot_id": eot_id(tok),
        "tokenizer_seconds": round(t1 - t0, 2),
        "encode_seconds": round(time.perf_counter() - t1, 2),
    }


def check_data_fits(data: TokenData, cfg: Any) -> None:
    """Enough tokens for one window each side, and the vocabulary that was asked for."""
    L = cfg.train.context_length
    if len(data.train) <= L + 1 or len(data.val) <= L + 1:
        raise PosencError(
            f"the corpus is too short: {len(data.train)} training and {len(data.val)} validation "
            f"tokens for windows of {L}",
            "give more text or a smaller train.context_length",
        )
    if cfg.data.vocab_size != data.meta["vocab_size"]:
        raise PosencError(
            f"the tokenizer learned only {data.meta['vocab_size']} tokens, fewer "
            f"than data.vocab_size={cfg.data.vocab_size}",
            "give more text or a smaller data.vocab_size",
        )
