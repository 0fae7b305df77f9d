"""What preparing a corpus shows while it runs: per stage (tokenizer, train, val) the documents,
the ids and the MB/s of text read, on one live line and then a summary line per stage, so a
long preparation (a 1 B-token corpus takes its time) is never silent. Outside a terminal
nothing is printed: logs and captured output stay as they were."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Self

from rich.progress import Progress, TaskID, TextColumn, TimeElapsedColumn

from posenc_cli.common.console import console


class PrepProgress:
    """Counts of one stage; ``add`` is called once per encoded batch, ``counted`` wraps a
    stream of documents (the tokenizer's, which has no batches of its own)."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.docs = self.ids = self.bytes = 0
        self.t0 = time.perf_counter()
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> Self:
        if sys.stdout.isatty():
            self._bar = Progress(
                TextColumn(f"[bold]preparing data: {self.stage}"),
                TextColumn("{task.fields[line]}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.stage, total=None, line="")
        return self

    def add(self, docs: int, ids: int, size: int) -> None:
        """``docs`` more documents of ``size`` UTF-8 bytes, encoded into ``ids`` ids."""
        self.docs = self.docs + docs
        self.ids = self.ids + ids
        self.bytes = self.bytes + size
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, line=self.line())

    @property
    def shown(self) -> bool:
        """Whether anything is displayed (a terminal), so callers skip counting otherwise."""
        return self._bar is not None

    def counted(self, docs: Iterator[str]) -> Iterator[str]:
        for doc in docs:
            if self._bar is not None:
                self.add(1, 0, len(doc.encode("utf-8")))
            yield doc

    def line(self) -> str:
        seconds = max(time.perf_counter() - self.t0, 1e-9)
        ids = f", {self.ids:,} ids" if self.ids else ""
        return f"{self.docs:,} documents{ids}, {self.bytes / 1e6 / seconds:.1f} MB/s"

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is None:
            return
        self._bar.__exit__(exc_type, exc, tb)
        if exc_type is None:
            seconds = time.perf_counter() - self.t0
            console.print(f"prepared data: {self.stage}: {self.line()} in {seconds:.1f} s")
