"""The bytes of a corpus decide its token cache entry: an in-place edit that restores the file's
size and mtime is noticed, and the remembered hashes only skip re-reading untouched files."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from posenc_cli.data import content_hash
from posenc_cli.data.content_hash import HashMemo
from posenc_cli.data.prepare import prepare


def data_cfg(corpus: Path, cache: Path) -> object:
    return OmegaConf.create(
        {
            "name": "t",
            "kind": "text",
            "path": str(corpus),
            "val_path": None,
            "vocab_size": 300,
            "val_every_nth": 20,
            "cache_dir": str(cache),
        }
    )


def edit_in_place(path: Path) -> None:
    """Same size, same mtime, other bytes; returns once the file's ctime has moved."""
    st = path.stat()
    text = path.read_bytes()
    edited = text.replace(b"the ", b"THE ")
    assert edited != text and len(edited) == len(text)
    while path.stat().st_ctime_ns == st.st_ctime_ns:
        with open(path, "r+b") as fh:  # the same inode, rewritten
            fh.write(edited)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = path.stat()
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def counted_digests(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    read: list[Path] = []

    def digest(path: Path) -> str:
        read.append(path)
        return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()

    monkeypatch.setattr(content_hash, "file_digest", digest)
    return read


@pytest.mark.parametrize("racy_ns", [content_hash.RACY_NS, -(10**20)])
def test_an_edit_that_restores_size_and_mtime_trains_on_the_new_text(
    racy_ns: int, tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both with the files fresh (never remembered) and as if long untouched (remembered)."""
    monkeypatch.setattr(content_hash, "RACY_NS", racy_ns)
    text = tmp_path / "corpus.txt"
    shutil.copy(corpus, text)
    cache = tmp_path / "cache"
    old = np.array(prepare(data_cfg(text, cache)).train)
    edit_in_place(text)
    new = np.array(prepare(data_cfg(text, cache)).train)
    fresh = tmp_path / "fresh"
    shutil.copytree(text.parent, fresh, ignore=shutil.ignore_patterns("cache"))
    expected = np.array(prepare(data_cfg(fresh / "corpus.txt", tmp_path / "cache2")).train)
    assert not np.array_equal(new, old)
    np.testing.assert_array_equal(new, expected)


def test_an_untouched_file_is_read_once(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(content_hash, "RACY_NS", -(10**20))
    read = counted_digests(monkeypatch)
    text = tmp_path / "corpus.txt"
    shutil.copy(corpus, text)
    memo = HashMemo(tmp_path)
    first = memo.file_hash(text)
    memo.save()
    assert HashMemo(tmp_path).file_hash(text) == first
    assert read == [text]
    edit_in_place(text)
    assert HashMemo(tmp_path).file_hash(text) != first
    assert read == [text, text]


def test_a_freshly_written_file_is_not_remembered(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its timestamps could still move within the same tick, so it is hashed every time."""
    read = counted_digests(monkeypatch)
    text = tmp_path / "corpus.txt"
    shutil.copy(corpus, text)
    for _ in range(2):
        memo = HashMemo(tmp_path)
        memo.file_hash(text)
        memo.save()
    assert read == [text, text]
    assert not (tmp_path / content_hash.MEMO).exists()


@pytest.mark.parametrize("memo_text", ["{", "[1, 2]", '{"x": "old-format-hash"}', '{"x": [1]}'])
def test_a_damaged_memo_only_costs_a_rehash(memo_text: str, tmp_path: Path, corpus: Path) -> None:
    (tmp_path / content_hash.MEMO).write_text(memo_text.replace("x", str(corpus.resolve())))
    expected = hashlib.blake2b(corpus.read_bytes(), digest_size=16).hexdigest()
    assert HashMemo(tmp_path).file_hash(corpus) == expected
