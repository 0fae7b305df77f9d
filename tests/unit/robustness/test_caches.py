"""Class 4 (and class 9's cache cases), caches: the bytes of a corpus decide its token cache
entry, so an in-place edit that restores the file's size and mtime is noticed (the remembered
hashes only skip re-reading untouched files); a damaged entry, or one whose meta.json has an
unknown format or an inconsistent vocabulary, is rebuilt, never used silently nor blamed on the
tokenizer; a check that cannot run is one line and keeps the entry byte for byte."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.data import content_hash
from posenc_cli.data.cache import ensure
from posenc_cli.data.content_hash import HashMemo
from posenc_cli.data.prepare import check_data_fits, prepare


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


def damage_truncate(entry: Path) -> None:
    data = (entry / "train.bin").read_bytes()
    (entry / "train.bin").write_bytes(data[: len(data) // 2])


def damage_meta(entry: Path) -> None:
    (entry / "meta.json").write_text("{")


def damage_ids(entry: Path) -> None:
    ids = np.memmap(entry / "val.bin", dtype=np.uint16, mode="r+")
    ids[:] = 65535
    ids.flush()


def damage_tokenizer(entry: Path) -> None:
    text = (entry / "tokenizer.json").read_text()
    (entry / "tokenizer.json").write_text(text[: len(text) // 2])


def edit_meta(**changes: object) -> object:
    def damage(entry: Path) -> None:
        meta = json.loads((entry / "meta.json").read_text())
        (entry / "meta.json").write_text(json.dumps({**meta, **changes}))

    damage.__qualname__ = "meta:" + ",".join(f"{k}={v}" for k, v in changes.items())
    return damage


def untimed(meta: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in meta.items() if not k.endswith("_seconds")}


#: Damage done to a cache entry; each is noticed and the entry rebuilt.
CASES = [
    damage_truncate,
    damage_meta,
    damage_ids,
    damage_tokenizer,
    edit_meta(vocab_size=299),
    edit_meta(format=99),
    edit_meta(eot_id=7),
]


@pytest.mark.parametrize("damage", CASES, ids=lambda d: d.__qualname__)
def test_damaged_entries_are_rebuilt(
    damage: object, tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = data_cfg(corpus, tmp_path)
    first = prepare(cfg)
    train = np.array(first.train)
    val = np.array(first.val)
    meta = first.meta
    entry = first.tokenizer_path.parent
    damage(entry)
    again = prepare(cfg)
    assert "rebuilding the data cache entry" in capsys.readouterr().out
    np.testing.assert_array_equal(np.array(again.train), train)
    np.testing.assert_array_equal(np.array(again.val), val)
    assert untimed(again.meta) == untimed(meta)
    check_data_fits(again, cfg, 16)


@pytest.mark.parametrize(
    "error",
    [
        MemoryError(),
        OSError(errno.ENOMEM, "Cannot allocate memory"),
        PermissionError(errno.EACCES, "Permission denied"),
    ],
)
def test_a_check_that_cannot_run_keeps_the_entry(
    error: BaseException, tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = data_cfg(corpus, tmp_path)
    entry = prepare(cfg).tokenizer_path.parent
    before = {p.name: p.read_bytes() for p in entry.iterdir()}

    def failing_memmap(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(np, "memmap", failing_memmap)
    with pytest.raises(PosencError) as info:
        prepare(cfg)
    assert "cannot check the data cache entry" in str(info.value)
    assert "\n" not in str(info.value)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in entry.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name != "file-hashes.json"] == [entry.name]


def test_an_interrupted_build_leaves_no_temporary_folder(tmp_path: Path) -> None:
    def build(tmp: Path) -> dict[str, object]:
        (tmp / "val.bin").write_bytes(b"\0\0")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ensure(tmp_path / "entry", build, ("val",), {"format": 3})
    assert list(tmp_path.iterdir()) == []


def test_a_dead_builders_folder_is_cleaned_up(tmp_path: Path, corpus: Path) -> None:
    cfg = data_cfg(corpus, tmp_path)
    entry = prepare(cfg).tokenizer_path.parent
    stale = entry.with_name(f"{entry.name}.tmp999999999")  # no such process
    stale.mkdir()
    shutil.rmtree(entry)
    prepare(cfg)
    assert not stale.exists()
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []
