"""Class 3, hangs: a corpus path that is a FIFO (alone, or among a folder's .txt files) would
block the first read forever; it is one line before anything is created."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from posenc_cli.common.errors import PosencError


@pytest.mark.parametrize("where", ["pipe.txt", "folder/pipe.txt"])
def test_a_fifo_as_corpus_is_one_line(
    where: str, workdir: Path, refused: Callable[..., str]
) -> None:
    fifo = workdir / where
    fifo.parent.mkdir(exist_ok=True)
    (fifo.parent / "more.txt").write_text("some text\n" * 200)
    os.mkfifo(fifo)
    data_path = where if where == "pipe.txt" else "folder"
    line = refused(["train", "data=text", f"data.path={data_path}", "train.steps=1"])
    assert f"data path '{where}' is not a regular file" in line


@pytest.mark.parametrize("kind", ["fifo", "link", "huge"])
def test_a_metrics_file_that_is_no_small_regular_file_is_not_read(
    kind: str, tmp_path: Path
) -> None:
    """metrics.json as a pipe (opening it would wait for a writer), a link (to a file outside)
    or a sparse file past the bound: the run reads as having no metrics, and compare skips it
    with a note, at once."""
    from posenc_cli.engine.metrics import read_metrics
    from posenc_cli.report.runs import load_runs

    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    path = run / "metrics.json"
    outside = tmp_path / "outside.json"
    outside.write_text('{"encoding": "rope", "seed": 0}')
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link":
        path.symlink_to(outside)
    else:
        with path.open("wb") as f:
            f.truncate(65 * 2**20)
    assert read_metrics(run) == {}
    notes: list[str] = []
    with pytest.raises(PosencError, match="none of the 1 metrics.json files could be read"):
        load_runs([tmp_path / "runs"], notes)
    assert len(notes) == 1 and notes[0].startswith(f"skipped {path}: unreadable (it ")
