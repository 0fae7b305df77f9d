"""prepare(): the tokenizer cache and token files, reused; bad files are user errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.data.prepare import prepare


def data_cfg(path: Path, cache: Path, vocab: int = 300) -> object:
    return OmegaConf.create(
        {
            "name": "text",
            "kind": "text",
            "path": str(path),
            "val_path": None,
            "vocab_size": vocab,
            "val_every_nth": 20,
            "cache_dir": str(cache),
        }
    )


def test_prepare_caches_and_reuses(tmp_path: Path, make_corpus) -> None:
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


@pytest.mark.parametrize(
    "content,message",
    [
        (b"", "is empty"),
        (b"\xff\xfe\x00binary\x00stuff", "not UTF-8"),
        (b"plain\x00text", "binary"),
    ],
)
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
