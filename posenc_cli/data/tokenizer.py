"""Byte-level BPE trained with Hugging Face `tokenizers` (Rust) on the training split only.

Byte level means every string round-trips exactly and no text is ever out of vocabulary.
`<|endoftext|>` is a special token placed between documents.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from posenc_cli.common.errors import PosencError
from posenc_cli.data.corpus import EOT


def train_tokenizer(texts: Iterator[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE with ``vocab_size`` entries (256 bytes + merges + <|endoftext|>)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def load_tokenizer(path: Path) -> Tokenizer:
    """A saved tokenizer; a damaged file is one line (tokenizers raises plain Exceptions)."""
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:
        raise PosencError(
            f"tokenizer '{path}' cannot be read ({str(exc)[:80]})",
            "restore it from its run or remove it so it is rebuilt",
        ) from None


def check_not_byte_level(path: Path) -> None:
    """A saved BPE whose vocabulary holds tokens beyond the bytes and its special tokens must
    have the merges that reach them: without any, every text is encoded byte by byte, and a
    model scored on that reports the perplexity of text it never saw tokenized that way."""
    tok = load_tokenizer(path)
    model = json.loads(tok.to_str()).get("model", {})
    beyond = tok.get_vocab_size() - 256 - len(tok.get_added_tokens_decoder())
    if model.get("type") == "BPE" and not model.get("merges") and beyond > 0:
        raise PosencError(
            f"tokenizer '{path}' has {beyond} tokens beyond the bytes but no merges, so "
            "every text would be encoded byte by byte",
            "restore the tokenizer.json its run was made with (for an imported model, "
            "import it again with its merges file)",
        )


#: The end-of-text tokens of other tokenizers (imported models), tried after posenc's own.
OTHER_EOTS = ("<|end_of_text|>", "</s>")


def eot_id(tok: Tokenizer) -> int:
    """The id that separates documents: <|endoftext|>, else an imported model's end of text."""
    for name in (EOT, *OTHER_EOTS):
        token_id = tok.token_to_id(name)
        if token_id is not None:
            return int(token_id)
    raise PosencError(
        f"the tokenizer has no {EOT} token, which separates documents",
        f"use a tokenizer trained with {EOT} as a special token (posenc's "
        "own, or import-cs336 --special)",
    )


def encode(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def decode(tok: Tokenizer, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=False)
