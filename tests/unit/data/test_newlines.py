"""Text is read with universal newlines: CRLF and CR files give the tokens of their LF copy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from posenc_cli.data import corpus as corpus_module
from posenc_cli.data.corpus import read_chunks
from posenc_cli.data.prepare import prepare


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1 << 22])
def test_every_line_ending_becomes_lf_across_chunk_boundaries(
    chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(corpus_module, "READ_CHUNK_CHARS", chunk)
    path = tmp_path / "t.txt"
    path.write_bytes("a\r\nb\rc\n\r\nd\r\r\né\r".encode())
    assert "".join(read_chunks(path)) == "a\nb\nc\n\nd\n\né\n"


def test_a_crlf_corpus_tokenizes_exactly_like_its_lf_copy(tmp_path: Path, corpus: Path) -> None:
    crlf = tmp_path / "crlf.txt"
    text = corpus.read_text(encoding="utf-8").replace(". ", ".\n")
    (tmp_path / "lf.txt").write_text(text, encoding="utf-8", newline="\n")
    crlf.write_bytes(text.replace("\n", "\r\n").encode("utf-8"))
    out = []
    for name in ("lf.txt", "crlf.txt"):
        cfg = OmegaConf.create(
            {
                "name": "t",
                "kind": "text",
                "path": str(tmp_path / name),
                "val_path": None,
                "vocab_size": 300,
                "val_every_nth": 20,
                "cache_dir": str(tmp_path / "cache"),
            }
        )
        data = prepare(cfg)
        out.append((np.array(data.train), np.array(data.val), data.tokenizer_path.read_bytes()))
    assert "\r" not in data.tokenizer.decode(out[1][1][:200].tolist())
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])
    assert out[0][2] == out[1][2]
