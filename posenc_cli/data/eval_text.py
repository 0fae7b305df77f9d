"""Text tokenized with a run's own tokenizer, for evaluating a trained model on other text.

A model can only be scored on ids of the tokenizer it was trained with, so the text is encoded
with the run's tokenizer.json (never a newly trained one) and cached keyed by the text's
content, the tokenizer's bytes and which part of the text was taken.

Which text: ``held_out=True`` takes the corpus's validation segments (data.val_path when set,
else every ``val_every_nth`` segment, as in training; for data=hf the documents its hash holds
out); ``held_out=False`` takes every document of data.path or of the data=hf source (other text
was never trained on, so none of it needs holding out). Either way at
most the first MAX_TOKENS tokens are kept: evaluation needs ``eval.tokens``, not a whole corpus.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from posenc_cli.common.digest import file_digest
from posenc_cli.common.errors import PosencError
from posenc_cli.data.cache import TokenData, cache_root, ensure
from posenc_cli.data.config import DataConfig
from posenc_cli.data.sources import DataSource, open_corpus
from posenc_cli.data.tokenizer import eot_id, load_tokenizer
from posenc_cli.data.tokens import id_dtype, write_ids

FORMAT_VERSION = 3  # 3: universal newlines
MAX_TOKENS = 1 << 22


def encode_for_eval(data_cfg: DataConfig, tokenizer_path: Path, held_out: bool) -> TokenData:
    """Token ids of ``data_cfg``'s text under the given tokenizer (cached; see module doc)."""
    cache_dir = cache_root(data_cfg)
    corpus = open_corpus(data_cfg)
    target = cache_dir / "eval" / _cache_name(data_cfg, corpus, tokenizer_path, held_out, cache_dir)

    tok = load_tokenizer(tokenizer_path)

    def build(tmp: Path) -> dict[str, Any]:
        segments = corpus.val_segments() if held_out else corpus.documents()
        return _build(tok, segments, tmp)

    expect = {"format": FORMAT_VERSION, "vocab_size": tok.get_vocab_size()}
    data = ensure(target, build, ("val",), expect)
    return TokenData(data.val[:0], data.val, tokenizer_path, data.meta)


def _cache_name(
    data_cfg: DataConfig,
    corpus: DataSource,
    tokenizer_path: Path,
    held_out: bool,
    cache_dir: Path,
) -> str:
    part = f"val{data_cfg.val_every_nth}" if held_out else "all"
    settings = f"{FORMAT_VERSION}|{data_cfg.kind}|{part}|{MAX_TOKENS}|{file_digest(tokenizer_path)}"
    digest = hashlib.blake2b(
        f"{settings}|{corpus.fingerprint(cache_dir)}".encode(), digest_size=10
    ).hexdigest()
    return f"{data_cfg.name}-{part}-{digest}"


def _build(tok: Tokenizer, segments: Iterator[str], tmp: Path) -> dict[str, Any]:
    """Encode at most MAX_TOKENS ids."""
    dtype = id_dtype(tok.get_vocab_size())
    count, truncated = write_ids(tok, segments, tmp / "val.bin", dtype, limit=MAX_TOKENS)
    if count == 0:
        raise PosencError("the evaluation text is empty", "point data.path at a file with text")
    return {
        "format": FORMAT_VERSION,
        "vocab_size": tok.get_vocab_size(),
        "dtype": np.dtype(dtype).name,
        "val_tokens": count,
        "eot_id": eot_id(tok),
        "truncated": truncated,
    }
