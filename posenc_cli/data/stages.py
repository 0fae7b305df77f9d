"""The finished stages of an interrupted preparation, kept so that a rerun continues.

Preparing a large corpus takes long (docs/performance.md), so each finished stage (the
tokenizer, the training ids, the validation ids) is kept in ``<entry>.stages/`` beside the
cache entry: its file, linked rather than copied, and a record written last. A rerun takes a
stage only when its record parses, its file has the recorded size and it was made with the
same tokenizer; anything else is redone. The entry itself is still published whole or not at
all (cache.py), and checked like any other before use; the stages are removed once it is.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any


class Stages:
    """The kept stages of the entry at ``target``."""

    def __init__(self, target: Path) -> None:
        self.dir = target.with_name(f"{target.name}.stages")

    def done(self, name: str, file: str, tokenizer: str | None) -> dict[str, Any] | None:
        """The record of a finished stage whose file is intact, else None."""
        try:
            record = json.loads((self.dir / f"{name}.stage.json").read_text())
            path = self.dir / file
            intact = not path.is_symlink() and path.stat().st_size == int(record["size"])
            same = tokenizer is None or record.get("tokenizer") == tokenizer
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return record if isinstance(record, dict) and intact and same else None

    def restore(self, file: str, tmp: Path) -> None:
        _link(self.dir / file, tmp / file)

    def keep(self, name: str, file: Path, record: dict[str, Any]) -> None:
        """Keep ``file`` (a finished stage's output) and its record; a failure to keep it
        only means a rerun starts that stage again."""
        try:
            self.dir.mkdir(exist_ok=True)
            (self.dir / f"{name}.stage.json").unlink(missing_ok=True)
            (self.dir / file.name).unlink(missing_ok=True)
            _link(file, self.dir / file.name)
            record = {**record, "size": file.stat().st_size}
            part = self.dir / f".{name}.stage.json.{os.getpid()}"
            part.write_text(json.dumps(record))
            os.replace(part, self.dir / f"{name}.stage.json")
        except OSError:
            return

    def clear(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _link(src: Path, dst: Path) -> None:
    """A hard link (no copy of a multi-GB file), or a copy where links are not possible."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
