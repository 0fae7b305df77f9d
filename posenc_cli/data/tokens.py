"""Token files: text segments encoded in batches and written as flat arrays of ids.

uint16 when every id fits (vocab <= 65,536), else uint32.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from posenc_cli.data.progress import PrepProgress
from posenc_cli.data.tokenizer import eot_id

ENCODE_BATCH_CHARS = 1 << 22


def id_dtype(vocab_size: int) -> type:
    """uint16 when every id fits: half the disk and memory of uint32."""
    return np.uint16 if vocab_size <= 2**16 else np.uint32


def write_ids(
    tok: Tokenizer,
    segments: Iterator[str],
    path: Path,
    dtype: type,
    limit: int | None = None,
    progress: PrepProgress | None = None,
) -> tuple[int, bool]:
    """Encode in batches of ~4 M characters (parallel in Rust), <|endoftext|> after each
    segment; stop after ``limit`` ids. Returns (ids written, whether the limit cut the text)."""
    eot: np.ndarray = np.array([eot_id(tok)], dtype=dtype)
    count = 0
    with open(path, "wb") as fh:
        for batch in _batches(segments):
            encoded = tok.encode_batch(batch, add_special_tokens=False)
            ids = _joined(encoded, eot, dtype)
            if progress is not None and progress.shown:
                progress.add(len(batch), int(ids.size), sum(len(s.encode("utf-8")) for s in batch))
            if limit is not None and count + ids.size >= limit:
                ids[: limit - count].tofile(fh)
                return limit, True
            ids.tofile(fh)
            count += int(ids.size)
    return count, False


def _joined(encoded: list, eot: np.ndarray, dtype: type) -> np.ndarray:
    """The ids of every encoding, each followed by <|endoftext|>: one array conversion per
    segment in C, not one Python step per id."""
    parts: list[np.ndarray] = []
    for e in encoded:
        parts += (np.asarray(e.ids, dtype=dtype), eot)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def _batches(segments: Iterator[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for seg in segments:
        batch.append(seg)
        size += len(seg)
        if size >= ENCODE_BATCH_CHARS:
            yield batch
            batch = []
            size = 0
    if batch:
        yield batch
