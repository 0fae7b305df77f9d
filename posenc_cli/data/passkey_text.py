"""The passkey's words, shared by the retrieval evaluation and passkey fine-tuning: a key of
KEY_DIGITS digits stated once ("the pass key is 71432. remember it.") and asked for at the end
("the pass key is"). Each digit is written as the tokenizer's own token for it, so every key
has the same KEY_DIGITS answer positions, whatever the digits."""

from __future__ import annotations

from collections.abc import Callable

QUESTION = " the pass key is"
REMEMBER = ". remember it."
KEY_DIGITS = 5


def digit_ids(token_id: Callable[[str], int | None]) -> list[int] | None:
    """The tokenizer's own ids of the digits 0-9 (``token_id``: a token's id or None), or None
    if one is missing: a byte-level tokenizer has them all."""
    ids = [i for d in range(10) if (i := token_id(str(d))) is not None]
    return ids if len(set(ids)) == 10 else None


def key_tokens(
    encode: Callable[[str], list[int]], digits: list[int], key: str
) -> tuple[list[int], list[int], list[int]]:
    """The sentence, the question and the answer (one digit token per digit) as token ids."""
    question = encode(QUESTION) + encode(" ")[-1:]  # the space before the digits, if a token
    answer = [digits[int(c)] for c in key]
    return [*question, *answer, *encode(REMEMBER)], question, answer
