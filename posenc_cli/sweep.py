"""`posenc sweep`: a Hydra multirun over encodings x seeds (or any keys).

Every job is validated before the first one starts, the data is prepared once, one failing job
never stops the others, and the sweep ends with a list of what failed and why.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posenc_cli.config import check_group_choices, compose, expand_sweep, fixed_overrides
from posenc_cli.errors import Interrupted, PosencError
from posenc_cli.progress import console

FAILED_FILE = "FAILED.txt"


def plan(overrides: list[str]) -> tuple[DictConfig, list[list[str]]]:
    """The base config and the override list of every job, each one composed and validated."""
    check_group_choices(overrides)
    base = compose(fixed_overrides(overrides), with_hydra=True)
    params = base.hydra.sweeper.get("params") or {}
    jobs = expand_sweep(overrides, {str(k): str(v) for k, v in params.items()})
    for job in jobs:
        try:
            compose(job)
        except PosencError as exc:
            raise PosencError(f"sweep job [{' '.join(job)}]: {exc.what}", exc.fix) from None
    return base, jobs


def sweep_dir(base: DictConfig, overrides: list[str]) -> Path:
    explicit = any(o.split("=", 1)[0] == "hydra.sweep.dir" for o in overrides)
    root = Path(str(base.hydra.sweep.dir))
    if explicit and root.exists() and any(root.iterdir()):
        raise PosencError(f"sweep directory '{root}' already exists",
                          "choose a new hydra.sweep.dir")
    candidate, n = root, 1
    while candidate.exists():
        candidate = root.with_name(f"{root.name}-{n}")
        n += 1
    return candidate


def name_by_swept_keys(overrides: list[str]) -> str:
    """Override that names job directories by the swept keys only (`encoding=alibi,seed=0`)."""
    def key(text: str) -> str:
        return text.split("=", 1)[0].lstrip("+~")

    fixed = fixed_overrides(overrides)
    swept = {key(o) for o in overrides if o not in fixed}
    keys = sorted(({key(o) for o in fixed} - swept) |
                  {"hydra.launcher.n_jobs", "device", "experiment"})
    return f"hydra.job.config.override_dirname.exclude_keys=[{','.join(keys)}]"


def sweep_job(cfg: DictConfig, run_dir: Path) -> dict[str, Any] | None:
    """One job of the multirun: train, and on failure leave FAILED.txt instead of raising."""
    from posenc_cli.train import train

    label = f"{cfg.encoding.name} seed {cfg.seed}"
    console.print(f"[bold]sweep job[/bold] {run_dir.name}")
    t0 = time.perf_counter()
    try:
        metrics = train(cfg, run_dir)
    except Interrupted as exc:
        raise KeyboardInterrupt(str(exc)) from None
    except PosencError as exc:
        (run_dir / FAILED_FILE).write_text(f"posenc: error: {exc}\n")
        console.print(f"[red]failed[/red] {label}: {exc}")
        return None
    except Exception as exc:  # one broken job must not stop the sweep; keep its traceback
        (run_dir / FAILED_FILE).write_text(traceback.format_exc())
        console.print(f"[red]failed[/red] {label}: {type(exc).__name__}: {exc}")
        return None
    console.print(f"[green]done[/green] {label}: val loss {metrics['final_val_loss']:.4f} "
                  f"in {time.perf_counter() - t0:.0f} s")
    return metrics


def summarize(root: Path) -> tuple[int, list[tuple[Path, str]]]:
    """Count finished jobs and collect failures (directory, first line of the error)."""
    done = len(list(root.rglob("metrics.json")))
    failed = []
    for f in sorted(root.rglob(FAILED_FILE)):
        lines = f.read_text().strip().splitlines()
        failed.append((f.parent, lines[-1] if lines else "unknown error"))
    return done, failed


def write_plan(root: Path, jobs: list[list[str]]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "sweep.json").write_text(json.dumps({"jobs": jobs}, indent=2))


def base_config_yaml(base: DictConfig) -> str:
    return OmegaConf.to_yaml({k: v for k, v in base.items() if k != "hydra"})
