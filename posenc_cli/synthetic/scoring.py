"""Exact match and per-token accuracy on the answer tokens, and the answer-only loss."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc_cli.synthetic.base import Instance
from posenc_cli.synthetic.batches import IGNORE, collate

#: Tokens per forward (batch x length) when scoring.
BATCH_TOKENS = 16_384


@dataclass(frozen=True)
class AnswerScore:
    instances: int
    exact: int  # instances whose every answer token was the argmax
    tokens: int
    correct_tokens: int
    #: Whether each instance (in the order given) was an exact match: what a paired
    #: comparison of two runs on the same instances resamples.
    exact_by_instance: tuple[bool, ...] = ()

    @property
    def exact_match(self) -> float:
        return self.exact / self.instances

    @property
    def token_accuracy(self) -> float:
        return self.correct_tokens / self.tokens


def _chunks(instances: list[Instance]) -> list[list[Instance]]:
    width = max(len(i.tokens) for i in instances)
    step = max(1, BATCH_TOKENS // width)
    return [instances[a : a + step] for a in range(0, len(instances), step)]


@torch.no_grad()
def score_answers(
    model: Callable[[Tensor], Tensor],
    instances: list[Instance],
    device: torch.device | str = "cpu",
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> AnswerScore:
    """Teacher-forced argmax at every answer position, counted per instance and per token."""
    tokens = correct = 0
    by_instance: list[bool] = []
    for part in _chunks(instances):
        x, y = collate(part, device)
        with autocast():
            logits = model(x)
        hit = (logits.argmax(-1) == y) | (y == IGNORE)
        answers = y != IGNORE
        by_instance += hit.all(-1).tolist()
        tokens += int(answers.sum())
        correct += int((hit & answers).sum())
    return AnswerScore(len(instances), sum(by_instance), tokens, correct, tuple(by_instance))


@torch.no_grad()
def answer_loss(
    model: Callable[[Tensor], Tensor],
    instances: list[Instance],
    device: torch.device | str = "cpu",
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> float:
    """Mean cross-entropy over the answer tokens of ``instances``."""
    total = 0.0
    count = 0
    for part in _chunks(instances):
        x, y = collate(part, device)
        with autocast():
            logits = model(x)
        total += float(F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum"))
        count += int((y != IGNORE).sum())
    return total / max(count, 1)
