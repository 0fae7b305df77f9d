"""LongRoPE's search (evals/longrope_search.py): within its bounds and monotone over the pairs,
never worse than the best method it starts from, on a fixed budget, and the same factors for
the same seed; the extrapolation task searches a missing set and records how."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posenc_cli.evals import longrope_search as search
from posenc_cli.evals.base import get_task
from posenc_cli.evals.longrope_search import (
    GENERATIONS,
    PARENTS,
    POPULATION,
    Space,
    evolve,
    method_factors,
    searched_sets,
)

TRAIN_LEN = 16
#: A monotone optimum inside [1, 5] that no seed below holds.
TARGET = np.array([1.0, 1.3, 1.9, 2.6, 3.4, 4.1, 4.5, 4.9])


def distance(lam: np.ndarray) -> float:
    return float(((lam - TARGET) ** 2).sum())


def seeds() -> list[np.ndarray]:
    return [np.full(8, 4.0), np.linspace(1.0, 4.0, 8)]


def test_evolution_stays_in_its_space_improves_and_repeats_itself() -> None:
    calls: list[np.ndarray] = []

    def fitness(lam: np.ndarray) -> float:
        calls.append(lam)
        return distance(lam)

    space = Space(1.0, 5.0, seeds())
    best, curve = evolve(fitness, space, np.random.default_rng(3))
    assert len(calls) <= POPULATION + GENERATIONS * (POPULATION - PARENTS)
    assert all((np.diff(c) >= 0).all() and c.min() >= 1.0 and c.max() <= 5.0 for c in calls)
    assert len(curve) == GENERATIONS + 1 and curve == sorted(curve, reverse=True)
    assert distance(best) == curve[-1] < min(distance(s) for s in seeds())
    again, _ = evolve(distance, space, np.random.default_rng(3))
    other, _ = evolve(distance, space, np.random.default_rng(4))
    assert np.array_equal(best, again) and not np.array_equal(best, other)


def test_repair_keeps_the_papers_constraint() -> None:
    space = Space(1.0, 4.0, [])
    lam = space.repair(np.array([0.5, 2.0, 1.5, 9.0]))
    assert lam.tolist() == [1.0, 2.0, 2.0, 4.0]


def test_the_first_generation_holds_the_other_methods(config, model_for) -> None:
    enc = model_for(config()).encoding
    E = enc.rotary_dims
    pi = method_factors(enc, "pi", 4.0, TRAIN_LEN)
    ntk = method_factors(enc, "ntk", 4.0, TRAIN_LEN)
    np.testing.assert_allclose(pi, np.full(E // 2, 4.0), rtol=1e-6)
    want = [4.0 ** (2 * k / (E - 2)) for k in range(E // 2)]  # b'^(2k/E) / b^(2k/E)
    np.testing.assert_allclose(ntk, want, rtol=1e-5)
    assert enc.attention_factor == 1.0 and torch.equal(enc.inv_freq, enc.trained_inv_freq.float())


def test_missing_sets_are_searched_and_the_same_seed_finds_the_same(
    config, model_for, val_ids, rt
) -> None:
    cfg = config("eval.factors=[1,4]", "eval.rope_scaling=longrope")
    model = model_for(cfg)
    ev, record = searched_sets(model, val_ids(), TRAIN_LEN, cfg.eval.extrapolation, rt, seed=0)
    assert ev.rope_long_factor is not None and ev.rope_short_factor is not None
    for lam, high in ((ev.rope_long_factor, 5.0), (ev.rope_short_factor, 4.0)):
        assert len(lam) == 8 and lam == sorted(lam) and 1.0 <= min(lam) <= max(lam) <= high
    assert record is not None and record["seed"] == 0 and record["population"] == POPULATION
    assert (
        record["rope_long_factor"]["length"] == 64 and record["rope_short_factor"]["length"] == 16
    )
    again, _ = searched_sets(model, val_ids(), TRAIN_LEN, cfg.eval.extrapolation, rt, seed=0)
    assert again == ev
    assert torch.equal(model.encoding.inv_freq, model.encoding.trained_inv_freq.float())


def test_the_long_set_is_no_worse_than_pi_on_the_searched_windows(
    config, model_for, val_ids, rt
) -> None:
    cfg = config("eval.factors=[1,4]", "eval.rope_scaling=longrope")
    model = model_for(cfg)
    ev, record = searched_sets(model, val_ids(), TRAIN_LEN, cfg.eval.extrapolation, rt, seed=0)
    curve = record["rope_long_factor"]["best_loss_by_generation"]
    run = search.Search(model, val_ids(), TRAIN_LEN, 4.0, rt, np.random.default_rng(0))
    fitness = run.fitness(64)
    assert fitness is not None
    assert fitness(np.array(ev.rope_long_factor)) == pytest.approx(curve[-1], rel=1e-9)
    assert curve[-1] <= fitness(np.full(8, 4.0))  # PI: one of the first generation


def test_a_set_no_length_uses_is_not_searched(config, model_for, val_ids, rt) -> None:
    cfg = config("eval.factors=[1]", "eval.rope_scaling=longrope")
    ev, record = searched_sets(
        model_for(cfg), val_ids(), TRAIN_LEN, cfg.eval.extrapolation, rt, seed=0
    )
    assert ev.rope_long_factor == [1.0] * 8 and record["rope_long_factor"]["searched"] is False
    assert record["rope_short_factor"]["searched"] is True


def test_given_sets_are_not_searched(config, model_for, val_ids, rt) -> None:
    sets = ("eval.rope_long_factor=[1,1,1,1,2,2,2,2]", "eval.rope_short_factor=[1,1,1,1,1,1,1,1]")
    cfg = config("eval.rope_scaling=longrope", *sets)
    ev = cfg.eval.extrapolation
    assert searched_sets(model_for(cfg), val_ids(), TRAIN_LEN, ev, rt, seed=0) == (ev, None)


def test_the_task_records_the_search(config, model_for, token_data, rt) -> None:
    cfg = config("eval.factors=[1,2]", "eval.rope_scaling=longrope", "seed=5")
    result = get_task("extrapolation").run(model_for(cfg), token_data(), cfg, rt)
    assert result["rope_search"]["seed"] == 5
    assert result["rope_long_factor"] == sorted(result["rope_long_factor"])
    assert any("searched" in note for note in result["notes"])
    assert math.isfinite(result["ppl"]["32"])
