"""How `posenc compare` tabulates a task's result, declared by the task's class (trusted code),
never read from a metrics.json (which may come from someone else): the tables of its metrics by
length, with their chance levels, and the per-instance record whose scores pair them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricTable:
    """One table: ``result[metric]``, a mean per length, by row and length."""

    metric: str
    title: str
    caption: str = ""
    #: A rate shown in percent (and paired in percentage points).
    percent: bool = False
    #: The unit of a value that is not a rate (and of its paired differences).
    unit: str = ""
    #: What guessing scores: a row of its own in the table and a line on the figure.
    chance: float | None = None
    #: The least and greatest value the task can write: a received result outside them is not
    #: shown (report/validity.py).
    bounds: tuple[float, float] = (-1e6, 1e6)


@dataclass(frozen=True)
class ResultView:
    """The tables of a task's result; ``instances`` names its per-instance record in
    eval/<key>/ (evals/instance_scores.py) whose ``columns`` are per-instance values of the
    tables' metrics, so those tables are paired over instances and seeds."""

    tables: tuple[MetricTable, ...]
    instances: str | None = None
    columns: tuple[str, ...] = ()
