"""The texts of a Hugging Face `datasets` source, streamed: a hub dataset, a builder over local
files (parquet, json/jsonl, csv, text with data.data_files), a folder of such files, or a
``save_to_disk`` folder.

Streaming means a 10 B-token source is read only as far as it is consumed. `datasets` is an
optional extra, imported only here; every way a source can fail (the package missing, the hub
out of reach with nothing cached, no such split or field) is one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from posenc_cli.common.errors import PosencError

BATCH_ROWS = 256


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


def _open(data_cfg: Any) -> Any:
    """The split as a dataset that iterates rows (streamed unless it is already on disk)."""
    lib = _datasets()
    name = str(data_cfg.dataset)
    split = str(data_cfg.split)
    local = Path(name).expanduser()
    if local.is_dir() and is_saved_folder(local):
        saved = lib.load_from_disk(str(local))
        if isinstance(saved, lib.DatasetDict):
            if split not in saved:
                raise ValueError(f"Bad split: {split}. Available splits: {list(saved)}")
            saved = saved[split]
        return saved
    files = data_cfg.get("data_files")
    return lib.load_dataset(
        str(local) if local.is_dir() else name,
        name=data_cfg.get("subset"),
        split=split,
        data_files=list(files) if files is not None and not isinstance(files, str) else files,
        revision=data_cfg.get("revision"),
        streaming=True,
    )


def texts(data_cfg: Any) -> Iterator[str]:
    """Every non-empty text of data.text_field, in the source's order."""
    field = str(data_cfg.text_field)
    rows = _guarded(data_cfg, lambda: _open(data_cfg))
    columns = rows.column_names
    if columns is not None and field not in columns:
        raise _no_field(data_cfg, columns)
    if columns is not None:
        rows = rows.select_columns([field])
    batches = rows.iter(batch_size=BATCH_ROWS)
    while (batch := _guarded(data_cfg, lambda: next(batches, None))) is not None:
        if field not in batch:
            raise _no_field(data_cfg, list(batch))
        for text in batch[field]:
            if text is None:
                continue
            if not isinstance(text, str):
                raise PosencError(
                    f"data.text_field '{field}' holds {type(text).__name__}, not text",
                    "name a column of strings",
                )
            if text.strip():
                yield text


def _no_field(data_cfg: Any, columns: list[str]) -> PosencError:
    return PosencError(
        f"dataset '{data_cfg.dataset}' has no field '{data_cfg.text_field}'",
        f"set data.text_field to one of: {', '.join(map(str, columns))}",
    )


def _guarded(data_cfg: Any, step: Any) -> Any:
    """``step()``, with what `datasets` and the hub raise as one line."""
    try:
        return step()
    except PosencError:
        raise
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


def _unreachable(data_cfg: Any, exc: BaseException) -> PosencError:
    return PosencError(
        f"dataset '{data_cfg.dataset}' is not cached and the hub cannot be reached "
        f"({type(exc).__name__})",
        "connect once to stream it, or give local files (data.dataset=parquet data.data_files=…)",
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 160 else line[:157] + "..."
