"""Class 3, hangs: a corpus path that is a FIFO (alone, or among a folder's .txt files) would
block the first read forever; it is one line before anything is created."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest


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
