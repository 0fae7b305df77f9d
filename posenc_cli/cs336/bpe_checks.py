"""Foreign BPE files checked as strictly as checkpoints, each violation one line naming the file
and the first offending entry: a tokenizer built from inconsistent files either cannot be
loaded later or encodes to ids the model never learned, and the error then blames something
else (the data cache, the evaluation)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from posenc_cli.common.errors import PosencError
from posenc_cli.cs336.gpt2_bytes import to_bytes

#: Merges whose result is encoded back as a check that the tokenizer gives the file's ids.
ROUND_TRIP_MERGES = 512


def _bad(path: Path, what: str, fix: str = "give the files your BPE training wrote") -> None:
    raise PosencError(f"'{path}': {what}", fix)


def unique_pairs(pairs: Iterable[tuple[Any, Any]], path: Path) -> dict[str, int]:
    """vocab.json's object read pair by pair, so a token given twice is seen."""
    vocab: dict[str, int] = {}
    for token, token_id in pairs:
        if token in vocab:
            _bad(path, f"the token {token!r} appears twice")
        vocab[token] = token_id
    return vocab


def check_vocab(vocab: dict[str, Any], path: Path) -> dict[str, int]:
    """Ids are integers (not booleans), unique, and contiguous from 0."""
    by_id: dict[int, str] = {}
    for token, token_id in vocab.items():
        if isinstance(token_id, bool) or not isinstance(token_id, int):
            _bad(path, f"the id of {token!r} is {token_id!r}, not an integer")
        if token_id in by_id:
            _bad(path, f"the tokens {by_id[token_id]!r} and {token!r} share the id {token_id}")
        by_id[token_id] = token
    missing = next((i for i in range(len(by_id)) if i not in by_id), None)
    if missing is not None:
        beyond = next(i for i in sorted(by_id) if not 0 <= i < len(by_id))
        _bad(
            path,
            f"the ids are not contiguous from 0: {missing} is missing but "
            f"{by_id[beyond]!r} has the id {beyond}",
        )
    return dict(vocab)


def check_merges(
    merges: list[tuple[str, str]], vocab: dict[str, int], specials: list[str], path: Path
) -> None:
    """Every merge's parts and result are tokens; a vocabulary of merged tokens has merges
    (without them the tokenizer would silently encode byte by byte)."""
    for n, (a, b) in enumerate(merges, 1):
        for part in (a, b, a + b):
            if part not in vocab:
                _bad(
                    path,
                    f"merge {n} ({a!r} {b!r}) uses {part!r}, which is not in the vocabulary",
                    "give the vocab and merges files of one tokenizer",
                )
    merged = next((t for t in vocab if len(t) > 1 and t not in specials), None)
    if not merges and merged is not None:
        _bad(
            path,
            f"there are no merges, yet the vocabulary holds merged tokens such as "
            f"{merged!r}: every text would be encoded byte by byte",
            "give the merges file of this vocabulary",
        )


def check_round_trip(
    tok: Tokenizer, vocab: dict[str, int], merges: list[tuple[str, str]], sample: str, path: Path
) -> None:
    """Sample text decodes to itself, and merged tokens encode to the vocabulary's own ids."""
    if tok.decode(tok.encode(sample).ids, skip_special_tokens=False) != sample:
        _bad(path, "the tokenizer does not reproduce sample text")
    for n, (a, b) in enumerate(merges[:ROUND_TRIP_MERGES], 1):
        try:
            text = to_bytes(a + b).decode("utf-8")
        except (UnicodeDecodeError, KeyError):  # a part of a multi-byte character
            continue
        ids = tok.encode(text, add_special_tokens=False).ids
        if len(text.split()) <= 1 and ids != [vocab[a + b]]:
            _bad(
                path,
                f"merge {n} ({a!r} {b!r}) encodes to ids {ids}, not to its token's id "
                f"{vocab[a + b]}",
                "give the merges in the order your BPE learned them",
            )


def check_embedding(vocab: dict[str, int], rows: int, path: Path) -> None:
    """Every id has a row of the embedding."""
    token, top = max(vocab.items(), key=lambda kv: kv[1])
    if top >= rows:
        _bad(
            path,
            f"the token {token!r} has the id {top}, beyond the embedding's {rows} rows",
            "give the vocab and merges this model was trained with",
        )
