"""Paired comparisons of perplexity: the ratio of two rows' perplexities on the same targets,
with a 95 % interval from a bootstrap over units (evals/units.py) and, with several seeds per
row, over seeds as well.

Two runs scored on the same targets are paired: the difference of their losses on one unit
varies far less than either loss, so the interval of the ratio is much narrower than the two
runs' own intervals suggest, and whether they overlap says nothing. Each row is the mean over
its seeds of the per-unit loss sums; the ratio is exp(mean loss of A - mean loss of B), the
ratio of the seeds' geometric-mean perplexities.

The bootstrap, ``RESAMPLES`` times: draw the units with replacement (one draw shared by both
rows: the pairing), draw each row's seeds with replacement (two levels: seed variation is
inside the interval), and recompute the ratio. The interval runs from the 51st smallest to the
51st largest of the 2,000 resampled ratios (2.5 % outside on each side), so swapping A and B
inverts it exactly. Each row's seed
draws come from a generator keyed by the row's name, so a row compared with itself gives
exactly 1 and a zero-width interval, and the same row draws the same seeds in every
comparison. With two or three seeds the seed level is a coarse estimate (a bootstrap of n
values underestimates their spread by (n - 1)/n): more seeds, tighter and truer intervals.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from posenc_cli.evals.uncertainty import CHUNK_ENTRIES, draw_chunks
from posenc_cli.evals.units import UnitSums

RESAMPLES = 2000
SEED = 0
LEVEL = 0.95


class NotPaired(ValueError):
    """Two rows that were not scored on the same units (the message says how they differ)."""


@dataclass(frozen=True)
class Ratio:
    """ppl(A) / ppl(B) (or, from ``paired_difference``, a difference of rates) with its 95 %
    interval, what it rests on, and the value that means "no difference"."""

    ratio: float
    lo: float
    hi: float
    n_seeds: int
    n_baseline_seeds: int
    n_units: int
    null: float = 1.0

    @property
    def separates(self) -> bool:
        """Whether the interval excludes ``null`` (the data tell the two rows apart)."""
        return self.hi < self.null or self.lo > self.null


def stack_seeds(seeds: Sequence[UnitSums]) -> tuple[np.ndarray, np.ndarray]:
    """(seeds, units) loss sums and the units' target counts; every seed must have the same
    units with the same counts (the same targets)."""
    first = seeds[0]
    for s in seeds[1:]:
        _check_same_units(first, s)
    return np.stack([s.loss_sum for s in seeds]), first.targets.astype(float)


def _check_same_units(a: UnitSums, b: UnitSums) -> None:
    if a.document.shape != b.document.shape:
        raise NotPaired(f"{a.document.size} units against {b.document.size}")
    if not (
        np.array_equal(a.document, b.document)
        and np.array_equal(a.unit, b.unit)
        and np.array_equal(a.targets, b.targets)
    ):
        raise NotPaired("the units hold different targets")


@functools.lru_cache(maxsize=8)
def unit_draws(n_units: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, n_units): how often each unit is drawn in each resample (the same for
    every comparison over as many units; cached, read-only)."""
    draws = np.concatenate(list(unit_draw_chunks(n_units, resamples, seed, cached=False)))
    draws.flags.writeable = False
    return draws


@functools.lru_cache(maxsize=8)
def _unit_weights(n_units: int, resamples: int, seed: int) -> np.ndarray:
    """``unit_draws`` as floats, converted once: every comparison multiplies them by losses."""
    weights = unit_draws(n_units, resamples, seed).astype(float)
    weights.flags.writeable = False
    return weights


def unit_draw_chunks(
    n_units: int, resamples: int = RESAMPLES, seed: int = SEED, cached: bool = True
) -> Iterator[np.ndarray]:
    """The rows of ``unit_draws`` in blocks: all at once (cached) when they are few, else
    drawn afresh in blocks of bounded memory (small units over a long text)."""
    if cached and n_units * resamples <= CHUNK_ENTRIES:
        yield _unit_weights(n_units, resamples, seed)
        return
    yield from draw_chunks(np.random.default_rng([seed, 0]), n_units, resamples)


def seed_draws(n_seeds: int, stream: str, resamples: int = RESAMPLES) -> np.ndarray:
    """(resamples, n_seeds): how often each of a row's seeds is drawn, from the row's stream."""
    rng = np.random.default_rng([SEED, 1, zlib.crc32(stream.encode())])
    return rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=resamples)


def paired_difference(
    row: Sequence[UnitSums],
    baseline: Sequence[UnitSums],
    row_stream: str,
    baseline_stream: str,
    resamples: int = RESAMPLES,
) -> Ratio:
    """(sum of row's values - baseline's) / sum of counts over the units, its seeds averaged:
    a difference of mean losses (or of exact-match rates), with its 95 % paired interval;
    NotPaired if the two were scored on different units."""
    a, n = stack_seeds(row)
    b, _ = stack_seeds(baseline)
    _check_same_units(row[0], baseline[0])
    point = (a.mean(axis=0) - b.mean(axis=0)).sum() / n.sum()
    seeds_a = seed_draws(len(row), row_stream, resamples) / len(row)
    seeds_b = seed_draws(len(baseline), baseline_stream, resamples) / len(baseline)
    parts, done = [], 0
    for w in unit_draw_chunks(n.size, resamples):
        rows = slice(done, done + len(w))
        w = np.asarray(w, dtype=float)  # the cached blocks are floats already
        diff = seeds_a[rows] @ a - seeds_b[rows] @ b
        parts.append((diff * w).sum(axis=1) / (w @ n))
        done += len(w)
    diffs = np.sort(np.concatenate(parts))
    tail = round(resamples * (1 - LEVEL) / 2)
    lo, hi = diffs[tail], diffs[resamples - 1 - tail]
    return Ratio(float(point), float(lo), float(hi), len(row), len(baseline), int(n.size), 0.0)


def paired_ratio(
    row: Sequence[UnitSums],
    baseline: Sequence[UnitSums],
    row_stream: str,
    baseline_stream: str,
    resamples: int = RESAMPLES,
) -> Ratio:
    """ppl(row) / ppl(baseline) over their seeds, paired over units: exp of the paired
    difference of their mean losses."""
    d = paired_difference(row, baseline, row_stream, baseline_stream, resamples)
    return Ratio(
        math.exp(d.ratio), math.exp(d.lo), math.exp(d.hi), d.n_seeds, d.n_baseline_seeds, d.n_units
    )
