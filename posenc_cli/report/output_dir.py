"""The folder `posenc compare` writes into: created on first use, and a failure to write
there is one line naming the folder and the fix, whichever table was being written."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from posenc_cli.common.errors import PosencError


@contextmanager
def writing_into(out_dir: Path) -> Iterator[None]:
    """Create ``out_dir``; an OSError inside the block becomes the one-line error."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        yield
    except OSError as exc:
        raise PosencError(
            f"cannot write the comparison to '{out_dir}': {exc.strerror or exc}",
            "choose a writable directory with --out DIR",
        ) from exc
