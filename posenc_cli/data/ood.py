"""Text tokenized with a run's own tokenizer, for evaluating a trained model on other text.

A model can only be scored on ids of the tokenizer it was trained with, so the text is encoded
with the run's tokenizer.json (never a newly trained one) and cached as an np.memmap keyed by the
text's content, the tokenizer's bytes and which part of the text was taken.

Which text: ``held_out=True`` takes the corpus's validation segments (data.val_path when set,
else every ``val_every_nth`` segment, as in training); ``held_out=False`` takes every document
of data.path (other text was never trained on, so none of it needs holding out). Either way at
most the first MAX_TOKENS tokens are kept: evaluation needs ``eval.tokens``, not a whole corpus.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from posenc_cli.data.corpus import Corpus, read_chunks, split_documents
from posenc_cli.data.dataset import TokenData, fresh_tmp_dir, id_dtype, publish, write_ids
from posenc_cli.data.tokenizer import eot_id, load_tokenizer
from posenc_cli.errors import PosencError

FORMAT_VERSION = 1
MAX_TOKENS = 1 << 22


def encode_for_eval(data_cfg: Any, tokenizer_path: Path, held_out: bool) -> TokenData:
    """Token ids of ``data_cfg``'s text under the given tokenizer (cached; see module doc)."""
    cache_dir = Path(str(data_cfg.cache_dir)).expanduser()
    corpus = Corpus(data_cfg.kind, data_cfg.path, data_cfg.val_path, data_cfg.val_every_nth)
    target = cache_dir / "eval" / _cache_name(data_cfg, corpus, tokenizer_path, held_out,
                                               cache_dir)
    if not (target / "meta.json").exists():
        tok = load_tokenizer(tokenizer_path)
        segments = corpus.val_segments() if held_out else _documents(corpus)
        try:
            _build(tok, segments, target)
        except PermissionError:
            raise PosencError(f"cannot write the data cache '{cache_dir}'",
                              "set data.cache_dir (or $POSENC_CACHE) to a writable folder"
                              ) from None
    meta = json.loads((target / "meta.json").read_text())
    dtype = np.dtype(meta["dtype"])
    val = np.memmap(target / "val.bin", dtype=dtype, mode="r")
    return TokenData(np.empty(0, dtype=dtype), val, tokenizer_path, meta)


def _cache_name(data_cfg: Any, corpus: Corpus, tokenizer_path: Path, held_out: bool,
                cache_dir: Path) -> str:
    tok_hash = hashlib.blake2b(tokenizer_path.read_bytes(), digest_size=10).hexdigest()
    part = f"val{data_cfg.val_every_nth}" if held_out else "all"
    settings = f"{FORMAT_VERSION}|{data_cfg.kind}|{part}|{MAX_TOKENS}|{tok_hash}"
    digest = hashlib.blake2b(f"{settings}|{corpus.fingerprint(cache_dir)}".encode(),
                             digest_size=10).hexdigest()
    return f"{data_cfg.name}-{part}-{digest}"


def _documents(corpus: Corpus) -> Iterator[str]:
    """Every document of the corpus's files (data.path), in file order."""
    for f in corpus.files:
        yield from split_documents(read_chunks(f))


def _build(tok: Tokenizer, segments: Iterator[str], target: Path) -> None:
    """Encode at most MAX_TOKENS ids; the folder appears atomically."""
    tmp = fresh_tmp_dir(target)
    dtype = id_dtype(tok)
    count, truncated = write_ids(tok, segments, tmp / "val.bin", dtype, limit=MAX_TOKENS)
    if count == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PosencError("the evaluation text is empty", "point data.path at a file with text")
    publish(tmp, target, {"format": FORMAT_VERSION, "vocab_size": tok.get_vocab_size(),
                          "dtype": np.dtype(dtype).name, "val_tokens": count,
                          "eot_id": eot_id(tok), "truncated": truncated})
