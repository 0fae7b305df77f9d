"""The rows and tables of a task comparison (filled by report/tasks.py, drawn by task_plots)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posenc_cli.report.runs import Run, Stat


@dataclass
class TaskRow:
    label: str
    runs: list[Run]
    exact: dict[int, Stat | None]
    #: Each seed's exact match by size (None: not applicable), in the order of ``runs``.
    by_seed: list[dict[int, float | None]] = field(default_factory=list)


@dataclass
class TaskGroup:
    """One table: one task, one setting; rows are encodings, columns test lengths."""

    task: str
    settings: dict[str, Any]
    runs: list[Run]
    rows: list[TaskRow] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    train_lengths: tuple[int, int] = (0, 0)
    size_unit: str = "items"
    #: The settings that tell this table from the task's other tables ('' when it has one).
    setting: str = ""
