"""Cache entries: a folder of token files, tokenizer.json and meta.json, whole or absent.

An entry is built in a private temporary folder and renamed into place with meta.json written
last. A cache folder may have been damaged or written by someone else, so an entry is checked
before use — meta.json parses, every file has the size meta.json says, the tokenizer's
checksum matches, every id is below the vocabulary — and a bad one is removed and rebuilt.
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

from posenc_cli.common.console import console
from posenc_cli.common.digest import file_digest
from posenc_cli.common.errors import PosencError
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


def cache_root(data_cfg: Any) -> Path:
    return Path(str(data_cfg.cache_dir)).expanduser()


def ensure(
    target: Path, build: Callable[[Path], dict[str, Any]], parts: tuple[str, ...]
) -> TokenData:
    """The entry at ``target``, built (or rebuilt, if it fails its checks) by ``build(tmp)``,
    which writes the files into tmp and returns their metadata."""
    problem = check_entry(target, parts) if target.exists() else "absent"
    if problem not in (None, "absent"):
        console.print(
            f"note: rebuilding the data cache entry {target.name}: {problem}", style="yellow"
        )
        shutil.rmtree(target, ignore_errors=True)
    if problem is not None:
        try:
            with fresh_tmp_dir(target) as tmp:
                publish(tmp, target, build(tmp))
        except OSError as exc:
            raise PosencError(
                f"cannot write the data cache '{target.parent}': {exc.strerror or exc}",
                "set data.cache_dir (or $POSENC_CACHE) to a writable folder",
            ) from None
        problem = check_entry(target, parts)
        if problem is not None:
            raise PosencError(
                f"the data cache entry {target} is unusable: {problem}",
                "remove it, or set $POSENC_CACHE to another folder",
            )
    return open_entry(target)


def check_entry(target: Path, parts: tuple[str, ...]) -> str | None:
    """None when the entry is whole and consistent, else what is wrong with it."""
    try:
        meta = json.loads((target / META).read_text())
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
        if "train" in parts and file_digest(target / "tokenizer.json") != meta["tokenizer_digest"]:
            return "tokenizer.json does not match its checksum"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{type(exc).__name__}: {str(exc)[:120]}"
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
        if not pid.isdigit() or not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def publish(tmp: Path, target: Path, meta: dict[str, Any]) -> None:
    """Write meta.json last and rename the folder, so a cache entry is whole or absent."""
    if (tmp / "tokenizer.json").exists():
        meta = {**meta, "tokenizer_digest": file_digest(tmp / "tokenizer.json")}
    (tmp / META).write_text(json.dumps(meta, indent=2))
    try:
        os.replace(tmp, target)
    except OSError:
        if not (target / META).exists():  # another process published it first: fine
            raise
