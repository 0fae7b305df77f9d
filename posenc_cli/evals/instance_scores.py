"""A per-instance record of scores: ``eval/<key>/<file>``, one line per length and instance,
``length,instance,<score>,…`` (each score written exactly). A task whose result is a mean over
seeded test instances that every run shares (``instances_sha256`` in the result names them)
writes one, so two runs' means are paired instance by instance: read back as the units of
evals/units.py (one instance, one unit, its score the value) for the paired bootstrap of
evals/paired.py, which `posenc compare` draws over instances and seeds. The task names the file
and its score columns in its result's "compare" entry, so the report reads it naming no task."""

from __future__ import annotations

import csv
import hashlib
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from posenc_cli.evals.units import UnitsFileError, UnitSums, natural, record_rows

INDEX = ("length", "instance")


def rows_digest(rows: list[list[int]]) -> str:
    """SHA-256 of the instances' token rows, in order: equal digests, the same instances."""
    h = hashlib.sha256()
    for tokens in rows:
        h.update(len(tokens).to_bytes(8, "little"))
        h.update(np.asarray(tokens, dtype=np.int64).tobytes())
    return h.hexdigest()


def scores_csv(columns: Sequence[str], scores: Mapping[int, Sequence[Any]]) -> str:
    """The record's text from {length: one sequence of per-instance values per column}."""
    f = io.StringIO(newline="")
    w = csv.writer(f, lineterminator="\n")
    w.writerow([*INDEX, *columns])
    for length, values in sorted(scores.items()):
        for i, row in enumerate(zip(*values, strict=True)):
            w.writerow([length, i, *(repr(float(v)) for v in row)])
    return f.getvalue()


def read_scores(path: Path, columns: Sequence[str]) -> dict[str, dict[int, UnitSums]]:
    """{column: {length: units}}, checked line by line (the file may come from someone else);
    UnitsFileError when posenc could not have written it."""
    rows: dict[int, list[tuple[float, ...]]] = {}
    try:
        for line, row in record_rows(path, (*INDEX, *columns)):
            if len(row) != len(INDEX) + len(columns):
                raise UnitsFileError(f"line {line} is not {','.join((*INDEX, *columns))}")
            values = (natural(row[1], line), *(_finite(v, line) for v in row[2:]))
            rows.setdefault(natural(row[0], line), []).append(values)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UnitsFileError(str(exc)) from None
    out: dict[str, dict[int, UnitSums]] = {name: {} for name in columns}
    for length, lines in rows.items():
        ordered = sorted(lines)
        index = np.array([line[0] for line in ordered], dtype=np.int64)
        table = np.array(ordered, dtype=np.float64)  # (instances, 1 + columns)
        if len(set(index.tolist())) != index.size:
            raise UnitsFileError(f"an instance of length {length} appears twice")
        for i, name in enumerate(columns, start=1):
            out[name][length] = UnitSums(
                np.zeros_like(index), index, table[:, i], np.ones_like(index)
            )
    return out


def _finite(text: str, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UnitsFileError(f"line {line} holds {text[:20]!r} where a number belongs") from None
    if not math.isfinite(value):
        raise UnitsFileError(f"line {line} holds {text[:20]!r}, not a finite number")
    return value
