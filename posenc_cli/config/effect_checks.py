"""Values given on the command line that would be silently ignored or recorded as something
that did not happen.

A value the user gives either takes effect or is refused in one line; a value that comes from
elsewhere (a run's saved config, a default) and does not apply is recorded as unused (the
evaluation stores ``stride: null`` outside sliding mode) rather than refused, so every saved
run still resumes and evaluates, and no default combination is an error. A sliding stride
longer than every evaluated length is refused wherever it comes from: the result would be
labelled sliding but be non-overlapping throughout. The token budget's check (one window of
the longest length) is the extrapolation task's own (evals/tasks/extrapolation.py).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from posenc_cli.common.errors import PosencError
from posenc_cli.config.overrides import given
from posenc_cli.config.rescale_checks import check_given_sets
from posenc_cli.config.task_checks import is_task

STRIDE_KEYS = ("eval.stride", "eval.extrapolation.stride")
#: The data keys only data=hf reads.
HF_KEYS = (
    "dataset",
    "subset",
    "split",
    "text_field",
    "data_files",
    "revision",
    "train_tokens",
    "documents",
)


def check_effects(cfg: DictConfig, overrides: list[str]) -> None:
    """The data source and the extrapolation settings (after the older flat eval.* keys were
    folded into eval.extrapolation) against this command's ``overrides``."""
    _check_data_source(cfg, overrides)
    check_given_sets(cfg.eval.extrapolation, overrides)
    if "extrapolation" in cfg.eval.tasks and not is_task(cfg):
        _check_stride(cfg.eval.extrapolation, int(cfg.train.context_length), overrides)


def check_new_run(cfg: DictConfig, overrides: list[str]) -> None:
    """A warmup the user gives ends within the run (the default one is honoured as it is: a
    short run then ramps towards train.lr for all its steps, as its config says)."""
    _warmup_within(cfg.train, "train", overrides)


def check_extension_schedule(ext: DictConfig, overrides: list[str]) -> None:
    """`posenc extend` follows train's rule for its own schedule (extend.warmup_steps against
    extend.steps): a warmup longer than the fine-tuning would hold it at a fraction of
    extend.lr throughout."""
    _warmup_within(ext, "extend", overrides)


def _warmup_within(section: DictConfig, name: str, overrides: list[str]) -> None:
    warmup, steps = int(section.warmup_steps), int(section.steps)
    if given(overrides, f"{name}.warmup_steps") and warmup > steps:
        rate = "train.lr" if name == "train" else "extend.lr"
        raise PosencError(
            f"{name}.warmup_steps={warmup} is longer than the run ({name}.steps={steps}), "
            f"so the learning rate would never reach {rate}",
            f"use {name}.warmup_steps <= {steps}, e.g. {name}.warmup_steps={max(steps // 20, 0)}",
        )


def _check_data_source(cfg: DictConfig, overrides: list[str]) -> None:
    """data.path and data.val_path are read only by data=text (and the groups built on it),
    the `datasets` keys only by data=hf."""
    d = cfg.data
    if str(d.kind) != "text":
        for key in ("path", "val_path"):
            if given(overrides, f"data.{key}") and d.get(key) is not None:
                reads = "a `datasets` source" if str(d.kind) == "hf" else "its built-in corpus"
                raise PosencError(
                    f"data.{key} is set but data={d.name} reads {reads}, not a file",
                    f"add data=text to use the file, or drop data.{key}",
                )
    if str(d.kind) == "hf":
        _check_local_source(d)
    else:
        for key in HF_KEYS:
            if given(overrides, f"data.{key}"):
                raise PosencError(
                    f"data.{key} is set but data={d.name} does not read a `datasets` source",
                    f"add data=hf to use it, or drop data.{key}",
                )


#: `datasets` builders that read the files data.data_files names (no hub dataset of that name).
FILE_BUILDERS = ("parquet", "json", "csv", "text", "arrow")


def _check_local_source(d: DictConfig) -> None:
    """A builder reads only the files it is given (without data.data_files, `datasets` would
    read whatever such files lie in the current folder), and local files have no hub subset
    or revision to honour."""
    name = str(d.dataset)
    builder = name in FILE_BUILDERS
    if builder and d.get("data_files") is None:
        raise PosencError(
            f"data.dataset={name} reads the files data.data_files names, and none are given",
            f"give them, e.g. data.data_files=corpus.{name}, or '[a.{name},b.{name}]'",
        )
    if builder or Path(name).expanduser().is_dir():
        for key in ("subset", "revision"):
            if d.get(key) is not None:
                raise PosencError(
                    f"data.{key}={d.get(key)} is set but data.dataset={name} reads local files, "
                    f"which have no hub {key}",
                    f"drop data.{key}",
                )


def _check_stride(ex: DictConfig, train_length: int, overrides: list[str]) -> None:
    """A stride given outside sliding mode is unused; a sliding stride above every length is
    capped to that length everywhere, i.e. non-overlapping under a sliding label. A stride
    between the shortest and the longest length slides where it can (each length's stride is
    recorded)."""
    stride = ex.stride
    if stride is None:
        return
    if str(ex.mode) != "sliding":
        if any(given(overrides, key) for key in STRIDE_KEYS):
            raise PosencError(
                f"eval.stride={stride} has no effect with eval.mode={ex.mode}",
                "add eval.mode=sliding, or drop eval.stride",
            )
        return
    longest = max(int(f) for f in ex.factors) * train_length
    if int(stride) > longest:
        raise PosencError(
            f"eval.stride={stride} is longer than the longest evaluated length {longest} "
            "(train.context_length x the largest eval.factors), so no window would overlap",
            f"use eval.stride <= {longest}, or eval.mode=nonoverlapping",
        )
