"""Cache entries: a folder of token files, tokenizer.json and meta.json, whole or absent.

An entry is built in a private temporary folder and renamed into place with meta.json written
last. A cache folder may have been damaged or written by someone else, so an entry is checked
before use — meta.json parses, every file has the size meta.json says, the tokenizer's
checksum matches, every id is below the vocabulary, the format and vocabulary are the ones
expected — and a bad one is rebuilt, then replaced. A check that cannot run (no memory, no
permission) is an error that keeps the entry: only a proven-bad entry is ever replaced.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from posenc_cli.common.atomic import process_alive
from posenc_cli.common.console import console
from posenc_cli.common.digest import file_digest
from posenc_cli.common.errors import PosencError
from posenc_cli.data.config import DataConfig
from posenc_cli.data.corpus import EOT
from posenc_cli.data.tokenizer import load_tokenizer

META = "meta.json"


@dataclass
class TokenData:
    """Training and validation ids plus the tokenizer that made them."""

    train: np.ndarray
    val: np.ndarray
    tokenizer_path: Path
    meta: dict[str, Any]

    @property
    def tokenizer(self) -> Tokenizer:
        return load_tokenizer(self.tokenizer_path)


def cache_root(data_cfg: DataConfig) -> Path:
    return Path(data_cfg.cache_dir).expanduser()


def ensure(
    target: Path,
    build: Callable[[Path], dict[str, Any]],
    parts: tuple[str, ...],
    expect: dict[str, Any],
) -> TokenData:
    """The entry at ``target``, built (or rebuilt, if it fails its checks) by ``build(tmp)``,
    which writes the files into tmp and returns their metadata; ``expect`` holds the values
    meta.json must have (its format, and the vocabulary size when the caller knows it)."""
    problem = check_entry(target, parts, expect) if target.exists() else "absent"
    if problem is None:
        return open_entry(target)
    if problem != "absent":
        console.print(
            f"note: rebuilding the data cache entry {target.name}: {problem}", style="yellow"
        )
    try:
        with fresh_tmp_dir(target) as tmp:
            meta = build(tmp)
            if not target.exists() or check_entry(target, parts, expect) is not None:
                publish(tmp, target, meta)
    except OSError as exc:
        raise PosencError(
            f"cannot write the data cache '{target.parent}': {exc.strerror or exc}",
            "set data.cache_dir (or $POSENC_CACHE) to a writable folder",
        ) from None
    problem = check_entry(target, parts, expect)
    if problem is not None:
        raise PosencError(
            f"the data cache entry {target} is unusable: {problem}",
            "remove it, or set $POSENC_CACHE to another folder",
        )
    return open_entry(target)


#: What a damaged or foreign entry raises; any other error means the check itself could not
#: run (no memory, no permission), which says nothing about the entry, so it is kept.
DAMAGE = (ValueError, KeyError, TypeError, FileNotFoundError, IsADirectoryError, NotADirectoryError)


def check_entry(target: Path, parts: tuple[str, ...], expect: dict[str, Any]) -> str | None:
    """None when the entry is whole and consistent, else what is wrong with it."""
    try:
        return _problem(target, parts, expect)
    except DAMAGE as exc:
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    except (OSError, MemoryError) as exc:
        raise PosencError(
            f"cannot check the data cache entry {target}: "
            f"{getattr(exc, 'strerror', None) or type(exc).__name__}",
            "free memory or fix the cache folder's permissions, then rerun",
        ) from None


def _problem(target: Path, parts: tuple[str, ...], expect: dict[str, Any]) -> str | None:
    meta = json.loads((target / META).read_text())
    for key, value in expect.items():
        if meta.get(key) != value:
            return f"meta.json has {key} {meta.get(key)!r}, not {value!r}"
    dtype = np.dtype(meta["dtype"])
    if dtype not in (np.uint16, np.uint32):
        return f"unexpected id type {dtype}"
    for part in parts:
        size = (target / f"{part}.bin").stat().st_size
        if size != int(meta[f"{part}_tokens"]) * dtype.itemsize:
            return f"{part}.bin has {size} bytes, not {meta[f'{part}_tokens']} ids"
        ids = np.memmap(target / f"{part}.bin", dtype=dtype, mode="r")
        if ids.size and int(ids.max()) >= int(meta["vocab_size"]):
            return f"{part}.bin holds ids beyond the vocabulary"
    if "train" in parts:
        return _tokenizer_problem(target / "tokenizer.json", meta)
    return None


def _tokenizer_problem(path: Path, meta: dict[str, Any]) -> str | None:
    """The entry's own tokenizer: its checksum, and the vocabulary and <|endoftext|> id that
    meta.json records (a meta.json edited by hand is caught here, not blamed on the text)."""
    if file_digest(path) != meta["tokenizer_digest"]:
        return "tokenizer.json does not match its checksum"
    try:
        tok = load_tokenizer(path)
    except PosencError:
        return "tokenizer.json cannot be read"
    if tok.get_vocab_size() != meta["vocab_size"]:
        return (
            f"meta.json says {meta['vocab_size']} tokens, tokenizer.json has {tok.get_vocab_size()}"
        )
    if tok.token_to_id(EOT) != meta["eot_id"]:
        return f"meta.json's {EOT} id is not the tokenizer's"
    return None


def open_entry(target: Path) -> TokenData:
    meta = json.loads((target / META).read_text())
    dtype = np.dtype(meta["dtype"])

    def ids(part: str) -> np.ndarray:
        path = target / f"{part}.bin"
        return np.memmap(path, dtype=dtype, mode="r") if path.exists() else np.empty(0, dtype)

    return TokenData(ids("train"), ids("val"), target / "tokenizer.json", meta)


@contextmanager
def fresh_tmp_dir(target: Path) -> Iterator[Path]:
    """A private folder beside ``target``, removed if the build does not finish; folders of
    builds whose process died are removed first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f"{target.name}.tmp*"):
        pid = stale.name.rsplit(".tmp", 1)[1]
        if not pid.isdigit() or not process_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def publish(tmp: Path, target: Path, meta: dict[str, Any]) -> None:
    """Write meta.json last and rename the folder, so a cache entry is whole or absent. A
    damaged entry in the way is moved aside only now, when its replacement is complete."""
    if (tmp / "tokenizer.json").exists():
        meta = {**meta, "tokenizer_digest": file_digest(tmp / "tokenizer.json")}
    (tmp / META).write_text(json.dumps(meta, indent=2))
    if target.exists():
        aside = target.with_name(f"{target.name}.tmp{os.getpid()}-damaged")
        shutil.rmtree(aside, ignore_errors=True)
        try:
            os.replace(target, aside)
        except FileNotFoundError:  # another process moved it first
            pass
        shutil.rmtree(aside, ignore_errors=True)
    try:
        os.replace(tmp, target)
    except OSError:
        if not (target / META).exists():  # another process published it first: fine
            raise
