"""Data sources as plug-ins: the corpus a data config's ``kind`` names, found without a list.

Each module of this package defines one ``DataSource`` subclass with its ``kind`` (what
``data.kind`` says in configs/data/<name>.yaml), the data.* keys it reads beyond the common
ones, and its own checks; a new source is one module here and one YAML, and touches nothing
else. A source gives train, validation and tokenizer segments, every document, the bounds on
the ids kept, and a fingerprint for the cache key. Nothing is read when a source is made.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from omegaconf import DictConfig

from posenc_cli.common.errors import PosencError
from posenc_cli.common.plugins import import_all, subclasses
from posenc_cli.data.config import DataConfig


class DataSource:
    """The interface every source implements (the corpus of one data config)."""

    #: data.kind of the configs that read this source.
    kind: ClassVar[str] = ""
    #: What it reads, for messages: "its built-in corpus", "a file", "a `datasets` source".
    describes: ClassVar[str] = ""
    #: The data.* keys only this kind of source reads (a key no source of the run's kind reads
    #: is refused when given, never silently ignored).
    reads: ClassVar[tuple[str, ...]] = ()
    #: At most this many training / validation ids are kept (None: all of them).
    train_limit: int | None = None
    val_limit: int | None = None

    @classmethod
    def from_config(cls, data_cfg: DataConfig) -> DataSource:
        """The source of ``data_cfg`` (a file source checks its paths here)."""
        raise NotImplementedError

    @classmethod
    def check(cls, data: DictConfig) -> None:
        """The source's own rules across its keys, before anything is created (none here)."""

    def train_segments(self) -> Iterator[str]:
        raise NotImplementedError

    def tokenizer_segments(self) -> Iterator[str]:
        """What the tokenizer learns from."""
        raise NotImplementedError

    def val_segments(self) -> Iterator[str]:
        raise NotImplementedError

    def documents(self) -> Iterator[str]:
        """Every document, in order, for evaluating a model on this text."""
        raise NotImplementedError

    def fingerprint(self, cache_dir: Path) -> str:
        """A digest of the content (the cache key holds it)."""
        raise NotImplementedError


def source_classes() -> dict[str, type[DataSource]]:
    """Every source of this package (and any subclass imported in the process), by kind."""
    import_all(sys.modules[__name__])
    return {cls.kind: cls for cls in subclasses(DataSource) if cls.kind}


def source_class(kind: str) -> type[DataSource]:
    """The source of ``kind``, or one line naming the kinds there are."""
    sources = source_classes()
    if kind not in sources:
        raise PosencError(
            f"data.kind '{kind}' is not a data source of posenc",
            "use one of: " + ", ".join(sorted(sources)),
        )
    return sources[kind]


def open_corpus(data_cfg: DataConfig) -> DataSource:
    """The corpus of ``data_cfg``; nothing is read from it yet."""
    return source_class(data_cfg.kind).from_config(data_cfg)
