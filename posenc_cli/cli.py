"""The `posenc` command line: thin Typer commands over config, train, evaluate and report.

Every user-fixable problem is printed as one line `posenc: error: <what> — <fix>` with exit
code 2; nothing here prints a traceback for bad input.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import typer
from omegaconf import DictConfig

from posenc_cli.config import GROUPS, compose, group_options, resolve_run_dir
from posenc_cli.errors import Interrupted, PosencError


def _groups_help() -> str:
    lines = ["Config groups (choose with GROUP=OPTION):"]
    for g in GROUPS:
        lines.append(f"  {g}: {', '.join(group_options(g)) or '-'}")
    lines.append("Any key with KEY=VALUE, e.g. model.d_model=256 train.steps=500 seed=1 "
                 "device=cpu hydra.run.dir=outputs/my-run")
    return "\n\n".join(lines)


app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Train small decoder LMs with different positional encodings and "
                       "compare their length extrapolation.\n\n" + _groups_help())
OVERRIDES = typer.Argument(None, help="Hydra overrides, e.g. encoding=rope train.steps=500",
                           show_default=False)


def fail(message: str, code: int = 2) -> None:
    """Print one line and exit. SystemExit (not typer.Exit) so it also passes through Hydra,
    which would report any Exception raised inside a job as a failure with exit code 1."""
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn PosencError and Ctrl-C outside the training loop into one line and an exit code."""
    try:
        yield
    except PosencError as exc:
        fail(f"posenc: error: {exc}")
    except Interrupted as exc:
        fail(str(exc), exc.code)
    except KeyboardInterrupt:
        fail("posenc: interrupted", 130)


def _train_job(cfg: DictConfig, run_dir: Path) -> None:
    from posenc_cli.summary import print_run_summary
    from posenc_cli.train import train

    t0 = time.perf_counter()
    with user_errors():
        metrics = train(cfg, run_dir)
        print_run_summary(metrics, run_dir, time.perf_counter() - t0)


@app.command(epilog=_groups_help())
def train(overrides: Optional[list[str]] = OVERRIDES) -> None:
    """Train one model; writes a run directory under outputs/ (or hydra.run.dir)."""
    from posenc_cli.launch import launch, quote

    overrides = list(overrides or [])
    with user_errors():
        cfg = compose(overrides, with_hydra=True)
        if cfg.resume:
            return _resume(Path(str(cfg.resume)), cfg, overrides)
        run_dir = resolve_run_dir(cfg, overrides)
        from posenc_cli.data.dataset import prepare
        from posenc_cli.train import check_data_fits

        check_data_fits(prepare(cfg.data), cfg)
        _check_writable(run_dir)
        launch([*overrides, f"hydra.run.dir={quote(str(run_dir))}"], _train_job)


def _check_writable(run_dir: Path) -> None:
    """Fail before Hydra starts when the run directory cannot be created."""
    import os

    parent = run_dir.absolute()
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise PosencError(f"cannot create the run directory '{run_dir}': '{parent}' is a file",
                          "choose another place with hydra.run.dir=DIR")
    if not os.access(parent, os.W_OK):
        raise PosencError(f"cannot create the run directory '{run_dir}': '{parent}' is not "
                          "writable", "choose a writable place with hydra.run.dir=DIR")


@app.command()
def resume(run_dir: Path = typer.Argument(..., help="A run directory with checkpoints/")) -> None:
    """Continue a run from its last checkpoint, exactly where it stopped."""
    with user_errors():
        _resume(run_dir)


#: Keys that may differ from the checkpoint's config on resume: they change how the run is
#: executed, not what it computes (beyond float rounding on another device or compiled).
RESUME_MAY_CHANGE = {"resume", "device", "train.threads", "train.compile"}


def _resume(run_dir: Path, requested: DictConfig | None = None,
            overrides: list[str] | None = None) -> None:
    from omegaconf import OmegaConf

    from posenc_cli.config import validate
    from posenc_cli.eval_run import load_run_config
    from posenc_cli.summary import print_run_summary
    from posenc_cli.train import train as train_run

    cfg = load_run_config(run_dir)
    validate(cfg)
    for override in overrides or []:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in RESUME_MAY_CHANGE or requested is None:
            continue
        new, old = (_short(OmegaConf.select(c, key)) for c in (requested, cfg))
        if new != old:
            raise PosencError(f"{key} is {old} in the checkpoint's config but {new} was asked",
                              "resume with the run's own settings, or start a new run")
    for key in RESUME_MAY_CHANGE - {"resume"}:
        if requested is not None:
            OmegaConf.update(cfg, key, OmegaConf.select(requested, key))
    t0 = time.perf_counter()
    metrics = train_run(cfg, run_dir, resume=True)
    print_run_summary(metrics, run_dir, time.perf_counter() - t0)


@app.command("eval")
def eval_command(
        run_dir: Path = typer.Argument(..., help="A run directory made by `posenc train`"),
        overrides: Optional[list[str]] = typer.Argument(
            None, show_default=False,
            help="eval.*, data=NAME, data.* or device, e.g. eval.mode=sliding eval.stride=64 "
                 "or data=text data.path=OTHER.txt")) -> None:
    """Length extrapolation of a trained run, again or on other text; merged into metrics.json."""
    with user_errors():
        from posenc_cli.eval_run import evaluate_run

        evaluate_run(run_dir, list(overrides or []))


def _short(value: Any) -> Any:
    """A group's config shown by its name (encoding=alibi), other values as they are."""
    return value.get("name", value) if isinstance(value, DictConfig) else value


@app.command()
def encodings() -> None:
    """List the positional encodings (one YAML each in configs/encoding/)."""
    from posenc_cli.summary import print_encodings

    print_encodings()


@app.command()
def compare(
    dirs: list[Path] = typer.Argument(..., metavar="DIR", show_default=False,
                                      help="Run directories, or sweep directories that "
                                      "contain them at any depth (each has metrics.json)"),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write comparison.csv, "
                                       "comparison.md and the plots [default: the one input "
                                       "directory, else the current directory]"),
) -> None:
    """Compare encodings: perplexity by evaluation length, mean ± std over seeds."""
    from posenc_cli.report import compare as compare_runs

    with user_errors():
        compare_runs(dirs, out)


@app.command(epilog=_groups_help())
def sweep(overrides: Optional[list[str]] = OVERRIDES) -> None:
    """Run a Hydra multirun, e.g. `posenc sweep encoding=rope,alibi seed=0,1,2` or
    `posenc sweep experiment=extrapolation`; all runs land under one sweep directory."""
    from posenc_cli.data.dataset import prepare
    from posenc_cli.launch import launch, quote
    from posenc_cli.sweep import (name_by_swept_keys, plan, summarize, sweep_dir, sweep_job,
                                  write_plan)

    overrides = list(overrides or [])
    with user_errors():
        base, jobs = plan(overrides)
        root = sweep_dir(base, overrides)
        for data_cfg in {str(compose(job).data): compose(job).data for job in jobs}.values():
            prepare(data_cfg)
        print(f"posenc sweep: {len(jobs)} jobs in {root}", flush=True)
        write_plan(root, jobs)
        launch([*overrides, f"hydra.sweep.dir={quote(str(root))}", name_by_swept_keys(overrides)],
               sweep_job, multirun=True)
        done, failed = summarize(root)
        print(f"posenc sweep: {done} of {len(jobs)} jobs finished; compare them with: "
              f"posenc compare {root}", flush=True)
        for job_dir, why in failed:
            print(f"  failed: {job_dir.name}: {why}", flush=True)
        if failed:
            raise SystemExit(1)


@app.command(epilog=_groups_help())
def bench(overrides: Optional[list[str]] = OVERRIDES) -> None:
    """Training and long-evaluation throughput, MFU and peak memory of every encoding, each
    case in a fresh process; writes bench.json under outputs/bench/ (or hydra.run.dir)."""
    from posenc_cli.bench import compose_bench, run_bench
    from posenc_cli.bench_report import print_report

    with user_errors():
        cfg, run_dir = compose_bench(list(overrides or []))
        _check_writable(run_dir)
        print_report(run_bench(cfg, run_dir), run_dir)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
