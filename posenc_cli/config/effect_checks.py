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

from omegaconf import DictConfig

from posenc_cli.common.errors import PosencError
from posenc_cli.config.overrides import given
from posenc_cli.config.rescale_checks import check_given_sets
from posenc_cli.config.task_checks import is_task

STRIDE_KEYS = ("eval.stride", "eval.extrapolation.stride")


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
    """A data.* key the run's source does not read is refused when given (data.path with the
    built-in corpus, data.dataset with a file); then the source's own rules."""
    from posenc_cli.data.sources import source_class, source_classes

    d = cfg.data
    source = source_class(str(d.kind))
    sources = source_classes().values()
    for key in sorted({key for other in sources for key in other.reads} - set(source.reads)):
        if given(overrides, f"data.{key}") and d.get(key) is not None:
            reader = next(other for other in sources if key in other.reads)
            raise PosencError(
                f"data.{key} is set but data={d.name} reads {source.describes}, "
                f"not {reader.describes}",
                f"add data={reader.kind} to use it, or drop data.{key}",
            )
    source.check(d)


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
