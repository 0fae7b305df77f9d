"""Length-extrapolation scoring: the same tokens at every length, both modes."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from posenc_cli.config.run_config import RunConfig
from posenc_cli.evals.extrapolation_result import extrapolation
from posenc_cli.evals.scoring import (
    Window,
    plan_windows,
    sample_blocks,
    score_length,
    score_lengths,
    scored_targets,
)

TRAIN_LEN = 16  # train.context_length of the configs (tests/unit/evals/conftest.py)


@pytest.fixture
def run(model_for, val_ids, rt):
    """run(cfg, ids=None, seed=0): the extrapolation result of a fresh model of cfg."""

    def evaluate(cfg: RunConfig, ids: np.ndarray | None = None, seed: int = 0) -> dict:
        ids = val_ids() if ids is None else ids
        assert cfg.train.context_length == TRAIN_LEN
        return extrapolation(model_for(cfg, seed), ids, TRAIN_LEN, cfg.eval.extrapolation, rt)

    return evaluate


def test_ppl_at_1x_is_exp_of_the_mean_loss_on_the_same_tokens(
    config, run, model_for, val_ids
) -> None:
    cfg = config()
    result = run(cfg)
    ids = torch.from_numpy(val_ids().astype(np.int64))
    n = result["tokens"]
    assert n == 512
    blocks = sample_blocks(len(ids) - 1, n, 16 * TRAIN_LEN)  # the sample: spread-out blocks
    x = torch.cat([ids[s : s + size].view(-1, TRAIN_LEN) for s, size in blocks])
    y = torch.cat([ids[s + 1 : s + size + 1].view(-1, TRAIN_LEN) for s, size in blocks])
    with torch.no_grad():
        logits = model_for(cfg)(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
    assert result["ppl"][str(TRAIN_LEN)] == pytest.approx(np.exp(loss), rel=1e-5)
    assert result["loss"][str(TRAIN_LEN)] == pytest.approx(loss, rel=1e-5)


@pytest.mark.parametrize("mode", ["eval.mode=nonoverlapping", "eval.mode=sliding eval.stride=5"])
def test_every_length_scores_exactly_the_same_targets(
    mode: str, config, model_for, val_ids, rt
) -> None:
    cfg = config(*mode.split(), "eval.factors=[1,3,4,16]")
    blocks, results, skipped, _ = score_lengths(
        model_for(cfg), val_ids(), TRAIN_LEN, cfg.eval.extrapolation, rt
    )
    sample = np.concatenate([np.arange(s, s + size) for s, size in blocks])
    assert not skipped and sample.size == 512 and sorted(results) == [16, 48, 64, 256]
    for r in results.values():
        assert np.array_equal(np.sort(r.targets), sample)


def test_the_sample_is_everything_that_fits_else_spread_over_all_of_it() -> None:
    assert sample_blocks(10_000, 9_984, 256) == [(0, 9_984)]
    blocks = sample_blocks(10_000, 1_024, 256)
    assert [size for _, size in blocks] == [256] * 4
    starts = [s for s, _ in blocks]
    assert starts[0] == 0 and starts[-1] == 10_000 - 256
    assert all(b - a >= 256 for a, b in pairwise(starts))  # disjoint, evenly spread


def test_the_default_budget_scores_every_held_out_document(config, run, val_ids) -> None:
    ids = val_ids()
    result = run(config("eval.tokens=262144"), ids)
    assert result["blocks"] == 1 and result["tokens"] == (len(ids) - 1) // 256 * 256
    assert result["documents"] is None or result["documents"] >= 1


def test_window_plans_cover_each_target_once() -> None:
    for n in range(1, 30):
        for length in range(1, n + 1):
            for stride in range(1, length + 1):
                got = scored_targets(plan_windows(length, n, stride), length)
                assert np.array_equal(np.sort(got), np.arange(n)) and len(got) == n


def test_sliding_with_stride_equal_to_length_is_nonoverlapping(config, run) -> None:
    plain = run(config())
    # eval.stride is capped at each length, so the longest length as the stride means stride = L
    # at every length (a stride above every length is refused: config/effect_checks.py).
    sliding = run(config("eval.mode=sliding", f"eval.stride={16 * TRAIN_LEN}"))
    assert sliding["ppl"] == plain["ppl"] and sliding["loss"] == plain["loss"]
    assert sliding["loss_by_position"] == plain["loss_by_position"]
    assert plan_windows(64, 512, 64) == [Window(s, 0) for s in range(0, 512, 64)]


def test_sliding_with_a_smaller_stride_differs_and_keeps_context(config, run) -> None:
    plain = run(config())
    sliding = run(config("eval.mode=sliding", "eval.stride=8"))
    assert sliding["tokens"] == plain["tokens"]
    assert sliding["ppl"][str(TRAIN_LEN)] != plain["ppl"][str(TRAIN_LEN)]
    for length in (16, 64, 256):
        plan = plan_windows(length, 512, 8)
        assert plan[0].first == 0
        assert all(w.first >= length - 8 for w in plan[1:])  # context = first + 1 tokens


def test_default_sliding_stride_is_half_the_length(config, run) -> None:
    result = run(config("eval.mode=sliding"))
    assert result["strides"] == {str(L): L // 2 for L in result["lengths"]}


def test_loss_by_position_has_the_requested_buckets(config, run) -> None:
    result = run(config("eval.position_buckets=8"))
    curve = result["loss_by_position"]
    assert curve["length"] == 256 and len(curve["loss"]) == 8
    assert curve["bucket_edges"] == list(range(0, 257, 32))
    assert np.mean(curve["loss"]) == pytest.approx(result["loss"]["256"], rel=1e-9)
    sliding = run(config("eval.position_buckets=8", "eval.mode=sliding", "eval.stride=8"))
    assert sliding["loss_by_position"] == curve


def test_learned_beyond_max_len_is_not_applicable(config, run) -> None:
    cfg = config("encoding=learned", "encoding.max_len=32")
    result = run(cfg)
    assert result["ppl"]["32"] is not None and result["ppl"]["64"] is None
    assert result["ppl"]["256"] is None and "beyond encoding.max_len" in result["skipped"]["256"]
    assert result["tokens"] == 512 and result["loss_by_position"]["length"] == 32


def test_short_held_out_data_is_reported_not_fatal(config, run, val_ids) -> None:
    result = run(config("eval.tokens=4096"), ids=val_ids(200))
    assert result["tokens"] == 128 and result["ppl"]["256"] is None
    assert "held-out data has only 200 tokens" in result["skipped"]["256"]
    assert result["notes"] and result["ppl"]["128"] is not None


def test_evaluation_is_deterministic(config, run, model_for, val_ids, rt) -> None:
    cfg = config("eval.mode=sliding", "eval.stride=8")
    first = run(cfg)
    second = run(cfg)
    for result in (first, second):  # wall times, the only part that may differ
        result.pop("seconds"), result["tail"].pop("seconds")
    assert first == second
    model = model_for(cfg)
    a = score_length(model, val_ids(), 64, 512, 8, rt)
    b = score_length(model, val_ids(), 64, 512, 8, rt)
    assert np.array_equal(a.losses, b.losses)
