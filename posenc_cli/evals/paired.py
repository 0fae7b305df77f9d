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

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from posenc_cli.evals.units import UnitSums

RESAMPLES = 2000
SEED = 0
LEVEL = 0.95


class NotPaired(ValueError):
    """Two rows that were not scored on the same units (the message says how they differ)."""


@dataclass(frozen=True)
class Ratio:
    """ppl(A) / ppl(B) with its 95 % interval and what it rests on."""

    ratio: float
    lo: float
    hi: float
    n_seeds: int
    n_baseline_seeds: int
    n_units: int

    @property
    def separates(self) -> bool:
        """Whether the interval excludes 1 (the data tell the two rows apart)."""
        return self.hi < 1.0 or self.lo > 1.0


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


def unit_draws(n_units: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, n_units): how often each unit is drawn in each resample."""
    rng = np.random.default_rng([seed, 0])
    return rng.multinomial(n_units, np.full(n_units, 1.0 / n_units), size=resamples)


def seed_draws(n_seeds: int, stream: str, resamples: int = RESAMPLES) -> np.ndarray:
    """(resamples, n_seeds): how often each of a row's seeds is drawn, from the row's stream."""
    rng = np.random.default_rng([SEED, 1, zlib.crc32(stream.encode())])
    return rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=resamples)


def paired_ratio(
    row: Sequence[UnitSums],
    baseline: Sequence[UnitSums],
    row_stream: str,
    baseline_stream: str,
    resamples: int = RESAMPLES,
) -> Ratio:
    """ppl(row) / ppl(baseline) over their seeds, paired over units; NotPaired if the two
    were scored on different units."""
    a, n = stack_seeds(row)
    b, n_b = stack_seeds(baseline)
    _check_same_units(row[0], baseline[0])
    total = n.sum()
    point = (a.mean(axis=0) - b.mean(axis=0)).sum() / total
    w = unit_draws(n.size, resamples).astype(float)
    mean_a = seed_draws(len(row), row_stream, resamples) @ a / len(row)
    mean_b = seed_draws(len(baseline), baseline_stream, resamples) @ b / len(baseline)
    logs = np.sort(((mean_a - mean_b) * w).sum(axis=1) / (w @ n))
    tail = round(resamples * (1 - LEVEL) / 2)
    return Ratio(
        math.exp(point),
        math.exp(logs[tail]),
        math.exp(logs[resamples - 1 - tail]),
        len(row),
        len(baseline),
        int(n.size),
    )


def perplexity(seeds: Sequence[UnitSums]) -> float:
    """exp(total loss / total targets), averaged over seeds in log space."""
    a, n = stack_seeds(seeds)
    return math.exp(a.sum(axis=1).mean() / n.sum())
