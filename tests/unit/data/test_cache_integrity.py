"""A damaged data-cache entry is noticed and rebuilt, never used silently; a check that cannot
run keeps the entry."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.data.cache import ensure
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

    return damage


def untimed(meta: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in meta.items() if not k.endswith("_seconds")}


DAMAGES = [
    damage_truncate,
    damage_meta,
    damage_ids,
    damage_tokenizer,
    edit_meta(vocab_size=299),
    edit_meta(format=99),
    edit_meta(eot_id=7),
]


@pytest.mark.parametrize("damage", DAMAGES)
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
    check_data_fits(again, OmegaConf.create({"data": cfg, "train": {"context_length": 16}}))


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
