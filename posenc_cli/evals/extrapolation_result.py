"""The extrapolation task's result: perplexity by length with bootstrap intervals, for
eval.mode and for the tail protocol, the loss by position, what was scored and its per-unit
record, assembled from the per-length scores of evals/scoring.py."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from torch import nn

from posenc_cli.common.console import console
from posenc_cli.config.schema import ExtrapolationConfig
from posenc_cli.engine.runtime import Runtime
from posenc_cli.evals.base import RECORDS
from posenc_cli.evals.context_extension import context_extension, rope_scaling_record
from posenc_cli.evals.keys import TAIL, protocol
from posenc_cli.evals.paired import paired_difference
from posenc_cli.evals.scoring import (
    LengthResult,
    eval_lengths,
    not_applicable,
    score_lengths,
    score_sample,
    score_tail,
    tail_budget,
    tail_chunk,
    tail_ends,
)
from posenc_cli.evals.uncertainty import RESAMPLES, SEED, perplexity_interval
from posenc_cli.evals.units import (
    UNITS_FILE,
    UnitSums,
    targets_digest,
    unit_sums,
    units_csv,
)


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
    k = min(max(ev.position_buckets, 1), L)
    edges = np.linspace(0, L, k + 1).round().astype(int)
    loss = [float(per_position[a:b].mean()) for a, b in itertools.pairwise(edges)]
    return {"length": L, "bucket_edges": edges.tolist(), "loss": loss}


def unit_size(ev: ExtrapolationConfig, train_length: int) -> int:
    """eval.extrapolation.unit_tokens, by default the training length."""
    return train_length if ev.unit_tokens is None else ev.unit_tokens


def intervals(units: dict[int, UnitSums]) -> dict[str, list[float]]:
    """The 95 % bootstrap interval of each length's perplexity over its units."""
    return {str(L): list(perplexity_interval(u.loss_sum, u.targets)) for L, u in units.items()}


def interval_method(unit_tokens: int) -> dict[str, Any]:
    """How the intervals were made, as the result records it."""
    return {
        "method": f"bootstrap over units of {unit_tokens} targets (blocks inside documents)",
        "level": 0.95,
        "resamples": RESAMPLES,
        "seed": SEED,
    }


def documents_scored(
    ids: np.ndarray, blocks: list[tuple[int, int]], eot_id: int | None
) -> int | None:
    """How many documents the sample's targets fall in (None without an end-of-text id)."""
    if eot_id is None or not blocks:
        return None
    targets = np.concatenate([np.arange(s, s + n) for s, n in blocks])
    return int(np.unique(np.cumsum(np.asarray(ids[: targets[-1] + 1]) == eot_id)[targets]).size)


def tail_scores(
    model: nn.Module,
    ids: np.ndarray,
    train_length: int,
    lengths: list[int],
    ev: Any,
    rt: Runtime,
    prepare: Callable[[int], None],
    scored: int,
) -> tuple[int, dict[int, LengthResult]]:
    """The tail protocol (evals/scoring.py) at every length the data holds and the model can
    run, on at most as many forward tokens as the ``scored`` targets of eval.mode: the chunk
    size and each length's result."""
    fit = [L for L in lengths if L <= len(ids) - 1]  # eval.tokens limits only the budget
    chunk = tail_chunk(train_length)
    budget = tail_budget(ev.tail_targets, scored, fit, train_length)
    ends = tail_ends(max(len(ids) - 1, 0), max(fit, default=0), chunk, budget)
    results: dict[int, LengthResult] = {}
    if ends.size == 0:
        return chunk, results
    for L in fit:
        if not_applicable(model, L) is None:
            prepare(L)
            results[L] = score_tail(model, ids, L, ends, chunk, rt)
            console.print(
                f"  eval length {L}, tail: ppl {math.exp(results[L].losses.mean()):.2f} "
                f"({results[L].losses.size:,} tokens, {results[L].seconds:.1f} s)",
                highlight=False,
            )
    return chunk, results


def tail_record(
    ids: np.ndarray,
    lengths: list[int],
    train_length: int,
    chunk: int,
    results: dict[int, LengthResult],
    all_units: dict[tuple[str, int], UnitSums],
) -> dict[str, Any]:
    """The tail protocol's result: ppl, loss and interval by length, the minimum context, and
    what context beyond the training length changes on the same targets."""
    units = {L: all_units[TAIL, L] for L in results}
    loss = {str(L): float(results[L].losses.mean()) if L in results else None for L in lengths}
    first = next(iter(results.values()), None)
    return {
        "chunk": chunk,
        "targets": 0 if first is None else int(first.targets.size),
        "targets_sha256": None if first is None else targets_digest(ids, first.targets),
        "min_context": {str(L): L - chunk for L in results},
        "loss": loss,
        "ppl": {k: math.exp(v) if v is not None else None for k, v in loss.items()},
        "ppl_ci95": intervals(units),
        "seconds": {str(L): round(r.seconds, 3) for L, r in results.items()},
        "beyond_train_length": beyond_train_length(train_length, units),
    }


def beyond_train_length(train_length: int, units: dict[int, UnitSums]) -> dict[str, Any]:
    """Per length n > L, the tail targets' mean loss with n tokens of window (every one of them
    has more than L of context) minus their loss with L (each has L // 2 to L - 1): below zero,
    the model uses context beyond its training length; a 95 % interval paired over units."""
    if train_length not in units:
        return {}
    within = units[train_length]
    out = {}
    for L, beyond in sorted(units.items()):
        if L > train_length:
            d = paired_difference([beyond], [within], TAIL, TAIL)
            out[str(L)] = {
                "loss_within": float(within.loss_sum.sum() / within.targets.sum()),
                "loss_beyond": float(beyond.loss_sum.sum() / beyond.targets.sum()),
                "difference": d.ratio,
                "ci95": [d.lo, d.hi],
            }
    return out


def by_unit(
    ids: np.ndarray,
    protocols: dict[str, dict[int, LengthResult]],
    eot_id: int | None,
    unit_tokens: int,
) -> dict[tuple[str, int], UnitSums]:
    """Every protocol and length's losses summed by unit (evals/units.py), computed once for
    the intervals, the loss change beyond L and units.csv."""
    return {
        (name, L): unit_sums(ids, r.targets, r.losses, eot_id, unit_tokens)
        for name, results in protocols.items()
        for L, r in results.items()
    }


def extrapolation(
    model: nn.Module,
    ids: np.ndarray,
    train_length: int,
    ev: Any,
    rt: Runtime,
    eot_id: int | None = None,
) -> dict[str, Any]:
    """The JSON-ready result: ppl (with 95 % intervals) and mean loss by length (None where
    not scored) for eval.mode and for the tail protocol, and more; its per-unit record, for
    the caller to write beside it, under RECORDS."""
    lengths = eval_lengths(train_length, ev.factors)
    unit_tokens = unit_size(ev, train_length)
    with context_extension(model, ev, train_length, max(lengths)) as prepare:
        blocks, results, skipped, notes = score_lengths(model, ids, train_length, ev, rt, prepare)
        curve = position_curve(model, ids, results, blocks, ev, rt, prepare)
        scored = sum(size for _, size in blocks)
        chunk, tail = tail_scores(model, ids, train_length, lengths, ev, rt, prepare, scored)
    units = by_unit(ids, {protocol(ev): results, TAIL: tail}, eot_id, unit_tokens)
    first = next(iter(results.values()), None)
    record = {
        "train_length": train_length,
        "tokens": scored,
        "val_tokens": len(ids),
        "ppl_ci95": intervals({L: units[protocol(ev), L] for L in results}),
        "interval": interval_method(unit_tokens),
        "unit_tokens": unit_tokens,
        "targets_sha256": None if first is None else targets_digest(ids, first.targets),
        "skipped": skipped,
        "notes": notes,
        "documents": documents_scored(ids, blocks, eot_id),
        "blocks": len(blocks),
        "loss_by_position": curve,
        "tail": tail_record(ids, lengths, train_length, chunk, tail, units),
        RECORDS: {UNITS_FILE: units_csv(units)},
    }
    return {**length_record(ev, train_length, lengths, results), **record}


def length_record(
    ev: Any, train_length: int, lengths: list[int], results: dict[int, LengthResult]
) -> dict[str, Any]:
    """The settings used and, by length, the loss, perplexity, stride and time scored (a
    stride outside sliding mode, e.g. one a saved config keeps, is recorded as unused)."""
    loss = {str(L): float(results[L].losses.mean()) if L in results else None for L in lengths}
    ppl = {k: math.exp(v) if v is not None else None for k, v in loss.items()}
    factors = sorted(set(ev.factors))
    return {
        "mode": ev.mode,
        "stride": None if ev.stride is None or ev.mode != "sliding" else ev.stride,
        "strides": {str(L): r.stride for L, r in results.items()},
        "factors": factors,
        "lengths": lengths,
        "tokens_requested": ev.tokens,
        "ppl": ppl,
        "loss": loss,
        "ppl_by_factor": {str(f): ppl[str(f * train_length)] for f in factors},
        "seconds": {str(L): round(r.seconds, 3) for L, r in results.items()},
        **rope_scaling_record(ev, train_length, lengths),
    }
