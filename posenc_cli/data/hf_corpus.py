"""`data=hf`: a corpus streamed from Hugging Face `datasets` (hf_dataset.py), split by hash.

A document is validation exactly when a hash of its text says so (one in data.val_every_nth),
so the split never depends on the order of the source or on how much of it is taken: a run
that takes more training text never trains on a document a smaller run validated on. The
validation ids are the first VAL_TOKENS of the held-out documents, the training ids the first
data.train_tokens of the others (all of them when it is null); the tokenizer learns from the
first training documents (TOKENIZER_CHARS_PER_TOKEN characters per training token, at most
TOKENIZER_MAX_CHARS). Nothing is read from the source until the data is prepared, so a cached
entry is found without the network.
"""

from __future__ import annotations

import glob
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from posenc_cli.common.errors import PosencError
from posenc_cli.data.config import DataConfig
from posenc_cli.data.content_hash import HashMemo
from posenc_cli.data.hf_dataset import MAX_DOCUMENT_CHARS, texts
from posenc_cli.data.row_documents import documents
from posenc_cli.data.sources import DataSource

VAL_TOKENS = 1 << 21
TOKENIZER_CHARS_PER_TOKEN = 8
TOKENIZER_MAX_CHARS = 1 << 30
#: The settings that choose the text, all part of the cache key.
SOURCE_KEYS = ("dataset", "subset", "split", "text_field", "data_files", "revision")


def is_validation(doc: str, nth: int) -> bool:
    """One document in ``nth``, chosen by the BLAKE2b hash of its UTF-8 text."""
    digest = hashlib.blake2b(doc.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % nth == 0


class HfCorpus(DataSource):
    """Train and validation documents of a `datasets` source, plus a fingerprint of it."""

    def __init__(self, data_cfg: DataConfig) -> None:
        if not data_cfg.dataset:
            raise PosencError(
                "data=hf needs data.dataset",
                "add data.dataset=HUB_ID, or data.dataset=parquet data.data_files=FILES",
            )
        self.cfg = data_cfg
        self.nth = max(data_cfg.val_every_nth, 2)
        bound = data_cfg.train_tokens
        self.train_limit = None if bound is None else int(bound)
        self.val_limit = VAL_TOKENS

    def _documents(self, validation: bool) -> Iterator[str]:
        """The source is opened now (texts), its documents read as the iterator is consumed."""
        return self._side(self.documents(), validation)

    def _side(self, docs: Iterator[str], validation: bool) -> Iterator[str]:
        found = False
        for doc in docs:
            found = True
            if is_validation(doc, self.nth) == validation:
                yield doc
        if not found:
            raise PosencError(
                f"split '{self.cfg.split}' of dataset '{self.cfg.dataset}' has no text",
                "choose another data.split, or check data.data_files",
            )

    def train_segments(self) -> Iterator[str]:
        return self._documents(validation=False)

    def val_segments(self) -> Iterator[str]:
        return self._documents(validation=True)

    def documents(self) -> Iterator[str]:
        """Every document, for evaluating a model on this text."""
        return documents(texts(self.cfg), self._grouping, MAX_DOCUMENT_CHARS)

    @property
    def _grouping(self) -> str:
        return self.cfg.documents

    def tokenizer_segments(self) -> Iterator[str]:
        """The first training documents, enough for the tokenizer (see the module doc); the
        source is opened now, in the caller's thread."""
        budget = TOKENIZER_MAX_CHARS
        if self.train_limit is not None:
            budget = min(budget, TOKENIZER_CHARS_PER_TOKEN * self.train_limit)
        return _first_chars(self.train_segments(), budget)

    def fingerprint(self, cache_dir: Path) -> str:
        """Every setting that chooses the text, the bounds, and the bytes of local files."""
        h = hashlib.blake2b(digest_size=16)
        settings = {k: _plain(getattr(self.cfg, k)) for k in SOURCE_KEYS}
        if self._grouping != "rows":  # so caches made before data.documents stay valid
            settings["documents"] = self._grouping
        bounds = [self.train_limit, VAL_TOKENS, TOKENIZER_CHARS_PER_TOKEN, TOKENIZER_MAX_CHARS]
        h.update(json.dumps([settings, bounds], sort_keys=True).encode())
        memo = HashMemo(cache_dir)
        for f in self._local_files():
            h.update(f"{f}|{memo.file_hash(f)}".encode())
        memo.save()
        return h.hexdigest()

    def _local_files(self) -> list[Path]:
        """The local files the text comes from (none for a hub dataset)."""
        local = Path(str(self.cfg.dataset)).expanduser()
        found = sorted(p for p in local.rglob("*") if p.is_file()) if local.is_dir() else []
        files = self.cfg.data_files
        patterns = [] if files is None else [files] if isinstance(files, str) else list(files)
        for pattern in map(str, patterns):
            found += sorted(Path(p) for p in glob.glob(str(Path(pattern).expanduser())))
        return [p for p in found if p.is_file()]


def _first_chars(docs: Iterator[str], budget: int) -> Iterator[str]:
    """Documents until their characters reach ``budget`` (the one that reaches it included)."""
    taken = 0
    for doc in docs:
        yield doc
        taken += len(doc)
        if taken >= budget:
            return


def _plain(value: Any) -> Any:
    """An OmegaConf list as a plain list, for the key."""
    return value if value is None or isinstance(value, (str, int, float)) else list(value)
