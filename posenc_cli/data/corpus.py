"""Where text comes from, streamed document by document, split into train and validation.

Validation is made of whole held-out segments chosen by position (every nth), so no validation
text is ever trained on and the split never depends on a random seed. Files are read in chunks:
a multi-GB corpus is never held in memory at once.
"""

from __future__ import annotations

import codecs
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from posenc_cli.common.errors import PosencError
from posenc_cli.data.content_hash import HashMemo
from posenc_cli.data.sources import DataSource

EOT = "<|endoftext|>"
READ_CHUNK_CHARS = 1 << 22
MAX_BLOCK_CHARS = 1 << 20
MIN_BLOCK_CHARS = 1 << 12


def text_files(path: str | os.PathLike[str]) -> list[Path]:
    """A file, or every *.txt under a folder (sorted, so the order is reproducible)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise PosencError(
            f"data path '{path}' does not exist",
            "give an existing UTF-8 text file or a folder of .txt files",
        )
    files = sorted(f for f in p.rglob("*.txt") if not f.is_dir()) if p.is_dir() else [p]
    for f in files:  # reading a FIFO or a device would block or never end
        if not f.is_file():
            raise PosencError(
                f"data path '{f}' is not a regular file (a pipe, a device or a broken link)",
                "give UTF-8 text files, or copy the stream to a file first",
            )
    if not files:
        raise PosencError(
            f"folder '{path}' holds no .txt files",
            "put UTF-8 .txt files in it or point data.path at a file",
        )
    if all(f.stat().st_size == 0 for f in files):
        raise PosencError(f"data path '{path}' is empty", "give a file that contains text")
    return files


def read_chunks(path: Path) -> Iterator[str]:
    """Decoded text of one file in chunks, with universal newlines (CRLF and CR become LF, so
    a file edited on Windows gives the tokens of its LF copy); a non-UTF-8 or binary file is
    a user error."""
    with open(path, "rb") as fh:
        decoder = codecs.getincrementaldecoder("utf-8")("strict")
        offset = 0
        held = ""
        while True:
            raw = fh.read(READ_CHUNK_CHARS)
            try:
                text = held + decoder.decode(raw, final=not raw)
            except UnicodeDecodeError as exc:
                raise PosencError(
                    f"'{path}' is not UTF-8 text (invalid byte at offset {offset + exc.start})",
                    "convert it to UTF-8 (e.g. iconv -t utf-8) or remove it",
                ) from None
            if "\x00" in text:
                raise PosencError(
                    f"'{path}' looks binary (it contains NUL bytes)",
                    "point data.path at plain UTF-8 text",
                )
            offset += len(raw)
            held = "\r" if raw and text.endswith("\r") else ""  # its LF may come next
            text = (text[:-1] if held else text).replace("\r\n", "\n").replace("\r", "\n")
            if text:
                yield text
            if not raw:
                return


def split_documents(chunks: Iterator[str]) -> Iterator[str]:
    """Documents of one file: text between <|endoftext|> markers, streamed across chunks."""
    carry = ""
    for chunk in chunks:
        parts = (carry + chunk).split(EOT)
        carry = parts.pop()
        for doc in parts:
            if doc.strip():
                yield doc
    if carry.strip():
        yield carry


def blocks(doc: str, block_chars: int) -> Iterator[str]:
    """Cut an over-long document into blocks at line boundaries."""
    start = 0
    while len(doc) - start > block_chars:
        cut = doc.rfind("\n", start + block_chars // 2, start + block_chars)
        cut = start + block_chars if cut < 0 else cut + 1
        yield doc[start:cut]
        start = cut
    if doc[start:].strip():
        yield doc[start:]


class Corpus(DataSource):
    """Train and validation segments of text files, plus a fingerprint of their content; the
    file sources (sources/builtin.py, sources/text.py) say which files."""

    def __init__(
        self,
        files: list[Path],
        val_files: list[Path] | None,
        val_every_nth: int,
        block_chars: int | None,
    ) -> None:
        self.files = files
        #: Validation text of its own (data.val_path), else every nth segment of ``files``.
        self.val_files = val_files
        self.nth = max(val_every_nth, 2)
        #: Over-long documents are cut into blocks of at most this many characters (None: not).
        self.block_chars = block_chars

    def _segments(self, files: list[Path]) -> Iterator[str]:
        for f in files:
            for doc in split_documents(read_chunks(f)):
                yield from ([doc] if self.block_chars is None else blocks(doc, self.block_chars))

    def _is_val(self, index: int) -> bool:
        return index % self.nth == self.nth // 2

    def train_segments(self) -> Iterator[str]:
        for i, seg in enumerate(self._segments(self.files)):
            if self.val_files is not None or not self._is_val(i):
                yield seg

    def tokenizer_segments(self) -> Iterator[str]:
        """What the tokenizer learns from: all the training text."""
        return self.train_segments()

    def documents(self) -> Iterator[str]:
        """Every document of data.path, in file order, for evaluating a model on this text."""
        for f in self.files:
            yield from split_documents(read_chunks(f))

    def val_segments(self) -> Iterator[str]:
        if self.val_files is not None:
            yield from self._segments(self.val_files)
            return
        for i, seg in enumerate(self._segments(self.files)):
            if self._is_val(i):
                yield seg

    def fingerprint(self, cache_dir: Path) -> str:
        """Hash of every file's bytes (see content_hash.py for when a remembered one is used)."""
        memo = HashMemo(cache_dir)
        h = hashlib.blake2b(digest_size=16)
        for role, files in (("T", self.files), ("V", self.val_files or [])):
            for f in files:
                h.update(f"{role}{memo.file_hash(f)}".encode())
        memo.save()
        return h.hexdigest()
