"""The corpus a data config names: files (data=sotu, data=text …) or a `datasets` source
(data=hf). Both give train, validation and tokenizer segments, every document, the bounds on
the ids kept, and a fingerprint for the cache key."""

from __future__ import annotations

from posenc_cli.data.config import DataConfig
from posenc_cli.data.corpus import Corpus
from posenc_cli.data.hf_corpus import HfCorpus


def open_corpus(data_cfg: DataConfig) -> Corpus | HfCorpus:
    """The corpus of ``data_cfg``; nothing is read from a `datasets` source yet."""
    if data_cfg.kind == "hf":
        return HfCorpus(data_cfg)
    return Corpus(data_cfg.kind, data_cfg.path, data_cfg.val_path, data_cfg.val_every_nth)
