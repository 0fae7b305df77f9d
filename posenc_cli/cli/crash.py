"""Where the traceback of an unexpected exception goes, so the user sees one line."""

from __future__ import annotations

import tempfile
import time
import traceback
from pathlib import Path


def save_traceback() -> Path:
    """Write the exception being handled to a file in the temp folder; returns its path."""
    path = Path(tempfile.gettempdir()) / f"posenc-traceback-{time.strftime('%Y%m%d-%H%M%S')}.txt"
    path.write_text(traceback.format_exc(), encoding="utf-8")
    return path
