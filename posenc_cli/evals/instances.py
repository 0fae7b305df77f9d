"""The per-instance record of a synthetic-task evaluation: ``eval/<key>/instances.csv``, one
line per test length and instance, ``length,instance,exact`` (1 when every answer token was
right). Every run of a task scores the same seeded test instances (``instances_sha256`` in the
result names them), so two runs' exact matches are paired instance by instance; read back as
the units of evals/units.py (one instance, one unit, its exact match the value) for
evals/paired.py."""

from __future__ import annotations

import csv
import hashlib
import io
from pathlib import Path

import numpy as np

from posenc_cli.evals.units import UnitsFileError, UnitSums, natural, record_rows

INSTANCES_FILE = "instances.csv"
COLUMNS = ("length", "instance", "exact")


def instances_digest(instances: list[np.ndarray]) -> str:
    """SHA-256 of the test instances' tokens, in order."""
    h = hashlib.sha256()
    for tokens in instances:
        h.update(len(tokens).to_bytes(8, "little"))
        h.update(np.asarray(tokens, dtype=np.int64).tobytes())
    return h.hexdigest()


def instances_csv(exact: dict[int, tuple[bool, ...]]) -> str:
    f = io.StringIO(newline="")
    w = csv.writer(f, lineterminator="\n")
    w.writerow(COLUMNS)
    for length, flags in sorted(exact.items()):
        for i, hit in enumerate(flags):
            w.writerow([length, i, int(hit)])
    return f.getvalue()


def read_instances(path: Path) -> dict[int, UnitSums]:
    """instances.csv read back as units by length, checked line by line (it may come from
    someone else); UnitsFileError when posenc could not have written it."""
    rows: dict[int, list[tuple[int, int]]] = {}
    try:
        for line, row in record_rows(path, COLUMNS):
            if len(row) != 3 or row[2] not in ("0", "1"):
                raise UnitsFileError(f"line {line} is not length,instance,exact (0 or 1)")
            length, index = natural(row[0], line), natural(row[1], line)
            rows.setdefault(length, []).append((index, int(row[2])))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UnitsFileError(str(exc)) from None
    out = {}
    for length, values in rows.items():
        indices, hits = (np.array(v, dtype=np.int64) for v in zip(*sorted(values), strict=True))
        if len(set(indices.tolist())) != indices.size:
            raise UnitsFileError(f"an instance of length {length} appears twice")
        out[length] = UnitSums(
            np.zeros_like(indices), indices, hits.astype(float), np.ones_like(indices)
        )
    return out
