"""GPT-2's byte-to-unicode table, which writes every byte string as printable text: the
spelling of tokens in vocab.json and merges.txt, shared by reading, checking and writing them."""

from __future__ import annotations


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible table: printable bytes stand for themselves, the others are moved
    to unused code points from 256 on, so every byte string is a printable str."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = byte_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def to_token(data: bytes) -> str:
    return "".join(BYTE_TO_CHAR[b] for b in data)


def to_bytes(token: str) -> bytes:
    return bytes(CHAR_TO_BYTE[c] for c in token)


def token_bytes(token: str) -> bytes:
    """A vocabulary entry as bytes; a special token outside the table is its UTF-8."""
    return to_bytes(token) if all(c in CHAR_TO_BYTE for c in token) else token.encode("utf-8")
