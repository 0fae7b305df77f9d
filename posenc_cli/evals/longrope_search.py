"""LongRoPE's evolutionary search for the rescale factors (Ding et al. 2024, §3.2), run when
eval.rope_scaling=longrope is given no factors, and before `posenc extend` fine-tunes with
extend.method=longrope without them (workflows/extend_search.py: the long set at S·L).

Why a search: the factors are one number per rotated pair, and the best ones depend on the
model; the paper finds them by evolution on perplexity at the target length. Its search space
and constraint are kept: λ_k in [1, 1.25·S] for the long set (posenc bounds the short one by
[1, S]) and non-decreasing over k (a slower pair is never interpolated less than a faster one).
The first generation holds the methods posenc already has (PI, NTK-aware, YaRN, Llama 3 at S;
plain RoPE for the short set) and mutations of them; each generation keeps the best PARENTS
and refills the population with crossovers and mutations of them. The paper's n̂ (initial
positions left unscaled) is not searched: transformers' LongRoPE has none.

The budget is small and fixed, so a search costs about POPULATION + GENERATIONS ·
(POPULATION - PARENTS) forward passes over WINDOWS windows per set; the random draws come
from the run's seed, so the same run on the same text finds the same factors. The fitness is
the mean loss on windows spread over the held-out text the evaluation then scores: the
factors are fitted on the tokens they are judged on (a small, optimistic bias; the result
says so).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from posenc_cli.common.console import console
from posenc_cli.config.schema import ExtrapolationConfig
from posenc_cli.engine.runtime import Runtime
from posenc_cli.evals.context_extension import factor_for
from posenc_cli.evals.scoring import eval_lengths, sample_blocks, score_sample

#: Candidates per generation, generations after the first, candidates kept as parents.
POPULATION = 8
GENERATIONS = 6
PARENTS = 4
#: Each factor of a mutated child moves with this probability, by a relative step drawn
#: uniformly from ±STEP.
MUTATION = 0.3
STEP = 0.1
#: Windows of the fitted length whose mean loss is a candidate's fitness.
WINDOWS = 4
#: The paper's upper bound of the long factors, as a multiple of S.
LONG_BOUND = 1.25
#: The methods whose frequencies seed the long set's first generation.
SEED_METHODS = ("pi", "ntk", "yarn", "llama3")


@dataclass(frozen=True)
class Space:
    """Where one set is searched: its bounds and the first generation's candidates."""

    low: float
    high: float
    seeds: list[np.ndarray]

    def repair(self, lam: np.ndarray) -> np.ndarray:
        """Inside the bounds and non-decreasing over the pairs (the paper's constraint)."""
        return np.maximum.accumulate(np.clip(lam, self.low, self.high))


def evolve(
    fitness: Callable[[np.ndarray], float], space: Space, rng: np.random.Generator
) -> tuple[np.ndarray, list[float]]:
    """The best factors found and the best loss after each generation (lower is better)."""
    scored: dict[bytes, tuple[float, np.ndarray]] = {}

    def add(lam: np.ndarray) -> None:
        lam = space.repair(lam)
        if lam.tobytes() not in scored:
            scored[lam.tobytes()] = (fitness(lam), lam)

    for seed in space.seeds:
        add(seed)
    for _ in range(POPULATION - len(space.seeds)):  # a repeat is scored once, not redrawn
        add(mutate(space.seeds[int(rng.integers(len(space.seeds)))], rng))
    best = [min(loss for loss, _ in scored.values())]
    for _ in range(GENERATIONS):
        parents = [lam for _, lam in sorted(scored.values(), key=lambda s: s[0])[:PARENTS]]
        for child in range(POPULATION - PARENTS):
            pick = rng.choice(len(parents), 2, replace=len(parents) < 2)
            a, b = parents[int(pick[0])], parents[int(pick[1])]
            add(crossover(a, b, rng) if child % 2 else mutate(a, rng))
        best.append(min(loss for loss, _ in scored.values()))
    return min(scored.values(), key=lambda s: s[0])[1], best


def mutate(lam: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each factor moves by up to ±STEP of itself with probability MUTATION (at least one)."""
    moves = rng.random(lam.size) < MUTATION
    moves[int(rng.integers(lam.size))] = True
    return np.where(moves, lam * (1 + rng.uniform(-STEP, STEP, lam.size)), lam)


def crossover(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each factor from one parent or the other."""
    return np.where(rng.random(a.size) < 0.5, a, b)


def method_factors(encoding: Any, method: str, factor: float, length: int) -> np.ndarray:
    """λ_k = θ_k / θ'_k of ``method`` at S = ``factor`` on the rotated pairs (1 where a pair
    does not turn), so the search starts from what the other methods do."""
    encoding.extend_context(method, factor, length)
    pairs = encoding.rotary_dims // 2
    trained = encoding.trained_inv_freq[:pairs].double()
    scaled = encoding.inv_freq[:pairs].double()
    encoding.extend_context("none", 1.0, length)
    return torch.where(trained > 0, trained / scaled, torch.ones_like(trained)).numpy()


def searched_sets(
    model: nn.Module,
    ids: np.ndarray,
    train_length: int,
    ev: ExtrapolationConfig,
    rt: Runtime,
    seed: int,
) -> tuple[ExtrapolationConfig, dict[str, Any] | None]:
    """``ev`` with each missing set of longrope's factors searched (the long set at the longest
    evaluated length, the short set at L; a set no evaluated length uses is all ones), and
    what the result records of the search (None: nothing was searched)."""
    if ev.rope_scaling != "longrope" or None not in (ev.rope_long_factor, ev.rope_short_factor):
        return ev, None
    lengths = eval_lengths(train_length, ev.factors)
    S = factor_for(ev, train_length, max(lengths), max(lengths))
    search = Search(model, ids, train_length, S, rt, np.random.default_rng(seed))
    long, short, record = search.missing(
        ev.rope_long_factor, ev.rope_short_factor, max(lengths), min(lengths) <= train_length
    )
    return replace(ev, rope_long_factor=long, rope_short_factor=short), {"seed": seed, **record}


@dataclass
class Search:
    """One evaluation's search: the model and text, L, S and the run's random draws."""

    model: nn.Module
    ids: np.ndarray
    train_length: int
    factor: float
    rt: Runtime
    rng: np.random.Generator

    def missing(
        self,
        long: list[float] | None,
        short: list[float] | None,
        long_length: int,
        short_used: bool,
    ) -> tuple[list[float], list[float], dict[str, Any]]:
        """Both sets, each missing one searched (the long set at ``long_length``, all ones
        unless that is past L; the short set at L, all ones unless ``short_used``), and what
        the result records of the search; the model keeps its own frequencies afterwards."""
        record: dict[str, Any] = dict(BUDGET)
        if long is None:
            used = long_length > self.train_length
            long, record["rope_long_factor"] = self.run(True, long_length, used)
        if short is None:
            short, record["rope_short_factor"] = self.run(False, self.train_length, short_used)
        encoding: Any = self.model.encoding
        encoding.extend_context("none", 1.0, self.train_length)
        return long, short, record

    def run(self, long: bool, length: int, used: bool) -> tuple[list[float], dict[str, Any]]:
        """One set fitted at ``length``, and its record; all ones when no evaluated length
        uses it or not one window of ``length`` fits."""
        space = _space(self.model.encoding, long, self.factor, self.train_length)
        fitness = self.fitness(length)
        if fitness is None or not used:
            return [1.0] * space.seeds[0].size, {"length": length, "searched": False}
        t0 = time.perf_counter()
        lam, curve = evolve(fitness, space, self.rng)
        console.print(
            f"  longrope search, {'long' if long else 'short'} set at {length}: loss "
            f"{curve[0]:.4f} -> {curve[-1]:.4f} ({time.perf_counter() - t0:.1f} s)",
            highlight=False,
        )
        record = {"length": length, "searched": True, "best_loss_by_generation": curve}
        return [float(x) for x in lam], record

    def fitness(self, length: int) -> Callable[[np.ndarray], float] | None:
        """Mean loss of up to WINDOWS windows of ``length`` spread over the text with the
        factors given (None when not one window fits: that length is not evaluated either)."""
        available = max(len(self.ids) - 1, 0)
        n = min(WINDOWS, available // length) * length
        if n == 0:
            return None
        blocks = sample_blocks(available, n, length)
        encoding: Any = self.model.encoding

        def loss(lam: np.ndarray) -> float:
            encoding.extend_context("longrope", self.factor, self.train_length, lam.tolist())
            result = score_sample(self.model, self.ids, length, blocks, length, self.rt)
            return float(result.losses.mean())

        return loss


#: The note of a result whose factors were searched.
SEARCH_NOTE = (
    "longrope's missing rescale factors were searched (rope_search) on windows of this "
    "held-out text: they are fitted on the tokens they are scored on"
)
#: What the result records of the budget.
BUDGET = {
    "population": POPULATION,
    "generations": GENERATIONS,
    "parents": PARENTS,
    "mutation": MUTATION,
    "step": STEP,
    "windows": WINDOWS,
}


def _space(encoding: Any, long: bool, factor: float, length: int) -> Space:
    """The long set: [1, 1.25·S] from the other methods' factors; the short set: [1, S]
    from plain RoPE's (all ones)."""
    pairs = encoding.rotary_dims // 2
    if not long:
        return Space(1.0, max(factor, 1.0), [np.ones(pairs)])
    seeds = [method_factors(encoding, m, factor, length) for m in SEED_METHODS]
    return Space(1.0, LONG_BOUND * max(factor, 1.0), seeds)
