"""Passkey training windows: L + 1 tokens laid out as the retrieval evaluation's instances (the
sentence once, at the depth drawn; the question and the key's digits at the end), a function
of the generator alone, and several ranks' slices partition the global batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models

from posenc_cli.common.errors import PosencError
from posenc_cli.data.passkey_text import KEY_DIGITS
from posenc_cli.data.passkey_windows import (
    IGNORE,
    PasskeyText,
    check_count,
    draw,
    passkey_batch,
    passkey_count,
    passkey_rows,
    passkey_text,
)
from posenc_cli.data.tokenizer import train_tokenizer

TEXT = "the cat sat on the mat and the dog ran to the park. " * 40 + "0123456789 " * 20
VOCAB = 300
L = 64


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(iter([TEXT]), VOCAB)


@pytest.fixture(scope="module")
def text(tokenizer: Tokenizer) -> PasskeyText:
    return passkey_text(tokenizer, "test", L)


@pytest.fixture(scope="module")
def ids() -> np.ndarray:
    return np.random.default_rng(0).integers(0, VOCAB, 4000).astype(np.uint16)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def occurrences(row: list[int], part: list[int]) -> list[int]:
    return [i for i in range(len(row) - len(part) + 1) if row[i : i + len(part)] == part]


def test_a_window_is_the_text_with_the_sentence_at_its_depth_then_question_and_answer(
    ids: np.ndarray, text: PasskeyText
) -> None:
    rows, draws = passkey_rows(ids, text, 32, L, gen())
    assert rows.shape == (32, L + 1) and rows.dtype == np.int64
    room = L + 1 - text.overhead
    for row, d in zip(rows.tolist(), draws, strict=True):
        sentence, question, answer = text.parts(d.key)
        assert len(d.key) == KEY_DIGITS and d.key.isdigit()
        assert answer == [text.digits[int(c)] for c in d.key]
        assert row[-len(question) - KEY_DIGITS :] == [*question, *answer]  # ends at the key
        assert occurrences(row, sentence) == [d.at]  # once, at the depth drawn
        stretch = ids[d.start : d.start + room].tolist()
        assert row[: d.at] == stretch[: d.at]
        assert row[d.at + len(sentence) : -len(question) - KEY_DIGITS] == stretch[d.at :]


def test_depths_cover_the_whole_stretch_and_keys_vary(ids: np.ndarray) -> None:
    draws = draw(len(ids), 5, 600, gen())
    assert {d.at for d in draws} == set(range(6))  # before the first token … after the last
    assert len({d.key for d in draws}) > 500
    assert all(0 <= d.start <= len(ids) - 5 for d in draws)
    assert max(d.start for d in draw(10, 5, 200, gen())) == 5  # the last stretch is reachable


def test_the_batch_is_inputs_and_the_key_digits_as_the_only_targets(
    ids: np.ndarray, text: PasskeyText
) -> None:
    x, y = passkey_batch(ids, text, 4, L, gen(3))
    rows, draws = passkey_rows(ids, text, 4, L, gen(3))
    assert x.shape == y.shape == (4, L) and x.dtype == torch.int64
    torch.testing.assert_close(x, torch.from_numpy(rows[:, :-1]))
    torch.testing.assert_close(y[:, -KEY_DIGITS:], torch.from_numpy(rows[:, -KEY_DIGITS:]))
    assert (y[:, :-KEY_DIGITS] == IGNORE).all()  # the loss reads the key's digits only
    for target, d in zip(y.tolist(), draws, strict=True):
        assert target[-KEY_DIGITS:] == text.parts(d.key)[2]


def test_the_same_generator_seed_gives_the_same_windows(ids: np.ndarray, text: PasskeyText) -> None:
    first, _ = passkey_rows(ids, text, 8, L, gen(7))
    assert np.array_equal(first, passkey_rows(ids, text, 8, L, gen(7))[0])
    assert not np.array_equal(first, passkey_rows(ids, text, 8, L, gen(8))[0])


def test_the_ranks_slices_partition_the_global_batch(ids: np.ndarray, text: PasskeyText) -> None:
    whole, _ = passkey_rows(ids, text, 6, L, gen(1))
    slices = [passkey_rows(ids, text, 2, L, gen(1), rank, 3)[0] for rank in range(3)]
    assert np.array_equal(np.concatenate(slices), whole)


@pytest.mark.parametrize(
    ("share", "batch", "count"),
    [(0.0, 8, 0), (0.5, 8, 4), (1.0, 8, 8), (0.25, 4, 1), (0.5, 3, 2), (0.5, 1, 1), (0.3, 5, 2)],
)
def test_the_count_is_share_times_batch_rounded_halves_up(
    share: float, batch: int, count: int
) -> None:
    assert passkey_count(share, batch) == count == check_count(share, batch)


def test_a_share_that_rounds_to_no_window_is_refused() -> None:
    with pytest.raises(PosencError, match=r"extend.passkey_share=0.1 of a batch of 4 windows"):
        check_count(0.1, 4)


def test_a_tokenizer_without_a_token_per_digit_is_refused() -> None:
    words = Tokenizer(models.WordLevel({"the": 0, "pass": 1, "[UNK]": 2}, unk_token="[UNK]"))
    with pytest.raises(PosencError, match="has no token of its own for each digit"):
        passkey_text(words, str(Path("words.json")), L)


def test_a_length_without_room_for_text_is_refused(tokenizer: Tokenizer, text: PasskeyText) -> None:
    with pytest.raises(PosencError, match=f"take {text.overhead} tokens"):
        passkey_text(tokenizer, "test", text.overhead)
    assert passkey_text(tokenizer, "test", text.overhead + 1).overhead == text.overhead


def test_the_skipped_target_is_the_one_the_loss_and_the_tasks_skip() -> None:
    from posenc_cli.synthetic.batches import IGNORE as TASKS_IGNORE

    logits = torch.randn(3, 7)
    assert IGNORE == TASKS_IGNORE
    assert torch.nn.functional.cross_entropy(logits, torch.tensor([IGNORE, 2, IGNORE])) == (
        torch.nn.functional.cross_entropy(logits[1:2], torch.tensor([2]))
    )
