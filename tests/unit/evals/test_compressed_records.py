"""Records stored gzip-compressed (as the committed records are): read as the plain file would
be, and a compressed file that posenc could not have written is refused, never expanded
without bound."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from posenc_cli.evals import units as units_module
from posenc_cli.evals.instances import INSTANCES_FILE, read_instances
from posenc_cli.evals.units import (
    UNITS_FILE,
    UnitsFileError,
    UnitSums,
    read_units,
    stored_record,
    units_csv,
)

TEXT = "protocol,length,document,unit,loss_sum,targets\ntail,16,0,0,1.5,3\ntail,16,0,1,0.25,2\n"


def test_a_compressed_record_reads_as_the_plain_one(tmp_path: Path) -> None:
    plain, packed = tmp_path / "a" / UNITS_FILE, tmp_path / "b" / UNITS_FILE
    plain.parent.mkdir()
    packed.parent.mkdir()
    plain.write_text(TEXT)
    packed.with_name(UNITS_FILE + ".gz").write_bytes(gzip.compress(TEXT.encode(), mtime=0))
    assert stored_record(packed) == packed.with_name(UNITS_FILE + ".gz")
    assert units_csv(read_units(packed)) == units_csv(read_units(plain))
    (s,) = read_units(packed).values()
    assert s.loss_sum.tolist() == [1.5, 0.25] and s.targets.tolist() == [3, 2]


def test_the_plain_file_wins_where_both_are_stored(tmp_path: Path) -> None:
    path = tmp_path / UNITS_FILE
    path.write_text(TEXT)
    path.with_name(UNITS_FILE + ".gz").write_bytes(b"not gzip")
    assert stored_record(path) == path
    assert read_units(path)[("tail", 16)].unit.tolist() == [0, 1]


@pytest.mark.parametrize(
    "data",
    [b"not gzip", gzip.compress(TEXT.encode(), mtime=0)[:-9], b"\x1f\x8b"],
    ids=["not-gzip", "truncated", "header-only"],
)
def test_a_broken_compressed_record_is_refused(tmp_path: Path, data: bytes) -> None:
    (tmp_path / (INSTANCES_FILE + ".gz")).write_bytes(data)
    with pytest.raises(UnitsFileError):
        read_instances(tmp_path / INSTANCES_FILE)


def test_a_record_that_expands_past_the_limit_is_refused_without_expanding_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(units_module, "MAX_BYTES", 4096)
    bomb = gzip.compress(TEXT.encode() + b"0" * 10**6, mtime=0)
    assert len(bomb) < 4096
    (tmp_path / (UNITS_FILE + ".gz")).write_bytes(bomb)
    with pytest.raises(UnitsFileError, match="once decompressed"):
        read_units(tmp_path / UNITS_FILE)


def test_no_record_stored_is_none(tmp_path: Path) -> None:
    assert stored_record(tmp_path / UNITS_FILE) is None
    (tmp_path / (UNITS_FILE + ".gz")).mkdir()
    assert stored_record(tmp_path / UNITS_FILE) is None


def test_units_of_a_compressed_record_equal_the_written_ones(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    sums = UnitSums(np.zeros(5, np.int64), np.arange(5), rng.gamma(2.0, 1.0, 5), np.full(5, 7))
    text = units_csv({("nonoverlapping", 64): sums})
    (tmp_path / (UNITS_FILE + ".gz")).write_bytes(gzip.compress(text.encode(), mtime=0))
    back = read_units(tmp_path / UNITS_FILE)[("nonoverlapping", 64)]
    assert back.loss_sum.tolist() == sums.loss_sum.tolist()  # exact: repr round-trips
