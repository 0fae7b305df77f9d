"""`posenc extend RUN extend.factor=4 extend.method=yarn extend.steps=400` (registered in
app.py): fine-tune a trained run at S times its training length with a context-extension
method, into a new run directory that records its parent (config/extension.py). Every check
runs before the directory is created; `posenc resume NEW_RUN` continues it like any run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from omegaconf import OmegaConf

from posenc_cli.cli.errors import user_errors

if TYPE_CHECKING:
    from posenc_cli.workflows.extend_plan import Job


def extend(
    run_dir: Annotated[Path, typer.Argument(help="A trained run directory (the parent)")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            show_default=False,
            help="extend.method (none|pi|ntk|dynamic_ntk|yarn|llama3|longrope), "
            "extend.factor (1: continued training at the training length, method none), "
            "extend.steps (0: the method without fine-tuning), "
            "extend.long_factor and extend.short_factor (longrope's; null: searched), "
            "extend.passkey_share (the share of windows that are passkey windows), "
            "extend.lr, extend.warmup_steps, extend.batch_size, extend.checkpoint; "
            "experiment=context_extension; device, train.threads, hydra.run.dir, ...",
        ),
    ] = None,
) -> None:
    """Continue a trained run at factor x its training length with a context-extension
    method (configs/extend/default.yaml), or at its own length (extend.factor=1
    extend.method=none, e.g. a passkey fine-tune with extend.passkey_share=1.0); writes a new
    run directory. Swept values (extend.method=pi,yarn) or experiment=context_extension run
    every combination."""
    # deferred: cli/app.py imports this module; `posenc --help` stays torch-free
    from posenc_cli.config.run_config import typed
    from posenc_cli.workflows.extend_plan import plan_jobs
    from posenc_cli.workflows.preflight import preflight

    with user_errors():
        jobs, root = plan_jobs(run_dir, list(overrides or []))
        for job in jobs:
            if job.cfg is not None:
                preflight(typed(job.cfg))
        _print_pair_regions(run_dir)
        _print_unfinished_parent(run_dir, jobs)
        if root is not None:
            print(f"posenc extend: {len(jobs)} jobs in {root}", flush=True)
        for job in jobs:
            _run(run_dir, job)
        if root is not None:
            print(f"posenc extend: compare them with: posenc compare {run_dir} {root}")


def _print_pair_regions(run_dir: Path) -> None:
    """For a RoPE-family parent, which pairs the methods treat alike (encodings/rope_regions.py):
    whether this model can separate the methods at all."""
    # deferred: torch (rope.py) only once the jobs are planned and checked
    from posenc_cli.config.encoding_checks import is_rotary
    from posenc_cli.config.run_config import typed
    from posenc_cli.config.rundir import load_run_config
    from posenc_cli.encodings.rope import rotary_frequencies
    from posenc_cli.encodings.rope_regions import describe, pair_regions

    saved = load_run_config(run_dir)
    if not is_rotary(saved.encoding):
        return
    parent = typed(saved)
    enc = parent.encoding.params
    inv, _ = rotary_frequencies(
        parent.model.d_model // parent.model.n_heads,
        enc["theta"],
        enc.get("rotary_fraction", 1.0),
        enc.get("p", 1.0),
    )
    for line in describe(pair_regions(inv.tolist(), parent.train.context_length)):
        print(f"posenc extend: {line}", flush=True)


def _print_unfinished_parent(run_dir: Path, jobs: list[Job]) -> None:
    """A parent stopped before its train.steps (a signal, a crash) is extended from its last
    checkpoint as it is: say so, since its metrics.json has no final losses to compare."""
    from posenc_cli.config.rundir import load_run_config  # deferred: see _run

    total = int(load_run_config(run_dir).train.steps)
    steps = [
        int(job.cfg.extend.parent_step)
        for job in jobs
        if job.cfg is not None and job.cfg.extend.checkpoint == "last"
    ]
    if steps and steps[0] < total:
        print(
            f"posenc extend: note: {run_dir} stopped at step {steps[0]} of its {total} (its "
            "last checkpoint); the extension starts from there",
            flush=True,
        )


def _run(run_dir: Path, job: Job) -> None:
    """Train one new run, or evaluate the parent with the method (extend.steps=0)."""

    # deferred: cli/app.py imports this module; `posenc --help` stays torch-free
    from posenc_cli.cli.console import print_eval_result, print_run_summary
    from posenc_cli.config.run_config import typed
    from posenc_cli.config.rundir import claim_new_run_dir, save_run_config, unlock_run_dir
    from posenc_cli.evals.run import evaluate_run
    from posenc_cli.workflows.extend_search import with_rescale_sets
    from posenc_cli.workflows.ranks import run_job

    if job.cfg is None:
        cfg, out = evaluate_run(run_dir, list(job.eval_overrides))  # it frees the run after
        for key, result in out.items():
            print_eval_result(run_dir, cfg, key, result)
        return
    planned = with_rescale_sets(job.cfg)  # longrope's missing factors, before the run exists
    where = OmegaConf.create({"hydra": {"run": {"dir": str(job.planned)}}})
    child = claim_new_run_dir(where, list(job.overrides))
    save_run_config(child, planned, list(job.overrides))
    metrics = run_job(typed(planned), child)
    unlock_run_dir(child)  # free for `posenc eval` while a grid goes on
    if metrics is not None:
        print_run_summary(metrics, child)
