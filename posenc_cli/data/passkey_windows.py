"""Passkey training windows (extend.passkey_share): a small language model trained on text alone
scores at chance on passkey retrieval (evals/tasks/retrieval.py), so that evaluation cannot
tell its encodings apart; a short fine-tune on windows laid out as its instances teaches the
task. A passkey window is scored on the key's digits only: with the loss on every token, the
five answer targets are 4 % of a 128-token window, and 1,500 steps of such windows left the
quick model guessing the digits (2.34 nats on them; ln 10 = 2.30), while 1,000 steps on the
digits alone reached 37 % digit accuracy (rope, seed 0, docs/results/retrieval.md).

A window of L + 1 tokens (x: the first L, y: the same shifted by one) is a stretch of training
text with the key sentence ("the pass key is 71432. remember it.") at a uniformly random depth,
ending exactly at the key's last digit: text[:at] + sentence + text[at:] + question + answer,
the retrieval evaluation's layout. Each window has its own random five-digit key. Keys,
stretches and depths come from the step's generator; with several ranks every rank draws the
global batch and keeps its slice, as get_batch does (data/batches.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch
from tokenizers import Tokenizer

from posenc_cli.common.errors import PosencError
from posenc_cli.data.batches import to_device
from posenc_cli.data.passkey_text import KEY_DIGITS, digit_ids, key_tokens

#: The target the loss skips (F.cross_entropy's default ignore_index; synthetic tasks' IGNORE).
IGNORE = -100


@dataclass(frozen=True)
class PasskeyText:
    """What every window is built from: the tokenizer's encoding and its ids of the digits."""

    encode: Callable[[str], list[int]]
    digits: list[int]

    def parts(self, key: str) -> tuple[list[int], list[int], list[int]]:
        """The sentence, the question and the answer of ``key``, as the evaluation writes them."""
        return key_tokens(self.encode, self.digits, key)

    @property
    def overhead(self) -> int:
        """The tokens of a window that are not text: the same for every key (a token a digit)."""
        return sum(map(len, self.parts("0" * KEY_DIGITS)))


@dataclass(frozen=True)
class Draw:
    """One window's random choices: its key, where its stretch of text starts in the ids, and
    how many tokens of that stretch precede the sentence (0 … the stretch's length)."""

    key: str
    start: int
    at: int


def passkey_count(share: float, batch_size: int) -> int:
    """Passkey windows per step: share x batch_size to the nearest whole number (halves up),
    the same every step."""
    return math.floor(share * batch_size + 0.5)


def check_count(share: float, batch_size: int) -> int:
    """passkey_count, refused when a share > 0 would give no passkey window at all."""
    count = passkey_count(share, batch_size)
    if share > 0 and count == 0:
        raise PosencError(
            f"extend.passkey_share={share:g} of a batch of {batch_size} windows is no passkey "
            "window per step",
            f"use extend.passkey_share >= {0.5 / batch_size:.3g} (one window of the batch), or 0",
        )
    return count


def passkey_text(tokenizer: Tokenizer, where: str, context_length: int) -> PasskeyText:
    """The tokenizer's passkey text, checked: a token of its own for each digit (the
    evaluation's answer positions), and windows of ``context_length`` with room for text."""
    digits = digit_ids(tokenizer.token_to_id)
    if digits is None:
        raise PosencError(
            f"the tokenizer {where} has no token of its own for each digit, so a passkey "
            "window cannot write its key",
            "use extend.passkey_share=0 (the retrieval evaluation skips such a tokenizer too)",
        )

    @cache
    def encode(text: str) -> list[int]:  # the same few strings, every window
        return list(tokenizer.encode(text).ids)

    text = PasskeyText(encode, digits)
    if text.overhead >= context_length:
        raise PosencError(
            f"train.context_length={context_length} leaves no room for text in a passkey window "
            f"(the key sentence, question and answer take {text.overhead} tokens)",
            f"train at more than {text.overhead} tokens (for `posenc extend`: the parent's length "
            "x extend.factor), or use extend.passkey_share=0",
        )
    return text


def draw(n_ids: int, room: int, count: int, generator: torch.Generator) -> list[Draw]:
    """``count`` windows' keys, stretches of ``room`` tokens of ``n_ids`` and depths."""
    keys = torch.randint(0, 10, (count, KEY_DIGITS), generator=generator).tolist()
    starts = torch.randint(0, n_ids - room + 1, (count,), generator=generator).tolist()
    depths = torch.randint(0, room + 1, (count,), generator=generator).tolist()
    return [Draw("".join(map(str, k)), s, a) for k, s, a in zip(keys, starts, depths, strict=True)]


def window(ids: np.ndarray, text: PasskeyText, d: Draw, room: int) -> list[int]:
    """One window: the stretch with the sentence at its depth, then the question and answer."""
    sentence, question, answer = text.parts(d.key)
    stretch = [int(t) for t in ids[d.start : d.start + room]]
    return [*stretch[: d.at], *sentence, *stretch[d.at :], *question, *answer]


def passkey_rows(
    ids: np.ndarray,
    text: PasskeyText,
    count: int,
    context_length: int,
    generator: torch.Generator,
    rank: int = 0,
    world_size: int = 1,
) -> tuple[np.ndarray, list[Draw]]:
    """This rank's ``count`` windows of context_length + 1 tokens (count x world_size drawn,
    this rank's slice kept) and their draws."""
    room = context_length + 1 - text.overhead
    mine = draw(len(ids), room, count * world_size, generator)[rank * count : (rank + 1) * count]
    rows = [window(ids, text, d, room) for d in mine]
    return np.array(rows, dtype=np.int64).reshape(count, context_length + 1), mine


def passkey_batch(
    ids: np.ndarray,
    text: PasskeyText,
    count: int,
    context_length: int,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
    rank: int = 0,
    world_size: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets of this rank's passkey windows, as get_batch gives them."""
    rows, _ = passkey_rows(ids, text, count, context_length, generator, rank, world_size)
    xy = torch.from_numpy(rows)
    y = xy[:, 1:].clone()
    y[:, :-KEY_DIGITS] = IGNORE  # the loss reads the key's digits only
    return to_device(xy[:, :-1], y, device)
