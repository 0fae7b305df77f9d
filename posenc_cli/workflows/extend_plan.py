"""The jobs of one `posenc extend` command: one, or every combination of swept extend.* values
(`extend.method=pi,yarn extend.steps=0,100,400`, or `experiment=context_extension`), each
planned and checked before the first one runs. ``extend.steps=0`` is the method without
fine-tuning: the parent evaluated as `posenc eval RUN eval.rope_scaling=M eval.rope_factor=S`
would, on the same tokens. A grid puts its runs in ROOT/<method>-<steps>; a method that needs
RoPE is left out of a grid for a non-RoPE parent, so one study serves every encoding, and
one at extend.factor=1 (continued training at L is method none's; one such job is refused).
longrope's factor sets given as extend.long_factor / extend.short_factor are checked against
the parent's rotated pairs here; missing ones are searched when the job runs
(workflows/extend_search.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.compose import compose, validate
from posenc_cli.config.effect_checks import check_extension_schedule
from posenc_cli.config.encoding_checks import is_rotary
from posenc_cli.config.extension import check_factor, child_config, extended_length
from posenc_cli.config.overrides import expand_sweep, given, key_of, quote
from posenc_cli.config.rescale_checks import EVAL_SETS, EXTEND_SETS, check_sets, rotated_pairs
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import load_run_config, planned_run_dir, run_in_use
from posenc_cli.data.passkey_windows import check_count, passkey_text
from posenc_cli.data.tokenizer import load_tokenizer
from posenc_cli.engine.extension import parent_checkpoint

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
            "attention",
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

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclass
class Job:
    """A new run to train (``cfg`` and its directory), or an evaluation of the parent."""

    method: str
    steps: int
    overrides: tuple[str, ...] = ()
    cfg: DictConfig | None = None
    planned: Path | None = None
    eval_overrides: tuple[str, ...] = ()


def plan_jobs(run_dir: Path, args: list[str]) -> tuple[list[Job], Path | None]:
    """Every job, checked; and the grid's folder (None for one job)."""
    _check_overrides(args)  # before composing, whose checks would name the wrong problem
    if run_in_use(run_dir):
        raise PosencError(
            f"'{run_dir}' is in use by another posenc process (still training?), so its last "
            "checkpoint may not be its final one",
            "wait for it to finish, then extend it",
        )
    requested = compose(expand_sweep(args)[0], with_hydra=True)  # the experiment's sweep
    params = requested.hydra.sweeper.get("params") or {}
    combos = expand_sweep(args, {str(k): str(v) for k, v in params.items()})
    if len(combos) == 1:
        single = _job(run_dir, combos[0], requested, grid=False)
        assert single is not None  # outside a grid every combination is a job
        return [single], None
    root = _grid_root(requested, args)
    rotary = parent_is_rotary(run_dir)
    jobs = []
    for combo in combos:
        given = dict(o.split("=", 1) for o in combo)
        method = given.get("extend.method", str(requested.extend.method))
        steps = _steps(given, requested)
        if method != "none" and not rotary:
            continue
        where = [o for o in combo if key_of(o) != "hydra.run.dir"]
        where.append(f"hydra.run.dir={quote(str(root / _folder(method, steps, given, combos)))}")
        job = _job(run_dir, where, compose(where, with_hydra=True), grid=True)
        if job is not None:
            jobs.append(job)
    if not jobs:
        raise PosencError(
            "no combination of the grid is a job (a scaling method needs a RoPE parent and "
            "extend.factor > 1)",
            "include extend.method=none, or factors above 1",
        )
    _check_distinct(jobs)
    return jobs, root


def _steps(given: dict[str, str], requested: DictConfig) -> int:
    try:  # a grid's 2.0: Hydra types each value only when it composes it
        return int(given.get("extend.steps", requested.extend.steps))
    except ValueError:
        what = f"extend.steps={given['extend.steps']} is not a whole number of steps"
        raise PosencError(what, "give whole numbers, e.g. extend.steps=0,100,400") from None


def _folder(method: str, steps: int, given: dict[str, str], combos: list[list[str]]) -> str:
    """`<method>-<steps>`, then `-<key>=<value>` for every other key the grid varies
    (extend.factor=2,4 gives yarn-400-factor=2 and yarn-400-factor=4)."""
    values: dict[str, set[str]] = {}
    for combo in combos:
        for o in combo:
            values.setdefault(key_of(o), set()).add(o.split("=", 1)[1])
    fixed = {"extend.method", "extend.steps", "hydra.run.dir"}
    varied = sorted(k for k, v in values.items() if len(v) > 1 and k not in fixed)
    return f"{method}-{steps}" + "".join(f"-{k.split('.')[-1]}={given[k]}" for k in varied)


def _check_distinct(jobs: list[Job]) -> None:
    """No two jobs of a grid write one folder or compute the same thing (extend.factor=2,2.0):
    checked before the first job starts."""
    computes: dict[str, Job] = {}
    for job in jobs:
        what = job.eval_overrides if job.cfg is None else typed(job.cfg).as_yaml()
        key = f"{job.method} {job.steps} {what}"
        if key in computes:
            raise PosencError(
                f"two jobs of this grid are the same ({' '.join(computes[key].overrides)} and "
                f"{' '.join(job.overrides)})",
                "give each combination once (2 and 2.0 are one value)",
            )
        computes[key] = job
    seen: dict[Path, Job] = {}
    for job in jobs:
        if job.planned is None:
            continue
        if job.planned in seen:
            raise PosencError(
                f"two jobs of this grid would write {job.planned}",
                "sweep fewer keys at once, or give each combination its own hydra.run.dir",
            )
        seen[job.planned] = job


def _job(run_dir: Path, overrides: list[str], requested: DictConfig, grid: bool) -> Job | None:
    """One combination planned (None: the parent itself, in a grid)."""
    ext = requested.extend
    method = str(ext.method)
    steps = int(ext.steps)
    if grid and method != "none" and float(ext.factor) == 1:
        return None  # at the training length, continued training is method none's job
    check_factor(method, float(ext.factor))
    if steps > 0:
        check_extension_schedule(ext, overrides)
        cfg, planned = plan_extension(run_dir, overrides, requested)
        return Job(method, steps, tuple(overrides), cfg, planned)
    if method == "none":
        if grid:
            return None
        raise PosencError(
            "extend.steps=0 with extend.method=none is the parent itself",
            "give extend.steps > 0, or a method to evaluate without fine-tuning",
        )
    if not grid and given(overrides, "hydra.run.dir"):
        raise PosencError(
            "extend.steps=0 evaluates the parent in place (its results go into the parent's "
            "metrics.json), so hydra.run.dir names no folder",
            "drop hydra.run.dir, or give extend.steps > 0 to fine-tune a new run there",
        )
    if not grid and float(ext.passkey_share) > 0:  # a grid's steps-0 jobs train nothing
        raise PosencError(
            f"extend.passkey_share={float(ext.passkey_share):g} with extend.steps=0: nothing "
            "is trained, so no passkey window is either",
            "give extend.steps > 0, or drop extend.passkey_share",
        )
    _check_overrides(overrides)
    require_rotary(run_dir, method)
    parent = load_run_config(run_dir)
    extended_length(int(parent.train.context_length), float(ext.factor))
    evaluation = evaluation_overrides(ext, parent)
    parent_checkpoint(run_dir, typed(parent), "last")
    return Job(method, 0, tuple(overrides), eval_overrides=evaluation)


def evaluation_overrides(ext: DictConfig, parent: DictConfig) -> tuple[str, ...]:
    """What `posenc eval PARENT` is given to score the method without fine-tuning: the method,
    S (dynamic NTK: transformers' 1) and, for longrope, the rescale factors extend.* gives,
    checked against the parent's rotated pairs."""
    method = str(ext.method)
    out = [f"eval.rope_scaling={method}"]
    if method != "dynamic_ntk":
        out.append(f"eval.rope_factor={float(ext.factor):g}")
    if method == "longrope":
        m = parent.model
        pairs = rotated_pairs(m.d_model, m.n_heads, typed(parent).encoding.params)
        check_sets({f"extend.{k}": ext[k] for k in EXTEND_SETS}, pairs)
        for key, name in zip(EVAL_SETS, EXTEND_SETS, strict=True):
            if ext[name] is not None:  # else searched when the parent is evaluated
                out.append(f"eval.{key}=[{','.join(repr(float(x)) for x in ext[name])}]")
    return tuple(out)


def _grid_root(requested: DictConfig, args: list[str]) -> Path:
    """hydra.run.dir when given, else outputs/<date>/<time>-extend; checked, not created."""

    if given(args, "hydra.run.dir"):
        return planned_run_dir(requested, args)
    path = Path("outputs") / time.strftime("%Y-%m-%d") / f"{time.strftime('%H-%M-%S')}-extend"
    return planned_run_dir(OmegaConf.create({"hydra": {"run": {"dir": str(path)}}}), args)


def parent_is_rotary(run_dir: Path) -> bool:
    """The parent's encoding is RoPE-family (what every method but none needs)."""

    return is_rotary(load_run_config(run_dir).encoding)


def require_rotary(run_dir: Path, method: str) -> None:
    """Every method but none rescales RoPE's frequencies."""
    if method != "none" and not parent_is_rotary(run_dir):
        raise PosencError(
            f"extend.method={method} needs a RoPE-family encoding, not "
            f"'{load_run_config(run_dir).encoding.name}'",
            "use extend.method=none (continued training at the longer length), or extend a "
            "rope or xpos run",
        )


def plan_extension(
    run_dir: Path, overrides: list[str], requested: DictConfig
) -> tuple[DictConfig, Path]:
    """The new run's config and directory (checked, not created); ``requested`` is the
    overrides composed."""

    _check_overrides(overrides)
    ext = requested.extend
    require_rotary(run_dir, str(ext.method))
    parent = load_run_config(run_dir)
    enc = parent.encoding
    step, sha256 = parent_checkpoint(run_dir, typed(parent), str(ext.checkpoint))
    cfg = child_config(parent, ext, run_dir, step, sha256)
    for key in HOW - {"hydra.run.dir"}:
        if given(overrides, key):
            OmegaConf.update(cfg, key, OmegaConf.select(requested, key))
    validate(cfg)
    check_passkeys(run_dir, cfg)
    if given(overrides, "hydra.run.dir"):
        where = requested
    else:
        name = f"{time.strftime('%H-%M-%S')}-{enc.name}-{ext.method}x{float(ext.factor):g}"
        path = Path("outputs") / time.strftime("%Y-%m-%d") / name
        where = OmegaConf.create({"hydra": {"run": {"dir": str(path)}}})
    return cfg, planned_run_dir(where, overrides)


def check_passkeys(run_dir: Path, cfg: DictConfig) -> None:
    """The new run's passkey windows (extend.passkey_share > 0): at least one a step, and the
    parent's tokenizer writes each digit as a token and leaves room for text at the new
    length; before anything is created (the run's stream checks the data cache's tokenizer,
    which preflight finds equal to the parent's, again when it starts)."""
    share = float(cfg.extend.passkey_share)
    if share == 0:
        return
    check_count(share, int(cfg.train.batch_size))
    tokenizer = RunDir(run_dir).tokenizer_file
    if not tokenizer.is_file():
        raise PosencError(
            f"'{run_dir}' has no tokenizer.json, so its passkey windows cannot be written",
            "fine-tune a language-model run on passkeys (a synthetic-task run has no text)",
        )
    passkey_text(load_tokenizer(tokenizer), str(tokenizer), int(cfg.train.context_length))


def _check_overrides(overrides: list[str]) -> None:
    """Only extend.* and how the run executes: the rest is the parent's."""
    for key in map(key_of, overrides):
        allowed = key.startswith("extend.") or key in HOW or key == "experiment"
        if not allowed or key.removeprefix("extend.") in RECORDED:
            raise PosencError(
                f"`posenc extend` cannot set {key}",
                "set extend.* (method, factor, steps, lr, warmup_steps, batch_size, "
                "checkpoint, passkey_share) or how it runs (device, train.threads, "
                "hydra.run.dir, ...)",
            )
