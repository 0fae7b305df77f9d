"""A 95 % interval for every perplexity: a bootstrap over documents (or over windows).

Tokens of one document are not independent, so the unit of resampling is the document: the
scored targets are grouped by the document they predict in (documents end after an
<|endoftext|>), whole documents are drawn with replacement, and each draw's perplexity is
exp(total loss / total targets). With a single document the windows of the evaluated length
are the unit instead. The generator is seeded, so the interval is reproducible.
"""

from __future__ import annotations

import numpy as np

RESAMPLES = 1000
SEED = 0


def target_groups(
    ids: np.ndarray, targets: np.ndarray, eot_id: int | None, length: int
) -> tuple[np.ndarray, str]:
    """Group of each target t (the prediction of ids[t + 1]; ``targets`` sorted) and what the
    groups are: the document t predicts in, or its window of ``length`` in the sample."""
    if eot_id is not None and targets.size:
        docs = np.cumsum(np.asarray(ids[: targets[-1] + 1]) == eot_id)[targets]
        if docs[-1] - docs[0] >= 1:
            return docs - docs[0], "documents"
    return np.arange(targets.size) // length, "windows"


def bootstrap_draws(n_groups: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, n_groups) how often each group is drawn in each resample."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=resamples)


def perplexity_interval(
    losses: np.ndarray, groups: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """2.5th and 97.5th percentile of the bootstrapped perplexity."""
    sums = np.bincount(groups, weights=losses)
    counts = np.bincount(groups).astype(float)
    used = counts > 0
    sums = sums[used]
    counts = counts[used]
    draws = bootstrap_draws(len(sums), resamples, seed)
    ppl = np.exp((draws @ sums) / (draws @ counts))
    lo, hi = np.percentile(ppl, [2.5, 97.5])
    return float(lo), float(hi)
