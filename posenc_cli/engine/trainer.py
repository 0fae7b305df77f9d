"""The Trainer: one run's model, optimizer, state, TensorBoard writer and checkpoints.

It knows nothing about any particular encoding (the model is built from the config) and
nothing about evaluation: the command that trains runs the evaluation tasks afterwards.
Every file it writes goes through ``Runtime.is_main``. With several ranks (engine/distributed.py)
the model trains as DistributedDataParallel, each rank on its slice of the step's windows;
everything that decides what happens next (logged loss, validation loss, a stop signal) is
combined across ranks first, so all ranks take the same branch at the same step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter

from posenc_cli.common import faults
from posenc_cli.common.errors import Interrupted, PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.run_config import RunConfig
from posenc_cli.data.cache import TokenData
from posenc_cli.engine import checkpoint
from posenc_cli.engine.build import build_model
from posenc_cli.engine.checkpoint import TrainState
from posenc_cli.engine.distributed import data_parallel
from posenc_cli.engine.meter import (
    NullWriter,
    Progress,
    ProgressFactory,
    SilentProgress,
    Throughput,
)
from posenc_cli.engine.positions import random_positions
from posenc_cli.engine.resume import note_new_world
from posenc_cli.engine.runtime import Runtime, compile_failures, compile_model
from posenc_cli.engine.schedule import lr_at
from posenc_cli.engine.signals import (
    SignalledDuringValidation,
    StopFlag,
    StopValidation,
    exit_code,
    signal_name,
)
from posenc_cli.engine.step import make_optimizer, train_step
from posenc_cli.engine.streams import make_stream
from posenc_cli.model import TransformerLM


class Trainer:
    """Build once, then ``resume()`` (optionally) and ``fit()``; ``close()`` at the end."""

    def __init__(self, cfg: RunConfig, run_dir: Path, rt: Runtime, data: TokenData | None) -> None:
        """``data`` is the tokenized corpus of a language-modelling run, None for a task."""
        self.cfg = cfg
        self.run_dir = run_dir
        self.rt = rt
        self.stream = make_stream(cfg, data)
        self.layout = RunDir(run_dir)
        self.ckpt_dir = self.layout.checkpoints_dir
        torch.manual_seed(cfg.seed)
        self.model: nn.Module = build_model(cfg, self.stream.vocab_size).to(rt.device)
        self.lm.use_attention(rt.attention)
        self.opt = make_optimizer(self.model, cfg.train)
        self.state = TrainState()
        self.state.batch_rng.manual_seed(cfg.seed)
        self.writer: SummaryWriter | None = None
        self.meter: Throughput | None = None

    @property
    def lm(self) -> TransformerLM:
        """The model itself, also when ``fit`` runs a compiled or data-parallel wrapper of it."""
        model = getattr(self.model, "_orig_mod", self.model)
        lm = getattr(model, "module", model)
        assert isinstance(lm, TransformerLM)  # build_model's, under at most these two wrappers
        return lm

    @property
    def finished(self) -> bool:
        return self.state.step >= self.cfg.train.steps

    def resume(self) -> None:
        """Continue exactly where checkpoints/last.pt stopped: weights, moments, data order."""
        ck = checkpoint.load(self.layout.checkpoint("last"))
        checkpoint.remove_partial_saves(self.ckpt_dir)
        try:
            saved_world = checkpoint.restore(
                ck, self.lm, self.opt, self.state, self._tokens_per_rank
            )
            note_new_world(saved_world, self.rt.world_size, self.cfg.train.batch_size)
        except (RuntimeError, KeyError, ValueError, TypeError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            fix = "resume with the run's own config (do not change model.* or encoding)"
            if "parameter group" in first:  # the weights loaded: the optimizer's layout differs
                fix = "it was saved by an earlier posenc with another layout of the encoding's "
                fix += "weights: eval, inspect and extend read it"
            raise PosencError(
                f"checkpoint '{self.layout.checkpoint('last')}' does not match this run ({first})",
                f"{fix}, or start a new run",
            ) from None

    @property
    def _tokens_per_rank(self) -> int:
        return self.cfg.train.batch_size * self.cfg.train.context_length

    def open_writer(self) -> SummaryWriter:
        """The run's TensorBoard writer; on resume it drops points past the checkpoint."""
        if self.writer is None:
            purge = self.state.step + 1 if self.state.step else None
            self.writer = (
                SummaryWriter(str(self.run_dir), purge_step=purge)
                if self.rt.is_main
                else cast(SummaryWriter, NullWriter())  # it answers every call with None
            )
        return self.writer

    def fit(self, progress: ProgressFactory) -> None:
        """Train until train.steps; SIGINT/SIGTERM end on a checkpoint and an Interrupted."""
        self.open_writer()
        if self.rt.world_size > 1:
            self.model = data_parallel(self.model, self.rt.device)
        if self.cfg.train.compile:
            self.model = compile_model(self.model, self.rt.device)
        with compile_failures(self.run_dir, self.cfg.train.compile):
            self._loop(progress if self.rt.is_main else SilentProgress)

    def _loop(self, progress: ProgressFactory) -> None:
        t = self.cfg.train
        st = self.state
        meter = self.meter = Throughput(
            self._tokens_per_rank * self.rt.world_size, st.clock, st.pending
        )
        self.model.train()
        with progress(t.steps, st.step, self.cfg.label()) as bar, StopFlag() as stop:
            while st.step < t.steps:
                with st.clock.timing("steps"):
                    step = st.step + 1
                    lr = lr_at(step, t.lr, t.min_lr, t.warmup_steps, t.steps)
                    for g in self.opt.param_groups:
                        g["lr"] = lr
                    x, y, pos = self._batch(step)
                    loss, norm = train_step(self.model, self.opt, x, y, self.rt, t.grad_clip, pos)
                    st.step = step
                    st.tokens += meter.tokens_per_step
                    meter.add(loss)
                    if step % t.log_every == 0 or step == t.steps:
                        self._log_train(meter, lr, float(norm))
                bar.update(step, st.last_train, st.clock.tokens_per_s)
                with st.clock.timing("validation"):
                    self._periodic(step, bar)
                if step % t.checkpoint_every == 0 or step == t.steps:
                    with st.clock.timing("checkpoints"):
                        self.save()
                if (signum := self._stop_signal(stop)) is not None:
                    self._stop_cleanly(signum)

    def _batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The next batch of the stream, and its positions when randomized."""
        t = self.cfg.train
        x, y = self.stream.batch(
            step, self.state.batch_rng, self.rt.device, self.rt.comm.rank, self.rt.world_size
        )
        pos = (
            None
            if t.position_range is None
            else random_positions(t.position_range, x.shape[1], self.cfg.seed, step)
        )
        return x, y, pos

    def _periodic(self, step: int, bar: Progress) -> None:
        t = self.cfg.train
        if step % t.eval_every == 0 or step == t.steps:
            try:
                with self._validation_signals():
                    val = self.validate()
            except SignalledDuringValidation as stop:
                self._stop_cleanly(stop.signum)
            except Exception:  # out of memory, a failing validation stream, ...
                self.save()  # the steps trained so far stay resumable
                raise
            bar.update(step, self.state.last_train, self.state.clock.tokens_per_s, val_loss=val)

    def _validation_signals(self) -> AbstractContextManager[object]:
        """One process stops a validation at the signal; several ranks finish it together
        (one rank leaving a collective would leave the others waiting) and stop after it."""
        return StopValidation() if self.rt.world_size == 1 else contextlib.nullcontext()

    def _log_train(self, meter: Throughput, lr: float, grad_norm: float) -> None:
        st = self.state
        loss, st.interval_tokens_per_s = meter.take()
        st.last_train = self.rt.comm.mean(loss)  # the loss of the whole global batch
        self._check_finite(st.last_train)
        w = self.open_writer()
        w.add_scalar("train/loss", st.last_train, st.step)
        w.add_scalar("train/lr", lr, st.step)
        w.add_scalar("train/grad_norm", grad_norm, st.step)
        w.add_scalar("train/tokens_per_s_last_interval", st.interval_tokens_per_s, st.step)

    def validate(self) -> float:
        """Validation loss now; a new best is saved as checkpoints/best.pt."""
        st = self.state
        val = self.stream.validation_loss(self.model, self.rt)
        self._check_finite(val)
        st.last_val = val
        self.open_writer().add_scalar("val/loss", val, st.step)
        if val < st.best_val:
            st.best_val = val
            self._write_checkpoint(checkpoint.best_state(self.lm, st.step, val, self.cfg), "best")
        return val

    def save(self) -> None:
        """checkpoints/last.pt, never of a model whose weights are no longer finite."""
        if not all(torch.isfinite(p).all() for p in self.lm.parameters()):
            self._diverged("the weights are no longer finite")
        if self.meter is not None:
            self.state.pending = self.meter.pending()
        state = checkpoint.training_state(
            self.lm, self.opt, self.state, self.rt.world_size, self.cfg
        )
        self._write_checkpoint(state, "last")
        faults.pause("after_save", self.state.step, self.ckpt_dir)

    def _write_checkpoint(self, state: dict[str, Any], which: str) -> None:
        if self.rt.is_main:
            checkpoint.save_atomic(state, self.layout.checkpoint(which))

    def _check_finite(self, value: float) -> None:
        if not math.isfinite(value):
            self._diverged(f"loss {value}")

    def _diverged(self, what: str) -> None:
        last = self.layout.checkpoint("last")
        kept = f"the last good checkpoint is kept at {last}" if last.exists() else ""
        raise PosencError(
            f"training diverged at step {self.state.step} ({what}); "
            + (kept or "no checkpoint was written"),
            "start a new run with a lower train.lr or more train.warmup_steps",
        )

    def _stop_signal(self, stop: StopFlag) -> int | None:
        """The signal to stop on, or None; with several ranks any rank's signal stops all of
        them after the same step (a rank stopping alone would leave the others waiting)."""
        if self.rt.world_size == 1 or not self.rt.comm.any(stop.signum is not None):
            return stop.signum
        return stop.signum or signal.SIGTERM

    def _stop_cleanly(self, signum: int) -> None:
        self.save()
        self.open_writer().flush()
        raise Interrupted(
            exit_code(signum),
            f"posenc: stopped by {signal_name(signum)} after step "
            f"{self.state.step}; checkpoint saved — continue with: posenc resume "
            f"{self.run_dir}",
        )

    def metrics(self) -> dict[str, Any]:
        """The training part of metrics.json (evaluation tasks add their own keys)."""
        cfg = self.cfg
        st = self.state
        world = self.rt.world_size
        return {
            "encoding": cfg.encoding.name,
            "seed": cfg.seed,
            "train_length": cfg.train.context_length,
            "steps": int(st.step),
            "final_val_loss": st.last_val,
            "final_train_loss": st.last_train,
            "best_val_loss": st.best_val if math.isfinite(st.best_val) else None,
            "n_params": int(self.lm.num_parameters()),
            "train_tokens": st.tokens,
            "world_size": world,
            "global_batch_size": cfg.train.batch_size * world,
            **st.clock.record(),
            "device": self.rt.device.type,
            "precision": self.rt.precision,
            "attention": self.lm.attention_kernel,
            "model": dataclasses.asdict(cfg.model),
            "position_range": cfg.train.position_range,
            **self.stream.describe(),
        }

    def replica_digests(self) -> list[str]:
        """SHA-256 of every rank's weights (a collective): equal digests prove the replicas
        stayed identical, rank 0's is the saved model's."""
        return self.rt.comm.gather(checkpoint.weights_digest(self.lm))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
