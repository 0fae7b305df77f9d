"""A vocabulary the corpus cannot fill is refused as soon as the tokenizer is trained: before
the corpus is encoded, so nothing lands in the data cache."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def test_a_vocabulary_larger_than_the_text_gives_is_refused_before_the_cache(
    workdir: Path, refused: Callable[..., str]
) -> None:
    (workdir / "small.txt").write_text("the cat sat on the mat. " * 400, encoding="utf-8")
    args = ["train", "model=tiny", "data=text", "data.path=small.txt", "data.vocab_size=2000"]
    line = refused([*args, "train.context_length=16", "hydra.run.dir=never"])
    assert "the tokenizer learned only" in line and "data.vocab_size=2000" in line
