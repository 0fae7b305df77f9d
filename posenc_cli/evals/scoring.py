"""Length extrapolation: perplexity at factor x the training length, on the same held-out tokens.

A comparison across lengths (and across runs) is only fair when every length scores exactly the
same target tokens. So the sample is fixed first, the same for every length and encoding: all of
the held-out text when it fits the budget ``eval.tokens`` (rounded down to a multiple of the
longest length), else blocks of the longest length spread evenly over the whole held-out text,
so that every part of it is represented. Each length then plans windows inside each block that
cover exactly its targets, each once. Target ``t`` is the prediction of ``ids[t + 1]``; a window
starting at ``s`` predicts targets ``s .. s + L - 1``.

Modes: ``nonoverlapping`` tiles the budget with disjoint windows (each token conditioned on its
window prefix); ``sliding`` (Press et al. 2022) starts a window every ``stride`` tokens and scores
only its last ``stride`` targets (the first window scores all), so every later scored token sees
at least ``L - stride`` tokens of context. ``eval.stride=null`` means ``L // 2`` at each length; a
stride above ``L`` is capped at ``L`` (one above every length is refused, config/effect_checks.py).
Sliding with stride ``L`` is nonoverlapping exactly.

Both modes give the targets early in a window little context, and a longer window has fewer of
them: part of what looks like a model getting better with length is that (the early-token
effect, Press et al. 2022, App. B). The ``tail`` protocol (``score_tail``) removes it: the same
chunks of ``L // 2`` targets at every length, each scored as the last targets of a window of
the evaluated length ``n`` that ends with it, so every target has at least ``n - L // 2`` tokens
of context (``L`` the training length) — whatever ``eval.tokens`` is, as the chunks are drawn
from the whole held-out text, after its first ``longest - L // 2`` targets.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from posenc_cli.common.console import console
from posenc_cli.common.errors import PosencError
from posenc_cli.config.schema import ExtrapolationConfig
from posenc_cli.data.batches import windows
from posenc_cli.engine.distributed import shard
from posenc_cli.engine.runtime import Runtime

#: Tokens per forward pass (batch x length): bounds logits and activations at every length.
BATCH_TOKENS = 2048


@dataclass(frozen=True)
class Window:
    """One forward pass over ids[start : start + L] that scores window positions first .. L-1."""

    start: int
    first: int


@dataclass
class LengthResult:
    """Per-target losses of one length; ``targets`` lists the scored target indices (sorted)."""

    length: int
    stride: int
    targets: np.ndarray
    losses: np.ndarray
    seconds: float


def plan_windows(length: int, n_targets: int, stride: int) -> list[Window]:
    """Windows that score targets 0 .. n_targets-1 exactly once (see the module docstring)."""
    if not 1 <= stride <= length <= n_targets:
        raise ValueError(f"need 1 <= stride ({stride}) <= length ({length}) <= {n_targets}")
    plan = [Window(0, 0)]
    done = length
    while done < n_targets:
        end = min(done + stride, n_targets)
        start = end - length
        plan.append(Window(start, done - start))
        done = end
    return plan


def scored_targets(plan: list[Window], length: int) -> np.ndarray:
    """Target indices a plan scores, in the order it scores them."""
    return np.concatenate([np.arange(w.start + w.first, w.start + length) for w in plan])


def window_losses(
    model: nn.Module, ids: np.ndarray, starts: list[int], length: int, rt: Runtime
) -> np.ndarray:
    """Next-token losses (batch, length) in float64; the loss itself is computed in float32."""
    x, y = windows(ids, starts, length, rt.device)
    with rt.autocast():
        logits = model(x)
    loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")
    return loss.view(len(starts), length).double().cpu().numpy()


@torch.no_grad()
def score_length(
    model: nn.Module,
    ids: np.ndarray,
    length: int,
    n_targets: int,
    stride: int,
    rt: Runtime,
    offset: int = 0,
) -> LengthResult:
    """Losses of targets offset .. offset+n_targets-1 with windows of ``length``, batched to
    BATCH_TOKENS. Several ranks score every world_size-th batch each (the batches of one
    process, so each window's losses are the ones it computes) and sum exactly: every target
    has one rank's loss and zeros from the others."""
    t0 = time.perf_counter()
    plan = [Window(offset + w.start, w.first) for w in plan_windows(length, n_targets, stride)]
    losses = np.zeros(n_targets)
    covered = np.zeros(n_targets)
    per_batch = max(1, BATCH_TOKENS // length)
    for k in shard(math.ceil(len(plan) / per_batch), rt.comm):  # whole batches per rank
        batch = plan[k * per_batch : (k + 1) * per_batch]
        rows = window_losses(model, ids, [w.start for w in batch], length, rt)
        for w, row in zip(batch, rows, strict=True):
            a = w.start + w.first - offset
            b = w.start + length - offset
            losses[a:b] = row[w.first :]
            covered[a:b] += 1
    losses = rt.comm.all_sum(losses)
    covered = rt.comm.all_sum(covered)
    assert (covered == 1).all(), "a window plan must score every target exactly once"
    targets = np.sort(scored_targets(plan, length))
    return LengthResult(length, stride, targets, losses, time.perf_counter() - t0)


def score_sample(
    model: nn.Module,
    ids: np.ndarray,
    length: int,
    blocks: list[tuple[int, int]],
    stride: int,
    rt: Runtime,
) -> LengthResult:
    """``score_length`` over every (start, size) block of the sample, concatenated in order."""
    parts = [score_length(model, ids, length, size, stride, rt, start) for start, size in blocks]
    return LengthResult(
        length,
        stride,
        np.concatenate([p.targets for p in parts]),
        np.concatenate([p.losses for p in parts]),
        sum(p.seconds for p in parts),
    )


def tail_chunk(train_length: int) -> int:
    """Targets per chunk of the tail protocol: half the training length, so that at 1x every
    target already has half a training window of context, and past 1x all of them more than L."""
    return max(1, train_length // 2)


def tail_budget(requested: int, scored: int, lengths: list[int], train_length: int) -> int:
    """At most ``requested`` targets, and no more than cost as many forward tokens as the
    nonoverlapping pass over ``scored`` targets at every length does (a tail target at length
    n costs n / (L/2) tokens): the tail never more than doubles an evaluation, however small
    eval.tokens makes it."""
    per_target = sum(L / tail_chunk(train_length) for L in lengths)
    return min(requested, int(scored * len(lengths) / per_target)) if per_target else 0


def tail_ends(available: int, longest: int, chunk: int, budget: int) -> np.ndarray:
    """Exclusive ends of ``budget // chunk`` chunks of ``chunk`` targets (fewer when the text
    is short), on a grid of ``chunk`` from ``longest`` and spread evenly over the held-out
    text: a window of ``longest`` ending with a chunk starts at target 0 or later."""
    if budget < chunk or available < longest:
        return np.zeros(0, dtype=np.int64)
    slots = (available - longest) // chunk + 1
    k = min(budget // chunk, slots)
    return longest + (np.arange(k, dtype=np.int64) * slots // k) * chunk


@torch.no_grad()
def score_tail(
    model: nn.Module, ids: np.ndarray, length: int, ends: np.ndarray, chunk: int, rt: Runtime
) -> LengthResult:
    """Losses of the ``chunk`` targets before each end, each scored by the window of
    ``length`` that ends with it; batched and shared among ranks as ``score_length``."""
    t0 = time.perf_counter()
    starts = [int(e) - length for e in ends]
    losses = np.zeros((len(starts), chunk))
    per_batch = max(1, BATCH_TOKENS // length)
    for k in shard(math.ceil(len(starts) / per_batch), rt.comm):
        batch = slice(k * per_batch, (k + 1) * per_batch)
        losses[batch] = window_losses(model, ids, starts[batch], length, rt)[:, length - chunk :]
    losses = rt.comm.all_sum(losses.reshape(-1))
    targets = (np.asarray(ends, dtype=np.int64)[:, None] - chunk + np.arange(chunk)).reshape(-1)
    return LengthResult(length, chunk, targets, losses, time.perf_counter() - t0)


def sample_blocks(available: int, n: int, longest: int) -> list[tuple[int, int]]:
    """All targets when they fit (one block), else n // longest blocks of ``longest`` targets
    starting at evenly spaced positions over the whole held-out text (never overlapping)."""
    if n == 0:
        return []
    if n >= available // longest * longest:
        return [(0, n)]
    k = n // longest
    spacing = (available - longest) / max(k - 1, 1)
    return [(math.floor(i * spacing), longest) for i in range(k)]


def eval_lengths(train_length: int, factors: Any) -> list[int]:
    return sorted({int(f) * train_length for f in factors})


def token_budget(
    n_ids: int, requested: int, lengths: list[int]
) -> tuple[int, dict[str, str], list[str]]:
    """Targets to score (a multiple of the longest length that fits), skipped lengths, notes."""
    available = max(n_ids - 1, 0)
    usable = min(requested, available)
    skipped: dict[str, str] = {}
    for L in lengths:
        if L > available:
            skipped[str(L)] = (
                f"held-out data has only {n_ids} tokens; one window of {L} needs {L + 1}"
            )
        elif L > requested:
            skipped[str(L)] = f"eval.tokens={requested} is less than one window of {L}"
    fit = [L for L in lengths if str(L) not in skipped]
    n = usable // max(fit) * max(fit) if fit else 0
    return n, skipped, []


def not_applicable(model: nn.Module, length: int) -> str | None:
    """Why the encoding cannot run at ``length`` (e.g. a learned table), or None."""
    encoding = getattr(model, "encoding", None)
    if encoding is None:
        return None
    try:
        encoding.check_length(length)
    except PosencError as exc:
        max_len = getattr(encoding, "max_len", None)
        return f"beyond encoding.max_len={max_len}" if max_len else exc.what
    return None


def stride_for(ev: ExtrapolationConfig, length: int) -> int:
    if ev.mode != "sliding":
        return length
    return length // 2 if ev.stride is None else min(ev.stride, length)


def score_lengths(
    model: nn.Module,
    ids: np.ndarray,
    train_length: int,
    ev: ExtrapolationConfig,
    rt: Runtime,
    prepare: Callable[[int], None] = lambda length: None,
) -> tuple[list[tuple[int, int]], dict[int, LengthResult], dict[str, str], list[str]]:
    """The sample's blocks, per-length results, skipped lengths (with reasons) and notes;
    ``prepare(L)`` readies the model for length L (eval.rope_scaling)."""
    lengths = eval_lengths(train_length, ev.factors)
    n, skipped, notes = token_budget(len(ids), ev.tokens, lengths)
    fit = [L for L in lengths if str(L) not in skipped]
    blocks = sample_blocks(max(len(ids) - 1, 0), n, max(fit, default=1))
    if len(blocks) > 1:
        notes.append(
            f"scored {n:,} of the {len(ids) - 1:,} held-out targets, in {len(blocks)} "
            "windows spread evenly over all of them (eval.tokens is the budget)"
        )
    elif blocks:
        notes.append(
            f"scored all {n:,} held-out targets that fill whole windows of "
            f"{max(fit)} (of {len(ids) - 1:,})"
        )
    results: dict[int, LengthResult] = {}
    for L in lengths:
        if str(L) in skipped:
            continue
        reason = not_applicable(model, L)
        if reason is not None:
            skipped[str(L)] = reason
            continue
        prepare(L)
        results[L] = score_sample(model, ids, L, blocks, stride_for(ev, L), rt)
        console.print(
            f"  eval length {L}: ppl {math.exp(results[L].losses.mean()):.2f} "
            f"({n:,} tokens, {results[L].seconds:.1f} s)",
            highlight=False,
        )
    return blocks, results, skipped, notes
