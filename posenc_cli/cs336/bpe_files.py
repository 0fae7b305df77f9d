"""CS336/GPT-2 BPE files <-> a Hugging Face tokenizer that encodes to exactly the same ids.

Two file formats are read: GPT-2's text form (vocab.json: token -> id with bytes written
through the byte-to-unicode table; merges.txt: one merge per line, in rank order) and the
pickles the assignment's BPE commonly writes (dict[int, bytes] and list[tuple[bytes, bytes]]).
The merges are used in their given order, never re-derived, and pre-tokenization is GPT-2's
regex with the special tokens split out first — the assignment's tokenizer.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any, cast

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from posenc_cli.common.errors import PosencError
from posenc_cli.cs336.bpe_checks import check_merges, check_round_trip, check_vocab, unique_pairs
from posenc_cli.cs336.gpt2_bytes import to_token

#: The only globals a tokenizer pickle may name: plain containers of bytes, ints and strings.
_SAFE = {
    ("builtins", "bytes"),
    ("builtins", "bytearray"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("collections", "OrderedDict"),
    ("_codecs", "encode"),
}

#: Text that must decode to itself through an imported tokenizer (ASCII, accents, a CJK
#: character, an emoji, digits, whitespace runs and a special token).
ROUND_TRIP_SAMPLE = "The cat's 42 mats, naïve café — 東京 🙂\n\n  tabs\tend.{eot}Next."


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _SAFE:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _unpickle(path: Path) -> Any:
    try:
        return _SafeUnpickler(io.BytesIO(path.read_bytes())).load()
    except Exception as exc:  # any malformed or unsafe pickle
        raise PosencError(
            f"'{path}' is neither GPT-2 text nor a plain pickle ({exc})",
            "give vocab.json/merges.txt or the pickled dict[int, bytes] / "
            "list[tuple[bytes, bytes]]",
        ) from None


def read_vocab(path: Path) -> dict[str, int]:
    """token (byte-to-unicode string) -> id, from vocab.json or a dict[int, bytes] pickle."""
    _exists(path, "--vocab")
    try:
        data: Any = json.loads(
            path.read_text(encoding="utf-8"),
            object_pairs_hook=lambda pairs: unique_pairs(pairs, path),
        )
    except (UnicodeDecodeError, ValueError):
        data = _unpickle(path)
        if isinstance(data, dict) and all(
            isinstance(k, int) and isinstance(v, (bytes, bytearray)) for k, v in data.items()
        ):
            return check_vocab(
                unique_pairs(((to_token(bytes(v)), k) for k, v in data.items()), path), path
            )
        raise PosencError(
            f"'{path}' is not a dict[int, bytes]", "give the vocabulary your BPE training returned"
        ) from None
    if not isinstance(data, dict):
        raise PosencError(
            f"'{path}' is not a GPT-2 vocab.json (token -> id)",
            "give the vocab.json that goes with merges.txt",
        )
    return check_vocab(data, path)


def read_merges(path: Path) -> list[tuple[str, str]]:
    """Merges in rank order, from merges.txt or a list[tuple[bytes, bytes]] pickle."""
    _exists(path, "--merges")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        data = _unpickle(path)
        if isinstance(data, (list, tuple)) and all(
            isinstance(m, (list, tuple))
            and len(m) == 2
            and all(isinstance(x, (bytes, bytearray)) for x in m)
            for m in data
        ):
            return [(to_token(bytes(a)), to_token(bytes(b))) for a, b in data]
        raise PosencError(
            f"'{path}' is not a list[tuple[bytes, bytes]]",
            "give the merges your BPE training returned",
        ) from None
    merges = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or (n == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise PosencError(f"'{path}' line {n} is not a merge 'A B'", "give a GPT-2 merges.txt")
        merges.append((parts[0], parts[1]))
    return merges


def _exists(path: Path, option: str) -> None:
    if not path.is_file():
        raise PosencError(f"{option} '{path}' does not exist", f"give {option} FILE")


def build_tokenizer(
    vocab: dict[str, int],
    merges: list[tuple[str, str]],
    specials: list[str],
    files: tuple[Path, Path] | None = None,
) -> Tokenizer:
    """A byte-level BPE with exactly these tokens, merges (in order) and special tokens;
    ``files`` (vocab, merges), when given, are checked to describe one consistent tokenizer."""
    for s in specials:
        if to_token(s.encode("utf-8")) not in vocab and s not in vocab:
            raise PosencError(
                f"the special token {s!r} is not in the vocabulary",
                "give the special tokens your tokenizer was trained with (--special)",
            )
    if files is not None:
        check_merges(
            merges, vocab, [*specials, *(to_token(s.encode()) for s in specials)], files[1]
        )
    tok = _bpe(vocab, merges, specials)
    if files is not None:
        check_round_trip(tok, vocab, merges, ROUND_TRIP_SAMPLE.format(eot=specials[0]), files[1])
    return tok


def _bpe(vocab: dict[str, int], merges: list[tuple[str, str]], specials: list[str]) -> Tokenizer:
    try:
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    except Exception as exc:  # the Rust side reports inconsistent files as plain exceptions
        raise PosencError(
            f"the vocabulary and merges do not fit together ({exc})",
            "give the vocab and merges files of one tokenizer",
        ) from None
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok


def tokenizer_files(tok_json: dict[str, Any]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """vocab and merges of a saved byte-level BPE tokenizer.json (special tokens included)."""
    model = tok_json["model"]
    vocab = {str(k): int(v) for k, v in model["vocab"].items()}
    for added in tok_json.get("added_tokens", []):
        vocab.setdefault(str(added["content"]), int(added["id"]))
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return vocab, cast(list[tuple[str, str]], merges)  # a BPE's merges are pairs
