"""task.*: language modelling, or a synthetic task with its sizes and its own keys, typed.

The sizes every synthetic task has are fields; a task's own keys (symbols, digits, …) stay the
mapping its class in synthetic/tasks/ reads, checked against configs/task/<name>.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TaskConfig:
    """task.*: lm (language modelling: nothing else) or a synthetic task's sizes and its own
    keys (``params``, read by its class in synthetic/tasks/)."""

    name: str = "lm"
    description: str = ""
    train_lengths: list[int] = field(default_factory=list)
    test_lengths: list[int] = field(default_factory=list)
    test_instances: int = 0
    params: dict[str, Any] = field(default_factory=dict)

    def as_yaml(self) -> dict[str, Any]:
        """The section as configs/task/<name>.yaml lays it out."""
        if not self.synthetic:
            return {"name": "lm"}
        sizes = {k: getattr(self, k) for k in ("train_lengths", "test_lengths", "test_instances")}
        return {"name": self.name, "description": self.description, **sizes, **self.params}

    @property
    def synthetic(self) -> bool:
        """A synthetic-task run (anything but lm)."""
        return self.name != "lm"


def task_config(values: dict[str, Any]) -> TaskConfig:
    """The task section's plain values (a composed or saved config's) as a TaskConfig."""
    own = dict(values)
    if own.get("name", "lm") == "lm":
        return TaskConfig()
    return TaskConfig(
        name=str(own.pop("name")),
        description=str(own.pop("description", "")),
        train_lengths=[int(n) for n in own.pop("train_lengths")],
        test_lengths=[int(n) for n in own.pop("test_lengths")],
        test_instances=int(own.pop("test_instances")),
        params=own,
    )
