"""`posenc inspect`: the derivations drawn for one configured encoding, or for a
trained run what its heads do within and past the training length.

A config (`posenc inspect encoding=rope encoding.theta=500`) is built, initialised with its
seed and never trained; its figures go to a new folder under outputs/inspect/. A run
(`posenc inspect RUN_DIR`) is loaded like `posenc eval` loads it (the saved config trusted for
nothing, the checkpoint weights-only) and never retrained; its figures go to RUN/inspect/
and, with its scalars, to TensorBoard in the run's own event folder.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from posenc_cli.common.atomic import write_atomic
from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.config.run_config import RunConfig, typed
from posenc_cli.config.rundir import create_exclusive, load_run_config, make_dirs, refuse_links
from posenc_cli.config.task_checks import is_task
from posenc_cli.engine.build import build_model
from posenc_cli.engine.memory import check_inspect_memory
from posenc_cli.engine.metrics import read_metrics
from posenc_cli.engine.runtime import make_runtime
from posenc_cli.evals.run import apply_overrides, eval_data, last_checkpoint, model_from_checkpoint
from posenc_cli.inspection.base import InspectReport, Subject, figures
from posenc_cli.inspection.properties import property_table
from posenc_cli.inspection.style import png_bytes
from posenc_cli.inspection.summary import log_tensorboard, summary_markdown
from posenc_cli.model import TransformerLM

#: Held-out windows of the longest length a run is probed with (spread over the text).
RUN_WINDOWS = 4


def inspect_config(overrides: list[str], out: Path | None) -> InspectReport:
    """Figures of an untrained, configured model (built with the config's seed)."""
    t0 = time.perf_counter()
    cfg = typed(compose(overrides))
    check_inspect_memory(cfg)
    model = _initial_model(cfg, cfg.data.vocab_size)
    L = cfg.train.context_length
    longest, notes = _longest(model, cfg)
    subject = Subject(cfg, model, None, L, longest, None)
    return _render(InspectReport(_config_out_dir(out, cfg.encoding.name), subject, notes=notes), t0)


def _config_out_dir(out: Path | None, encoding: str) -> Path:
    """A new folder under outputs/inspect/, or ``out`` if it is new or empty."""
    if out is None:
        stamp = time.strftime("%Y-%m-%d/%H-%M-%S")
        return create_exclusive(Path("outputs/inspect") / f"{stamp}-{encoding}")
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise PosencError(
            f"'{out}' already exists (or is a link) and is not an empty folder",
            "choose a new --out folder (posenc never overwrites one)",
        )
    make_dirs(out)
    return out


def inspect_run(run_dir: Path, overrides: list[str]) -> InspectReport:
    """Figures of a trained run's last checkpoint, into RUN/inspect/ and its TensorBoard."""
    t0 = time.perf_counter()
    composed = load_run_config(run_dir)
    if is_task(composed):
        raise PosencError(
            f"'{run_dir}' is a synthetic-task run (task={composed.task.name}): posenc inspect "
            "reads held-out text, which its vocabulary of symbols cannot encode",
            "inspect a language-model run; a task run's results are in its metrics.json and "
            "`posenc compare`",
        )
    saved, cfg = typed(composed), typed(apply_overrides(composed, overrides))
    out_dir = _run_out_dir(run_dir)
    path, state = last_checkpoint(run_dir)
    step = state.get("step", 0)
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise PosencError(
            f"checkpoint '{path}' has no valid step ({step!r})",
            "restore the run's checkpoint from its owner",
        )
    model = model_from_checkpoint(path, state, cfg, make_runtime(cfg)).float().cpu().eval()
    metrics = read_metrics(run_dir)
    data, _, _ = eval_data(cfg, saved, run_dir, bool(metrics.get("imported")))
    longest, notes = _longest(model, cfg)
    text = held_out_windows(np.asarray(data.val), longest, RUN_WINDOWS)
    initial = _initial_model(cfg, model.vocab_size)
    subject = Subject(cfg, model, initial, cfg.train.context_length, longest, text, step)
    make_dirs(out_dir)  # only now: a refusal above leaves the run as it was
    report = _render(InspectReport(out_dir, subject, notes=notes), t0)
    log_tensorboard(run_dir, report)
    return report


def _run_out_dir(run_dir: Path) -> Path:
    """RUN/inspect/, refused (before any work) when it or anything in it is a link, or when
    it is not a folder: a received run directory decides nothing about where posenc writes.
    Created by the caller once the run has been read."""
    refuse_links(run_dir)
    out_dir = run_dir / "inspect"
    if out_dir.exists() and not out_dir.is_dir():
        raise PosencError(f"'{out_dir}' is not a folder", "remove it (posenc writes there)")
    return out_dir


def _initial_model(cfg: RunConfig, vocab: int) -> TransformerLM:
    """The model as training initialises it: seeded, then built (engine/trainer.py)."""
    torch.manual_seed(cfg.seed)
    return build_model(cfg, vocab).eval()


def _longest(model: TransformerLM, cfg: RunConfig) -> tuple[int, list[str]]:
    """The longest evaluation length, capped where the encoding's table ends."""
    L = cfg.train.context_length
    longest = max(cfg.eval.extrapolation.factors) * L
    limit = model.encoding.max_len
    if limit is not None and longest > limit:
        return limit, [
            f"the longest length is {limit}, not {longest}: encoding "
            f"'{cfg.encoding.name}' has no position past encoding.max_len={limit}"
        ]
    return longest, []


def held_out_windows(ids: np.ndarray, length: int, count: int) -> torch.Tensor:
    """``count`` windows of ``length`` ids at evenly spaced starts over the held-out text."""
    if len(ids) < length:
        raise PosencError(
            f"the held-out text has {len(ids)} tokens, fewer than the longest length {length}",
            "lower eval.factors or evaluate on longer text",
        )
    starts = np.linspace(0, len(ids) - length, count).astype(np.int64)
    return torch.from_numpy(np.stack([ids[s : s + length] for s in starts]).astype(np.int64))


def _render(report: InspectReport, t0: float) -> InspectReport:
    """Draw every figure that applies, measure the properties, write the summary."""
    subject = report.subject
    for figure in figures():
        why = figure.skip_reason(subject)
        if why is not None:
            report.skipped.append((figure.name, why))
            continue
        for output in figure.draw(subject):
            name = f"{figure.order}_{output.stem}.png"
            _write(report.out_dir / name, png_bytes(output.figure))
            report.files.append((name, output.caption, figure.derivation))
        report.scalars.update(figure.scalars(subject))
    ids = subject.windows(subject.train_length)[:2]
    report.properties = property_table(subject.model, ids, subject.train_length, subject.longest)
    report.seconds = time.perf_counter() - t0
    _write(report.out_dir / "summary.md", summary_markdown(report).encode("utf-8"))
    return report


def _write(path: Path, data: bytes) -> None:
    """Atomically, never through a link; a folder in the way or a full disk is one line."""
    try:
        write_atomic(path, lambda fh: fh.write(data))
    except OSError as exc:
        raise PosencError(
            f"cannot write '{path}': {exc.strerror or exc}",
            "remove what is in the way, or free disk space",
        ) from None
