"""data=text (and the configs built on it, data=tinystories): UTF-8 text files, a file or every
*.txt under a folder, with an optional validation file; without one, every nth document is
held out whole, over-long documents first cut at line boundaries so even a corpus of one
document has a validation part."""

from __future__ import annotations

from posenc_cli.common.errors import PosencError
from posenc_cli.data.config import DataConfig
from posenc_cli.data.corpus import MAX_BLOCK_CHARS, MIN_BLOCK_CHARS, Corpus, text_files


class TextCorpus(Corpus):
    kind = "text"
    describes = "a file"
    reads = ("path", "val_path")

    @classmethod
    def from_config(cls, data_cfg: DataConfig) -> TextCorpus:
        return cls.of(data_cfg.path, data_cfg.val_path, data_cfg.val_every_nth)

    @classmethod
    def of(cls, path: str | None, val_path: str | None, val_every_nth: int) -> TextCorpus:
        if path is None:
            raise PosencError("data.path is not set", "add data.path=FILE_OR_DIR")
        files = text_files(path)
        total = sum(f.stat().st_size for f in files)
        block = max(MIN_BLOCK_CHARS, min(MAX_BLOCK_CHARS, total // (4 * max(val_every_nth, 1))))
        return cls(files, text_files(val_path) if val_path else None, val_every_nth, block)
