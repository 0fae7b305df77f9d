"""The scored targets grouped into resampling units, and the per-unit record of an evaluation.

A unit is a block of ``unit_tokens`` consecutive targets inside one document, counted from the
document's first target (the last block of a document may be shorter); a document is the text
after an <|endoftext|>, and a text without one is a single document. Units, not documents, are
what the bootstrap resamples (evals/paired.py): the built-in corpus holds 12 held-out speeches,
one of them 30 % of the targets, so resampling whole documents measures which speech was drawn
rather than the model; blocks of a training length are many, small enough that a long document
contributes in proportion to its length, and long enough that the loss of one block says little
about the next. A unit never spans two documents, so a corpus of short documents (stories)
resamples them whole.

The record is ``eval/<key>/units.csv`` in the run directory, one line per protocol, length and
unit: ``protocol,length,document,unit,loss_sum,targets``. Every length of a protocol scores the
same targets, so its units are the same at every length, and two runs scored on the same targets
(the same held-out text, eval.factors, eval.tokens, tail_targets and unit_tokens: the result's
``targets_sha256`` and ``unit_tokens`` say so) have the same units: that is what makes their
perplexities paired. The run's perplexity
is exp(sum loss_sum / sum targets) over a protocol and length's lines.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

#: The file name of the record, inside eval/<result key>/ of the run directory.
UNITS_FILE = "units.csv"
COLUMNS = ("protocol", "length", "document", "unit", "loss_sum", "targets")


def unit_index(
    ids: np.ndarray, targets: np.ndarray, eot_id: int | None, unit_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """(document, unit within it) of every target t (the prediction of ids[t + 1]).

    A document starts with the target at its <|endoftext|> (the prediction of its first token)."""
    targets = np.asarray(targets, dtype=np.int64)
    if eot_id is None or targets.size == 0:
        return np.zeros(targets.size, dtype=np.int64), targets // unit_tokens
    last = int(targets.max()) + 1
    is_eot = np.asarray(ids[:last]) == eot_id
    docs = np.cumsum(is_eot)[targets]
    starts = np.concatenate([[0], np.flatnonzero(is_eot)])
    return docs, (targets - starts[docs]) // unit_tokens


@dataclass
class UnitSums:
    """One protocol and length: each unit's summed loss and target count, in (document, unit)
    order."""

    document: np.ndarray
    unit: np.ndarray
    loss_sum: np.ndarray
    targets: np.ndarray


def unit_sums(
    ids: np.ndarray,
    targets: np.ndarray,
    losses: np.ndarray,
    eot_id: int | None,
    unit_tokens: int,
) -> UnitSums:
    """Sum the losses of ``targets`` by unit (float64)."""
    docs, units = unit_index(ids, targets, eot_id, unit_tokens)
    uniq, inverse = np.unique(np.stack([docs, units], axis=1), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    sums = np.bincount(inverse, weights=np.asarray(losses, dtype=np.float64), minlength=len(uniq))
    counts = np.bincount(inverse, minlength=len(uniq))
    return UnitSums(uniq[:, 0], uniq[:, 1], sums, counts)


def targets_digest(ids: np.ndarray, targets: np.ndarray) -> str:
    """SHA-256 of the scored targets' positions and token ids: equal digests, same targets."""
    t = np.sort(np.asarray(targets, dtype=np.int64))
    h = hashlib.sha256(t.tobytes())
    h.update(np.asarray(ids, dtype=np.int64)[t + 1].tobytes())
    return h.hexdigest()


def units_csv(records: dict[tuple[str, int], UnitSums]) -> str:
    """The text of units.csv; loss sums written exactly (repr of the float64)."""
    f = io.StringIO(newline="")
    w = csv.writer(f, lineterminator="\n")
    w.writerow(COLUMNS)
    for (protocol, length), s in sorted(records.items()):
        for d, u, loss, n in zip(s.document, s.unit, s.loss_sum, s.targets, strict=True):
            w.writerow([protocol, length, int(d), int(u), repr(float(loss)), int(n)])
    return f.getvalue()


class UnitsFileError(ValueError):
    """A units.csv that is not one posenc wrote (the caller says so in one line)."""


#: The largest record read back: a units.csv of the built-in corpus is about 0.4 MB.
MAX_BYTES = 256 * 2**20
#: A record may be stored gzip-compressed under its name plus this suffix: the records committed
#: beside the results pages are (report/records.py), so that they stay small in the repository.
COMPRESSED = ".gz"


def stored_record(path: Path) -> Path | None:
    """The file that holds the record ``path`` names: ``path`` itself, else its compressed
    copy ``path.gz``, else None."""
    for candidate in (path, path.with_name(path.name + COMPRESSED)):
        if candidate.is_file():
            return candidate
    return None


def open_record(path: Path) -> IO[str]:
    """A record opened for reading once it is a regular file of at most MAX_BYTES, read from
    its compressed copy where only that is stored (at most MAX_BYTES once decompressed, so a
    small file cannot expand without bound)."""
    stored = stored_record(path) or path
    if not stored.is_file() or stored.stat().st_size > MAX_BYTES:
        raise UnitsFileError(f"it is not a regular file of at most {MAX_BYTES // 2**20} MB")
    if stored.name == path.name:
        return stored.open(encoding="utf-8", newline="")
    try:
        with gzip.open(stored, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise UnitsFileError(f"it is not a gzip file ({exc})") from None
    if len(data) > MAX_BYTES:
        raise UnitsFileError(f"it holds more than {MAX_BYTES // 2**20} MB once decompressed")
    return io.StringIO(data.decode("utf-8"), newline="")


def natural(text: str, line: int) -> int:
    """A non-negative integer of at most 18 ASCII digits (no sign, no other script's digits)."""
    if not (text.isascii() and text.isdigit() and len(text) <= 18):
        raise UnitsFileError(f"line {line} holds {text[:20]!r} where a count belongs")
    return int(text)


def record_rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """The data rows of a record with their line numbers, once its header is ``columns``."""
    with open_record(path) as f:
        reader = csv.reader(f)
        if tuple(next(reader, ())) != columns:
            raise UnitsFileError(f"its header is not {','.join(columns)}")
        yield from enumerate(reader, start=2)


def read_units(path: Path) -> dict[tuple[str, int], UnitSums]:
    """A units.csv read back, checked line by line (it may come from someone else)."""
    rows: dict[tuple[str, int], list[tuple[int, int, float, int]]] = {}
    seen: set[tuple[str, int, int, int]] = set()
    try:
        for line, row in record_rows(path, COLUMNS):
            key = _key(row, line)
            values = _values(row, line)
            if (*key, values[0], values[1]) in seen:
                raise UnitsFileError(f"line {line} repeats a unit")
            seen.add((*key, values[0], values[1]))
            rows.setdefault(key, []).append(values)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UnitsFileError(str(exc)) from None
    out = {}
    for key, unit_rows in rows.items():
        d, u, loss, n = (np.array(col) for col in zip(*sorted(unit_rows), strict=True))
        out[key] = UnitSums(d.astype(np.int64), u.astype(np.int64), loss.astype(float), n)
    return out


def _key(row: list[str], line: int) -> tuple[str, int]:
    if len(row) != len(COLUMNS) or not (row[0].isascii() and row[0].isidentifier()):
        raise UnitsFileError(f"line {line} is not protocol,length,document,unit,loss_sum,targets")
    return row[0], natural(row[1], line)


def _values(row: list[str], line: int) -> tuple[int, int, float, int]:
    d, u, n = natural(row[2], line), natural(row[3], line), natural(row[5], line)
    try:
        loss = float(row[4]) if len(row[4]) <= 32 else math.nan
    except ValueError:
        loss = math.nan
    if n < 1 or not math.isfinite(loss) or loss < 0:
        raise UnitsFileError(f"line {line} holds a value out of range")
    return d, u, loss, n
