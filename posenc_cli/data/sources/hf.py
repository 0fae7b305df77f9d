"""data=hf: a Hugging Face `datasets` source, streamed (data/hf_corpus.py, hf_dataset.py); the
files of a builder (parquet, json, csv, text, arrow) or a saved folder read locally."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from posenc_cli.common.errors import PosencError
from posenc_cli.data.config import DataConfig
from posenc_cli.data.hf_corpus import SOURCE_KEYS, HfCorpus

#: `datasets` builders that read the files data.data_files names (no hub dataset of that name).
FILE_BUILDERS = ("parquet", "json", "csv", "text", "arrow")


def _check_local_source(d: DictConfig) -> None:
    """A builder reads only the files it is given (without data.data_files, `datasets` would
    read whatever such files lie in the current folder), and local files have no hub subset
    or revision to honour."""
    name = str(d.dataset)
    builder = name in FILE_BUILDERS
    if builder and d.get("data_files") is None:
        raise PosencError(
            f"data.dataset={name} reads the files data.data_files names, and none are given",
            f"give them, e.g. data.data_files=corpus.{name}, or '[a.{name},b.{name}]'",
        )
    if builder or Path(name).expanduser().is_dir():
        for key in ("subset", "revision"):
            if d.get(key) is not None:
                raise PosencError(
                    f"data.{key}={d.get(key)} is set but data.dataset={name} reads local files, "
                    f"which have no hub {key}",
                    f"drop data.{key}",
                )


class HfSource(HfCorpus):
    kind = "hf"
    describes = "a `datasets` source"
    reads = (*SOURCE_KEYS, "train_tokens", "documents")

    @classmethod
    def from_config(cls, data_cfg: DataConfig) -> HfSource:
        return cls(data_cfg)

    @classmethod
    def check(cls, data: DictConfig) -> None:
        _check_local_source(data)
