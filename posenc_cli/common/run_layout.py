"""The layout of a run directory, named in one place: every file and folder posenc keeps in one.

A run directory is what `posenc train` leaves and every other command reads (eval, resume,
extend, compare, inspect, export), and what the importers write. Each name below is spelled
here only, so a reader of the code finds the whole layout in one file and a change to it is
one edit. ``RunDir`` gives the paths; the modules that own a file's format (metrics, checkpoint,
evaluation records, the lock) read and write it through these paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The run's config as it ran, and the command-line overrides that made it (Hydra's names).
HYDRA_DIR = ".hydra"
CONFIG_FILE = "config.yaml"
OVERRIDES_FILE = "overrides.yaml"
METRICS_FILE = "metrics.json"
CHECKPOINTS_DIR = "checkpoints"
#: The last checkpoint (resume, extend, eval) and the one of the best validation loss.
CHECKPOINTS = ("last", "best")
TOKENIZER_FILE = "tokenizer.json"
EVAL_DIR = "eval"
LOCK_FILE = ".posenc.lock"
#: What a sweep job leaves in its folder when it fails, with the one line that says why.
FAILED_FILE = "FAILED.txt"

#: Where a run's weights came from (metrics.json ``imported.from``; absent: trained here).
ORIGINS = {"cs336": "a CS336 checkpoint", "hf": "a Hugging Face model"}


@dataclass(frozen=True)
class RunDir:
    """The paths of one run directory."""

    path: Path

    @property
    def hydra_dir(self) -> Path:
        return self.path / HYDRA_DIR

    @property
    def config_file(self) -> Path:
        return self.hydra_dir / CONFIG_FILE

    @property
    def overrides_file(self) -> Path:
        return self.hydra_dir / OVERRIDES_FILE

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / CHECKPOINTS_DIR

    def checkpoint(self, which: str = "last") -> Path:
        """checkpoints/last.pt or best.pt."""
        if which not in CHECKPOINTS:
            raise ValueError(f"no checkpoint '{which}': one of {CHECKPOINTS}")
        return self.checkpoints_dir / f"{which}.pt"

    @property
    def tokenizer_file(self) -> Path:
        return self.path / TOKENIZER_FILE

    @property
    def eval_dir(self) -> Path:
        return self.path / EVAL_DIR

    @property
    def lock_file(self) -> Path:
        return self.path / LOCK_FILE

    @property
    def failed_file(self) -> Path:
        return self.path / FAILED_FILE


def origin_of(metrics: dict[str, Any]) -> str | None:
    """What an imported run's weights came from, in words; None for a run trained here."""
    imported = metrics.get("imported")
    if not imported:
        return None
    source = imported.get("from") if isinstance(imported, dict) else None
    return ORIGINS.get(str(source), "another format")
