"""The texts of a Hugging Face `datasets` source, streamed: a hub dataset, a builder over local
files (parquet, json/jsonl, csv, text with data.data_files), a folder of such files, or a
``save_to_disk`` folder.

Streaming means a 10 B-token source is read only as far as it is consumed. `datasets` is an
optional extra, imported only here; every way a source can fail (the package missing, the hub
out of reach with nothing cached, no such split or field) is one line.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from posenc_cli.common.errors import PosencError
from posenc_cli.data.config import DataConfig

BATCH_ROWS = 256
#: The longest document read: the tokenizer trainer cannot hold a single string much longer
#: (a 60 MB row ended the process from native code), and no text of a corpus needs one.
MAX_DOCUMENT_CHARS = 16 * 2**20
HUB_TIMEOUT = "POSENC_HUB_TIMEOUT"
DEFAULT_HUB_SECONDS = 120.0


def _datasets() -> Any:
    try:  # deferred: datasets is the optional [hf] extra
        import datasets
    except ImportError:
        raise PosencError(
            "data=hf needs the datasets package", 'install the extra: pip install -e ".[hf]"'
        ) from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def is_saved_folder(path: Path) -> bool:
    """A folder written by Dataset.save_to_disk or DatasetDict.save_to_disk."""
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


def _open(data_cfg: DataConfig) -> Any:
    """The split as a dataset that iterates rows (streamed unless it is already on disk)."""
    lib = _datasets()
    name = str(data_cfg.dataset)
    split = data_cfg.split
    local = Path(name).expanduser()
    if local.is_dir() and is_saved_folder(local):
        saved = lib.load_from_disk(str(local))
        if isinstance(saved, lib.DatasetDict):
            if split not in saved:
                raise ValueError(f"Bad split: {split}. Available splits: {list(saved)}")
            saved = saved[split]
        return saved
    files = data_cfg.data_files
    return lib.load_dataset(
        str(local) if local.is_dir() else name,
        name=data_cfg.subset,
        split=split,
        data_files=list(files) if files is not None and not isinstance(files, str) else files,
        revision=data_cfg.revision,
        streaming=True,
    )


def texts(data_cfg: DataConfig) -> Iterator[str]:
    """Every non-empty text of data.text_field, in the source's order. The source is opened
    here, in the caller's thread, where the deadline of ``_guarded`` holds (the tokenizer
    trainer consumes the returned iterator from a thread of its own)."""
    field = data_cfg.text_field
    rows = _guarded(data_cfg, lambda: _open(data_cfg))
    columns = rows.column_names
    if columns is not None and field not in columns:
        raise _no_field(data_cfg, columns)
    if columns is not None:
        rows = rows.select_columns([field])
    return _texts_of(data_cfg, rows, field)


def _texts_of(data_cfg: DataConfig, rows: Any, field: str) -> Iterator[str]:
    batches = rows.iter(batch_size=BATCH_ROWS)
    row = 0
    while (batch := _guarded(data_cfg, lambda: next(batches, None))) is not None:
        if field not in batch:
            raise _no_field(data_cfg, list(batch))
        for text in batch[field]:
            row += 1
            if text is None:
                continue
            if isinstance(text, str) and len(text) > MAX_DOCUMENT_CHARS:
                raise PosencError(
                    f"dataset '{data_cfg.dataset}': row {row} holds {len(text):,} characters in "
                    f"'{field}', more than the {MAX_DOCUMENT_CHARS:,} one document may have",
                    "split such documents into smaller ones, or leave them out of the source",
                )
            if not isinstance(text, str):
                raise PosencError(
                    f"data.text_field '{field}' holds {type(text).__name__}, not text",
                    "name a column of strings",
                )
            if text.strip():
                yield text


def _no_field(data_cfg: DataConfig, columns: list[str]) -> PosencError:
    return PosencError(
        f"dataset '{data_cfg.dataset}' has no field '{data_cfg.text_field}'",
        f"set data.text_field to one of: {', '.join(map(str, columns))}",
    )


def hub_seconds() -> float:
    """How long one step of reading a source (opening it, one batch of rows) may take:
    $POSENC_HUB_TIMEOUT seconds, 120 by default. A hub that accepts connections and never
    answers would otherwise hold `posenc train` silently for as long as its retries last."""
    given = os.environ.get(HUB_TIMEOUT)
    if given is None:
        return DEFAULT_HUB_SECONDS
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise PosencError(
            f"{HUB_TIMEOUT}={given!r} is not a number of seconds above 0",
            f"give e.g. {HUB_TIMEOUT}=120, or unset it for the default",
        )
    return seconds


class HubDeadline(BaseException):
    """Raised by _deadline's alarm. Not a TimeoutError: the HTTP stack turns that (it is
    socket.timeout) into a read timeout the hub client retries; a BaseException passes every
    ``except Exception`` on its way out, as KeyboardInterrupt does."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """HubDeadline inside the block after ``seconds`` (the main thread only: elsewhere a
    process cannot take a signal, and the block runs unbounded as before)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise HubDeadline(f"no answer within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _guarded(data_cfg: DataConfig, step: Any) -> Any:
    """``step()`` within hub_seconds(), with what `datasets` and the hub raise as one line."""
    try:
        with _deadline(hub_seconds()):
            return step()
    except PosencError:
        raise
    except HubDeadline as late:
        raise PosencError(
            f"dataset '{data_cfg.dataset}': the hub gave {late}",
            f"check the network and try again, set {HUB_TIMEOUT}=SECONDS to wait longer, or "
            "give local files (data.dataset=parquet data.data_files=…)",
        ) from None
    except (ConnectionError, TimeoutError) as exc:
        raise _unreachable(data_cfg, exc) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if "offline" in str(exc).lower() or "connect" in str(exc).lower():
            raise _unreachable(data_cfg, exc) from None
        raise PosencError(
            f"dataset '{data_cfg.dataset}' (split '{data_cfg.split}') cannot be read: "
            f"{_first_line(exc)}",
            "check data.dataset, data.subset, data.split and data.data_files",
        ) from None


def _unreachable(data_cfg: DataConfig, exc: BaseException) -> PosencError:
    return PosencError(
        f"dataset '{data_cfg.dataset}' is not cached and the hub cannot be reached "
        f"({type(exc).__name__})",
        "connect once to stream it, or give local files (data.dataset=parquet data.data_files=…)",
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 160 else line[:157] + "..."
