"""The extrapolation task's result: perplexity by length with bootstrap intervals, the loss by
position and what was scored, assembled from the per-length scores of evals/scoring.py."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from torch import nn

from posenc_cli.engine.runtime import Runtime
from posenc_cli.evals.context_extension import context_extension, rope_scaling_record
from posenc_cli.evals.scoring import (
    LengthResult,
    eval_lengths,
    score_lengths,
    score_sample,
)
from posenc_cli.evals.uncertainty import RESAMPLES, SEED, perplexity_interval, target_groups


def position_curve(
    model: nn.Module,
    ids: np.ndarray,
    results: dict[int, LengthResult],
    blocks: list[tuple[int, int]],
    ev: Any,
    rt: Runtime,
    prepare: Callable[[int], None] = lambda length: None,
) -> dict[str, Any] | None:
    """Mean loss by position inside disjoint windows of the longest scored length, bucketed.

    Position i is the prediction made after seeing i + 1 tokens of the window."""
    if not results:
        return None
    L = max(results)
    losses = results[L].losses
    if ev.mode != "nonoverlapping" or any(size % L for _, size in blocks):
        prepare(L)
        whole = [(start, size // L * L) for start, size in blocks if size >= L]
        losses = score_sample(model, ids, L, whole, L, rt).losses
    per_position = losses.reshape(-1, L).mean(axis=0)
    k = min(max(int(ev.position_buckets), 1), L)
    edges = np.linspace(0, L, k + 1).round().astype(int)
    loss = [float(per_position[a:b].mean()) for a, b in itertools.pairwise(edges)]
    return {"length": L, "bucket_edges": edges.tolist(), "loss": loss}


def intervals(
    ids: np.ndarray, results: dict[int, LengthResult], eot_id: int | None
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """The 95 % bootstrap interval of each length's perplexity, and how it was made."""
    out = {}
    unit = "documents"
    for L, r in results.items():
        order = np.argsort(r.targets, kind="stable")
        groups, unit = target_groups(ids, r.targets[order], eot_id, L)
        out[str(L)] = list(perplexity_interval(r.losses[order], groups))
    how = {"method": f"bootstrap over {unit}", "level": 0.95, "resamples": RESAMPLES, "seed": SEED}
    return out, how


def documents_scored(
    ids: np.ndarray, blocks: list[tuple[int, int]], eot_id: int | None
) -> int | None:
    """How many documents the sample's targets fall in (None without an end-of-text id)."""
    if eot_id is None or not blocks:
        return None
    targets = np.concatenate([np.arange(s, s + n) for s, n in blocks])
    return int(np.unique(np.cumsum(np.asarray(ids[: targets[-1] + 1]) == eot_id)[targets]).size)


def extrapolation(
    model: nn.Module,
    ids: np.ndarray,
    train_length: int,
    ev: Any,
    rt: Runtime,
    eot_id: int | None = None,
) -> dict[str, Any]:
    """The JSON-ready result: ppl (with 95 % intervals) and mean loss by length (None where
    not scored), and more."""
    lengths = eval_lengths(train_length, ev.factors)
    with context_extension(model, ev, train_length, max(lengths)) as prepare:
        blocks, results, skipped, notes = score_lengths(model, ids, train_length, ev, rt, prepare)
        curve = position_curve(model, ids, results, blocks, ev, rt, prepare)
    ci, how = intervals(ids, results, eot_id)
    record = {
        "train_length": train_length,
        "tokens": sum(size for _, size in blocks),
        "val_tokens": len(ids),
        "ppl_ci95": ci,
        "interval": how,
        "skipped": skipped,
        "notes": notes,
        "documents": documents_scored(ids, blocks, eot_id),
        "blocks": len(blocks),
        "loss_by_position": curve,
    }
    return {**length_record(ev, train_length, lengths, results), **record}


def length_record(
    ev: Any, train_length: int, lengths: list[int], results: dict[int, LengthResult]
) -> dict[str, Any]:
    """The settings used and, by length, the loss, perplexity, stride and time scored (a
    stride outside sliding mode, e.g. one a saved config keeps, is recorded as unused)."""
    loss = {str(L): float(results[L].losses.mean()) if L in results else None for L in lengths}
    ppl = {k: math.exp(v) if v is not None else None for k, v in loss.items()}
    factors = sorted({int(f) for f in ev.factors})
    return {
        "mode": str(ev.mode),
        "stride": None if ev.stride is None or ev.mode != "sliding" else int(ev.stride),
        "strides": {str(L): r.stride for L, r in results.items()},
        "factors": factors,
        "lengths": lengths,
        "tokens_requested": int(ev.tokens),
        "ppl": ppl,
        "loss": loss,
        "ppl_by_factor": {str(f): ppl[str(f * train_length)] for f in factors},
        "seconds": {str(L): round(r.seconds, 3) for L, r in results.items()},
        **rope_scaling_record(ev, train_length, lengths),
    }
