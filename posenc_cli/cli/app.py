"""The `posenc` command line: Typer commands that parse, call the stage that does the work,
and print.

Every user-fixable problem is printed as one line `posenc: error: <what> — <fix>` with exit
code 2; an unexpected exception is one line saying it is a bug and where its traceback is.

Every import inside a function here defers torch, Hydra or a stage, so `posenc --help`,
`posenc COMMAND --help`, `posenc encodings` and one-line config errors answer without them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from posenc_cli.cli import compare_command, cs336_commands, extend_command, hf_commands
from posenc_cli.cli.arguments import OVERRIDES
from posenc_cli.cli.errors import fail, user_errors
from posenc_cli.common.errors import PosencError
from posenc_cli.config.groups import GROUPS, group_options

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from posenc_cli.config.run_config import RunConfig


def _groups_help() -> str:
    lines = ["Config groups (choose with GROUP=OPTION):"]
    for g in GROUPS:
        lines.append(f"  {g}: {', '.join(group_options(g)) or '-'}")
    lines.append(
        "Any key with KEY=VALUE, e.g. model.d_model=256 train.steps=500 seed=1 "
        "device=cpu hydra.run.dir=outputs/my-run"
    )
    return "\n\n".join(lines)


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Train small decoder LMs with different positional encodings and "
    "compare their length extrapolation.\n\n" + _groups_help(),
)


def _train_job(cfg: RunConfig, run_dir: Path) -> None:
    from posenc_cli.cli.console import print_run_summary  # deferred: see the module docstring
    from posenc_cli.workflows.ranks import run_job

    with user_errors():
        metrics = run_job(cfg, run_dir)
        if metrics is not None:
            print_run_summary(metrics, run_dir)


@app.command(epilog=_groups_help())
def train(overrides: list[str] | None = OVERRIDES) -> None:
    """Train one model; writes a run directory under outputs/ (or hydra.run.dir)."""
    overrides = list(overrides or [])
    with user_errors():
        if _follow_rank_zero():
            return
        from posenc_cli.config.compose import compose

        cfg = compose(overrides, with_hydra=True)
        if cfg.resume:
            return _resume(Path(str(cfg.resume)), cfg, overrides)
        from posenc_cli.config.run_config import typed
        from posenc_cli.config.rundir import claim_new_run_dir, planned_run_dir
        from posenc_cli.workflows.launch import run_once
        from posenc_cli.workflows.preflight import preflight

        planned_run_dir(cfg, overrides)  # checked before any tokenizing
        preflight(typed(cfg))
        run_once(cfg, overrides, claim_new_run_dir(cfg, overrides), _train_job)


@app.command()
def resume(
    run_dir: Path = typer.Argument(..., help="A run directory with checkpoints/"),
    overrides: list[str] | None = typer.Argument(
        None,
        show_default=False,
        help="Only how it runs may change: device, train.threads, train.compile, train.nproc",
    ),
) -> None:
    """Continue a run from its last checkpoint, exactly where it stopped."""
    overrides = list(overrides or [])
    with user_errors():
        from posenc_cli.config.compose import compose

        if not _follow_rank_zero():
            _resume(run_dir, compose(overrides) if overrides else None, overrides)


def _resume(
    run_dir: Path, requested: DictConfig | None = None, overrides: list[str] | None = None
) -> None:
    from posenc_cli.config.run_config import typed
    from posenc_cli.engine.resume import resume_config

    cfg = typed(resume_config(run_dir, requested, overrides))  # one-line errors, no torch
    from posenc_cli.cli.console import print_run_summary
    from posenc_cli.config.rundir import lock_run_dir
    from posenc_cli.engine.saved_config import check_run_checkpoint
    from posenc_cli.workflows.preflight import preflight
    from posenc_cli.workflows.ranks import run_job

    check_run_checkpoint(run_dir, cfg)
    preflight(cfg)
    lock_run_dir(run_dir)
    metrics = run_job(cfg, run_dir, resume=True)
    if metrics is not None:
        print_run_summary(metrics, run_dir)


def _follow_rank_zero() -> bool:
    """Under torchrun, a rank other than 0 trains the job rank 0 prepares; True when done."""
    if not _under_launcher():
        return False
    from posenc_cli.workflows.ranks import follow, is_follower

    if not is_follower():
        return False
    follow()
    return True


@app.command("eval")
def eval_command(
    run_dir: Path = typer.Argument(..., help="A run directory made by `posenc train`"),
    overrides: list[str] | None = typer.Argument(
        None,
        show_default=False,
        help="eval.*, data=NAME, data.* or device, e.g. eval.mode=sliding eval.stride=64 "
        "or data=text data.path=OTHER.txt",
    ),
) -> None:
    """Evaluate a trained run again (the tasks of eval.tasks) or on other text."""
    with user_errors():
        from posenc_cli.cli.console import print_eval_result
        from posenc_cli.evals.run import evaluate_run

        cfg, out = evaluate_run(run_dir, list(overrides or []))
        for key, result in out.items():
            print_eval_result(run_dir, cfg, key, result)


@app.command("inspect", epilog=_groups_help())
def inspect_command(
    target: list[str] | None = typer.Argument(
        None,
        show_default=False,
        metavar="[RUN_DIR] [OVERRIDES]...",
        help="A run directory (its last checkpoint, never retrained), or config overrides "
        "such as encoding=rope encoding.theta=500 (an untrained model)",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Folder for a config's figures "
        "[default: a new one under outputs/inspect/]; a "
        "run's go to RUN_DIR/inspect/",
    ),
) -> None:
    """The derivations drawn for your encoding, or what a trained run's heads do."""
    args = list(target or [])
    with user_errors():
        from posenc_cli.cli.console import print_inspect_report
        from posenc_cli.inspection.run import inspect_config, inspect_run

        if args and (Path(args[0]).is_dir() or "=" not in args[0]):  # a run's path may hold '='
            run_dir = Path(args[0])
            if not run_dir.is_dir():
                raise PosencError(
                    f"'{run_dir}' is not a run directory",
                    "pass a folder made by `posenc train`, or overrides such as encoding=rope",
                )
            if out is not None:
                raise PosencError(
                    "--out is for a config; a run's figures go to RUN_DIR/inspect/", "drop --out"
                )
            report = inspect_run(run_dir, args[1:])
        else:
            report = inspect_config(args, out)
        print_inspect_report(report)


@app.command()
def encodings() -> None:
    """List the positional encodings (one YAML each in configs/encoding/)."""
    from posenc_cli.cli.console import print_encodings

    print_encodings()


@app.command(epilog=_groups_help())
def sweep(overrides: list[str] | None = OVERRIDES) -> None:
    """Run a Hydra multirun, e.g. `posenc sweep encoding=rope,alibi seed=0,1,2` or
    `posenc sweep experiment=extrapolation`; all runs land under one sweep directory."""
    from posenc_cli.workflows.sweep import run_sweep

    with user_errors():
        run_sweep(list(overrides or []))


@app.command(epilog=_groups_help())
def bench(overrides: list[str] | None = OVERRIDES) -> None:
    """Training and long-evaluation throughput, MFU and peak memory of every encoding, each
    case in a fresh process; writes bench.json under outputs/bench/ (or hydra.run.dir)."""
    from posenc_cli.bench.suite import compose_bench, failed_cases, run_bench
    from posenc_cli.bench.tables import print_report

    with user_errors():
        cfg, run_dir = compose_bench(list(overrides or []))
        report = run_bench(cfg, run_dir, list(overrides or []))
        print_report(report, Path(report["run_dir"]))
    failed = failed_cases(report)
    if failed:
        fail(
            f"posenc: {len(failed)} of {len(report['records'])} bench cases failed "
            f"(first: {failed[0][:200]}); every error is in {report['run_dir']}/bench.json",
            1,
        )


app.command("compare")(compare_command.compare)
app.command("import-cs336")(cs336_commands.import_cs336)
app.command("export-cs336")(cs336_commands.export_cs336)
app.command("export-hf")(hf_commands.export_hf)
app.command("import-hf")(hf_commands.import_hf)
app.command("extend", epilog=_groups_help())(extend_command.extend)


def main() -> None:
    """The `posenc` entry point: Click's usage errors become the one-line form too."""
    from typer._click import exceptions as cli_errors  # typer ships its own click

    _refuse_torchrun_unless_training()
    try:
        app(standalone_mode=False)
    except cli_errors.NoArgsIsHelpError as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except cli_errors.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "posenc"
        fail(f"posenc: error: {exc.format_message()} — see `{command} --help`")
    except typer.Abort:
        fail("posenc: interrupted", 130)


def _refuse_torchrun_unless_training() -> None:
    """torchrun starts one process per rank; only training uses them."""
    if not _under_launcher():
        return
    from posenc_cli.engine.distributed import launched_ranks

    command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
    if launched_ranks() > 1 and command not in ("train", "resume"):
        fail(
            f"posenc: error: `posenc {command}` under torchrun — only `posenc train` and "
            f"`posenc resume` run as several ranks; run `posenc {command}` without torchrun"
        )


def _under_launcher() -> bool:
    """Whether a launcher (torchrun, train.nproc) started this process. Only then are the rank
    helpers, and torch with them, imported: help and one-line config errors print without."""
    return "RANK" in os.environ


if __name__ == "__main__":
    main()
