"""Token ids on disk (np.memmap, written once, cached by content) and CS336-style batches.

prepare() is called by the CLI before a run directory exists, so data errors never leave a
half-made run behind; the trainer then only opens the cached files.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from posenc_cli.data.corpus import Corpus
from posenc_cli.data.tokenizer import eot_id, load_tokenizer, train_tokenizer

FORMAT_VERSION = 1
ENCODE_BATCH_CHARS = 1 << 22


@dataclass
class TokenData:
    """The prepared corpus: training and validation ids plus the tokenizer that made them."""

    train: np.ndarray
    val: np.ndarray
    tokenizer_path: Path
    meta: dict[str, Any]

    @property
    def tokenizer(self) -> Tokenizer:
        return load_tokenizer(self.tokenizer_path)


def cache_key(data_cfg: Any, corpus: Corpus, cache_dir: Path) -> str:
    """Corpus content + every setting that changes the tokens."""
    import hashlib

    settings = f"{FORMAT_VERSION}|{data_cfg.kind}|{data_cfg.vocab_size}|{data_cfg.val_every_nth}"
    digest = hashlib.blake2b(f"{settings}|{corpus.fingerprint(cache_dir)}".encode(),
                             digest_size=10).hexdigest()
    return f"{data_cfg.name}-v{data_cfg.vocab_size}-{digest}"


def prepare(data_cfg: Any) -> TokenData:
    """Train the tokenizer and write token files once; later calls reuse the cache."""
    from posenc_cli.errors import PosencError

    cache_dir = Path(str(data_cfg.cache_dir)).expanduser()
    corpus = Corpus(data_cfg.kind, data_cfg.path, data_cfg.val_path, data_cfg.val_every_nth)
    target = cache_dir / cache_key(data_cfg, corpus, cache_dir)
    if not (target / "meta.json").exists():
        try:
            _build(corpus, data_cfg.vocab_size, target)
        except PermissionError:
            raise PosencError(f"cannot write the data cache '{cache_dir}'",
                              "set data.cache_dir (or $POSENC_CACHE) to a writable folder") from None
    return load(target)


def _build(corpus: Corpus, vocab_size: int, target: Path) -> None:
    from posenc_cli.errors import PosencError

    tmp = fresh_tmp_dir(target)
    t0 = time.perf_counter()
    tok = train_tokenizer(corpus.train_segments(), vocab_size)
    tok.save(str(tmp / "tokenizer.json"))
    t1 = time.perf_counter()
    dtype = id_dtype(tok)
    n_train, _ = write_ids(tok, corpus.train_segments(), tmp / "train.bin", dtype)
    n_val, _ = write_ids(tok, corpus.val_segments(), tmp / "val.bin", dtype)
    if n_train == 0 or n_val == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PosencError("the corpus is too small to hold out validation text",
                          "give more text (a few KB at least) or fewer data.val_every_nth")
    meta = {"format": FORMAT_VERSION, "vocab_size": tok.get_vocab_size(),
            "dtype": np.dtype(dtype).name, "train_tokens": n_train, "val_tokens": n_val,
            "eot_id": eot_id(tok), "tokenizer_seconds": round(t1 - t0, 2),
            "encode_seconds": round(time.perf_counter() - t1, 2)}
    publish(tmp, target, meta)


def id_dtype(tok: Tokenizer) -> type:
    """uint16 when every id fits (vocab <= 65536): half the disk and memory of uint32."""
    return np.uint16 if tok.get_vocab_size() <= 2**16 else np.uint32


def fresh_tmp_dir(target: Path) -> Path:
    """A private folder beside ``target``; publish() renames it into place."""
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def publish(tmp: Path, target: Path, meta: dict[str, Any]) -> None:
    """Write meta.json last and rename the folder, so a cache entry is whole or absent."""
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    try:
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "meta.json").exists():
            raise


def write_ids(tok: Tokenizer, segments: Iterator[str], path: Path, dtype: type,
              limit: int | None = None) -> tuple[int, bool]:
    """Encode in batches of ~4 M characters (parallel in Rust), <|endoftext|> after each
    segment; stop after ``limit`` ids. Returns (ids written, whether the limit cut the text)."""
    eot, count = eot_id(tok), 0
    with open(path, "wb") as fh:
        for batch in _batches(segments):
            encoded = tok.encode_batch(batch, add_special_tokens=False)
            ids = np.fromiter((i for e in encoded for i in (*e.ids, eot)), dtype=np.int64)
            if limit is not None and count + ids.size >= limit:
                ids[:limit - count].astype(dtype).tofile(fh)
                return limit, True
            ids.astype(dtype).tofile(fh)
            count += int(ids.size)
    return count, False


def _batches(segments: Iterator[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for seg in segments:
        batch.append(seg)
        size += len(seg)
        if size >= ENCODE_BATCH_CHARS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def load(target: Path) -> TokenData:
    meta = json.loads((target / "meta.json").read_text())
    dtype = np.dtype(meta["dtype"])
    train = np.memmap(target / "train.bin", dtype=dtype, mode="r")
    val = np.memmap(target / "val.bin", dtype=dtype, mode="r")
    return TokenData(train, val, target / "tokenizer.json", meta)


def get_batch(ids: np.ndarray, batch_size: int, context_length: int, generator: torch.Generator,
              device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows (CS336 get_batch): x = ids[s:s+L], y = ids[s+1:s+L+1]."""
    starts = torch.randint(0, len(ids) - context_length, (batch_size,), generator=generator)
    return windows(ids, starts.tolist(), context_length, device)


def windows(ids: np.ndarray, starts: list[int], context_length: int,
            device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets of the windows starting at ``starts``."""
    rows = np.stack([np.asarray(ids[s:s + context_length + 1], dtype=np.int64) for s in starts])
    xy = torch.from_numpy(rows)
    x, y = xy[:, :-1], xy[:, 1:]
    if str(device).startswith("cuda"):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device,
                                                                             non_blocking=True)
    return x.to(device), y.to(device)


def validation_starts(n_tokens: int, context_length: int, count: int) -> list[int]:
    """Evenly spaced, fixed window starts, so every validation pass scores the same tokens."""
    last = n_tokens - context_length - 1
    if count <= 1 or last <= 0:
        return [0] * max(count, 1)
    return [round(i * last / (count - 1)) for i in range(count)]
