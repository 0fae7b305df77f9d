"""`posenc extend RUN extend.factor=4 extend.method=yarn extend.steps=400` (registered in
app.py): fine-tune a trained run at S times its training length with a context-extension
method, into a new run directory that records its parent (config/extension.py). Every check
runs before the directory is created; `posenc resume NEW_RUN` continues it like any run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from posenc_cli.cli.errors import user_errors
from posenc_cli.common.errors import PosencError

if TYPE_CHECKING:
    from omegaconf import DictConfig

#: What an override may set besides extend.*: how the fine-tuning runs, not what it computes.
HOW = {
    "device",
    "hydra.run.dir",
    "eval.at_end",
    *(
        f"train.{k}"
        for k in (
            "threads",
            "compile",
            "nproc",
            "deterministic",
            "precision",
            "checkpoint_every",
            "eval_every",
            "eval_batches",
            "log_every",
        )
    ),
}
#: extend.* keys that `posenc extend` writes itself.
RECORDED = ("parent", "parent_step", "parent_sha256", "original_length")


def extend(
    run_dir: Annotated[Path, typer.Argument(help="A trained run directory (the parent)")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            show_default=False,
            help="extend.method (none|pi|ntk|dynamic_ntk|yarn|llama3), extend.factor, "
            "extend.steps, extend.lr, extend.warmup_steps, extend.batch_size, "
            "extend.checkpoint; device, train.threads, hydra.run.dir, ...",
        ),
    ] = None,
) -> None:
    """Continue a trained run at factor x its training length with a context-extension
    method (configs/extend/default.yaml); writes a new run directory."""
    from omegaconf import OmegaConf

    from posenc_cli.cli.console import print_run_summary
    from posenc_cli.cli.preflight import preflight
    from posenc_cli.cli.ranks import run_job
    from posenc_cli.config.rundir import claim_new_run_dir

    args = list(overrides or [])
    with user_errors():
        cfg, planned = plan_extension(run_dir, args)
        preflight(cfg)
        where = OmegaConf.create({"hydra": {"run": {"dir": str(planned)}}})
        child = claim_new_run_dir(where, args)
        _save_config(child, cfg, args)
        t0 = time.perf_counter()
        metrics = run_job(cfg, child)
        if metrics is not None:
            print_run_summary(metrics, child, time.perf_counter() - t0)


def plan_extension(run_dir: Path, overrides: list[str]) -> tuple[DictConfig, Path]:
    """The new run's config and directory (checked, not created)."""
    from omegaconf import OmegaConf

    from posenc_cli.config.compose import compose, validate
    from posenc_cli.config.extension import child_config
    from posenc_cli.config.overrides import given
    from posenc_cli.config.rundir import load_run_config, planned_run_dir
    from posenc_cli.encodings.registry import encoding_class
    from posenc_cli.engine.extension import parent_checkpoint

    _check_overrides(overrides)
    requested = compose(overrides, with_hydra=True)
    ext = requested.extend
    parent = load_run_config(run_dir)
    enc = parent.encoding
    if ext.method != "none" and not encoding_class(str(enc._target_)).rotary:
        raise PosencError(
            f"extend.method={ext.method} needs a RoPE-family encoding, not '{enc.name}'",
            "use extend.method=none (continued training at the longer length), or extend a "
            "rope or xpos run",
        )
    step, sha256 = parent_checkpoint(run_dir, parent, str(ext.checkpoint))
    cfg = child_config(parent, ext, run_dir, step, sha256)
    for key in HOW - {"hydra.run.dir"}:
        if given(overrides, key):
            OmegaConf.update(cfg, key, OmegaConf.select(requested, key))
    validate(cfg)
    if given(overrides, "hydra.run.dir"):
        where = requested
    else:
        name = f"{time.strftime('%H-%M-%S')}-{enc.name}-{ext.method}x{float(ext.factor):g}"
        path = Path("outputs") / time.strftime("%Y-%m-%d") / name
        where = OmegaConf.create({"hydra": {"run": {"dir": str(path)}}})
    return cfg, planned_run_dir(where, overrides)


def _check_overrides(overrides: list[str]) -> None:
    """Only extend.* and how the run executes: the rest is the parent's."""
    from posenc_cli.config.overrides import key_of

    for key in map(key_of, overrides):
        if not (key.startswith("extend.") or key in HOW) or key.removeprefix("extend.") in RECORDED:
            raise PosencError(
                f"`posenc extend` cannot set {key}",
                "set extend.* (method, factor, steps, lr, warmup_steps, batch_size, "
                "checkpoint) or how it runs (device, train.threads, hydra.run.dir, ...)",
            )


def _save_config(run_dir: Path, cfg: DictConfig, overrides: list[str]) -> None:
    """.hydra/config.yaml and overrides.yaml, as `posenc train` leaves them."""
    from omegaconf import OmegaConf

    from posenc_cli.common.atomic import write_text_atomic

    write_text_atomic(run_dir / ".hydra" / "config.yaml", OmegaConf.to_yaml(cfg))
    write_text_atomic(
        run_dir / ".hydra" / "overrides.yaml", OmegaConf.to_yaml(OmegaConf.create(overrides))
    )
