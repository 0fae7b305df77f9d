"""The training loop: AdamW, warmup + cosine, clipping, validation, checkpoints, TensorBoard.

It knows nothing about any particular encoding: the model is built from the config and the
encoding plugs in through its own hooks.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.utils.tensorboard import SummaryWriter

from posenc_cli import checkpoint, faults
from posenc_cli.data.dataset import TokenData, get_batch, prepare, validation_starts, windows
from posenc_cli.errors import Interrupted, PosencError
from posenc_cli.model import TransformerLM, build_model
from posenc_cli.progress import TrainProgress
from posenc_cli.runtime import Runtime, compile_failures, compile_model, make_runtime
from posenc_cli.schedule import lr_at

SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


@dataclass
class TrainState:
    """Everything besides model and optimizer that an exact resume needs."""

    step: int = 0
    best_val: float = math.inf
    wall_s: float = 0.0
    last_val: float | None = None
    last_train: float | None = None
    tokens_per_s: float | None = None
    batch_rng: torch.Generator = field(default_factory=torch.Generator)


def make_optimizer(model: nn.Module, t: Any) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (norm gains and vectors are not decayed)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    keep = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": t.weight_decay},
              {"params": keep, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), eps=1e-8)


@torch.no_grad()
def validation_loss(model: nn.Module, data: TokenData, cfg: Any, rt: Runtime) -> float:
    """Mean next-token loss on fixed held-out windows of the training length."""
    t = cfg.train
    n = t.eval_batches * t.batch_size
    starts = validation_starts(len(data.val), t.context_length, n)
    was_training = model.training
    model.eval()
    total = 0.0
    for i in range(0, n, t.batch_size):
        x, y = windows(data.val, starts[i:i + t.batch_size], t.context_length, rt.device)
        with rt.autocast():
            logits = model(x)
        total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").item()
    model.train(was_training)
    return total / (n * t.context_length)


def check_data_fits(data: TokenData, cfg: Any) -> None:
    L = cfg.train.context_length
    if len(data.train) <= L + 1 or len(data.val) <= L + 1:
        raise PosencError(
            f"the corpus is too short: {len(data.train)} training and {len(data.val)} validation "
            f"tokens for windows of {L}", "give more text or a smaller train.context_length")
    if cfg.data.vocab_size != data.meta["vocab_size"]:
        raise PosencError(f"the tokenizer learned only {data.meta['vocab_size']} tokens, fewer "
                          f"than data.vocab_size={cfg.data.vocab_size}",
                          "give more text or a smaller data.vocab_size")


def _state_dict(model: nn.Module, opt: torch.optim.Optimizer, st: TrainState,
                cfg: DictConfig) -> dict[str, Any]:
    return {"model": _unwrap(model).state_dict(), "optimizer": opt.state_dict(), "step": st.step,
            "best_val": st.best_val, "wall_s": st.wall_s, "last_val": st.last_val,
            "last_train": st.last_train, "batch_rng": st.batch_rng.get_state(),
            "torch_rng": torch.get_rng_state(), "config": OmegaConf.to_container(cfg)}


def _unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "_orig_mod", model)


def restore(path: Path, model: nn.Module, opt: torch.optim.Optimizer, st: TrainState) -> None:
    ck = checkpoint.load(path)
    checkpoint.remove_partial_saves(path.parent)
    try:
        _unwrap(model).load_state_dict(ck["model"])
    except (RuntimeError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0][:160]
        raise PosencError(f"checkpoint '{path}' does not match this model ({first})",
                          "resume with the run's own config (do not change model.* or encoding)"
                          ) from None
    opt.load_state_dict(ck["optimizer"])
    st.step, st.best_val, st.wall_s = int(ck["step"]), float(ck["best_val"]), float(ck["wall_s"])
    st.last_val, st.last_train = ck.get("last_val"), ck.get("last_train")
    st.batch_rng.set_state(ck["batch_rng"])
    torch.set_rng_state(ck["torch_rng"])


class _StopFlag:
    """SIGINT/SIGTERM set a flag; the loop finishes its step, checkpoints and exits cleanly."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "_StopFlag":
        for s in SIGNAL_EXIT:
            try:
                self._old[s] = signal.signal(s, self._handle)
            except ValueError:
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc: Any) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def train(cfg: DictConfig, run_dir: Path, resume: bool = False) -> dict[str, Any]:
    """Train (or continue) the run in ``run_dir``; returns the metrics written to metrics.json."""
    rt = make_runtime(cfg)
    data = prepare(cfg.data)
    check_data_fits(data, cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(data.tokenizer_path, run_dir / "tokenizer.json")
    torch.manual_seed(cfg.seed)
    model: nn.Module = build_model(cfg, data.meta["vocab_size"]).to(rt.device)
    opt = make_optimizer(model, cfg.train)
    st = TrainState()
    st.batch_rng.manual_seed(cfg.seed)
    ckpt_dir = run_dir / "checkpoints"
    if resume:
        restore(ckpt_dir / "last.pt", model, opt, st)
    n_params = _unwrap(model).num_parameters()
    writer = SummaryWriter(str(run_dir), purge_step=st.step + 1 if st.step else None)
    try:
        if cfg.train.compile:
            model = compile_model(model, rt.device)
        with compile_failures(run_dir, cfg.train.compile):
            _loop(cfg, model, opt, st, data, rt, writer, ckpt_dir)
        metrics = _final_metrics(cfg, _unwrap(model), st, data, rt, writer, n_params, run_dir)
    finally:
        writer.close()
    return metrics


def _loop(cfg: DictConfig, model: nn.Module, opt: torch.optim.Optimizer, st: TrainState,
          data: TokenData, rt: Runtime, writer: SummaryWriter, ckpt_dir: Path) -> None:
    t = cfg.train
    tokens_per_step = t.batch_size * t.context_length
    model.train()
    label = f"{cfg.encoding.name} seed {cfg.seed}"
    with TrainProgress(t.steps, st.step, label) as bar, _StopFlag() as stop:
        window_t0 = clock = time.perf_counter()
        window_steps, loss_sum = 0, torch.zeros((), device=rt.device)
        while st.step < t.steps:
            step = st.step + 1
            lr = lr_at(step, t.lr, t.min_lr, t.warmup_steps, t.steps)
            for g in opt.param_groups:
                g["lr"] = lr
            x, y = get_batch(data.train, t.batch_size, t.context_length, st.batch_rng, rt.device)
            with rt.autocast():
                logits = model(x)
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
            opt.step()
            st.step, window_steps = step, window_steps + 1
            loss_sum += loss.detach()
            if step % t.log_every == 0 or step == t.steps:
                elapsed = time.perf_counter() - window_t0
                st.last_train = loss_sum.item() / window_steps
                _check_finite(st.last_train, step, ckpt_dir)
                st.tokens_per_s = tokens_per_step * window_steps / max(elapsed, 1e-9)
                _log_train(writer, st, lr, float(grad_norm))
                bar.update(step, st.last_train, st.tokens_per_s)
                window_steps, loss_sum = 0, torch.zeros((), device=rt.device)
                window_t0 = time.perf_counter()
            else:
                bar.update(step, st.last_train, st.tokens_per_s)
            if step % t.eval_every == 0 or step == t.steps:
                _validate(cfg, model, opt, st, data, rt, writer, ckpt_dir, bar)
                window_t0 = time.perf_counter()
            st.wall_s, clock = st.wall_s + time.perf_counter() - clock, time.perf_counter()
            if step % t.checkpoint_every == 0 or step == t.steps:
                checkpoint.save_atomic(_state_dict(model, opt, st, cfg), ckpt_dir / "last.pt")
                faults.pause("after_save", step, ckpt_dir)
                window_t0 = time.perf_counter()
            if stop.signum is not None:
                _stop_cleanly(stop.signum, model, opt, st, cfg, writer, ckpt_dir)


def _log_train(writer: SummaryWriter, st: TrainState, lr: float, grad_norm: float) -> None:
    writer.add_scalar("train/loss", st.last_train, st.step)
    writer.add_scalar("train/lr", lr, st.step)
    writer.add_scalar("train/grad_norm", grad_norm, st.step)
    writer.add_scalar("train/tokens_per_s", st.tokens_per_s, st.step)


def _validate(cfg: DictConfig, model: nn.Module, opt: torch.optim.Optimizer, st: TrainState,
              data: TokenData, rt: Runtime, writer: SummaryWriter, ckpt_dir: Path,
              bar: TrainProgress) -> None:
    val = validation_loss(model, data, cfg, rt)
    _check_finite(val, st.step, ckpt_dir)
    st.last_val = val
    writer.add_scalar("val/loss", val, st.step)
    bar.update(st.step, st.last_train, st.tokens_per_s, val_loss=val)
    if val < st.best_val:
        st.best_val = val
        checkpoint.save_atomic({"model": _unwrap(model).state_dict(), "step": st.step,
                                "val_loss": val, "config": OmegaConf.to_container(cfg)},
                               ckpt_dir / "best.pt")


def _check_finite(value: float, step: int, ckpt_dir: Path) -> None:
    if math.isfinite(value):
        return
    last = ckpt_dir / "last.pt"
    kept = f"the last good checkpoint is kept at {last}" if last.exists() else \
        "no checkpoint was written yet"
    raise PosencError(f"training diverged at step {step} (loss {value}); {kept}",
                      "lower train.lr or raise train.warmup_steps, then start again or resume")


def _stop_cleanly(signum: int, model: nn.Module, opt: torch.optim.Optimizer, st: TrainState,
                  cfg: DictConfig, writer: SummaryWriter, ckpt_dir: Path) -> None:
    checkpoint.save_atomic(_state_dict(model, opt, st, cfg), ckpt_dir / "last.pt")
    writer.flush()
    name = signal.Signals(signum).name
    raise Interrupted(SIGNAL_EXIT[signal.Signals(signum)],
                      f"posenc: stopped by {name} after step {st.step}; checkpoint saved — "
                      f"continue with: posenc resume {ckpt_dir.parent}")


def _final_metrics(cfg: DictConfig, model: TransformerLM, st: TrainState, data: TokenData,
                   rt: Runtime, writer: SummaryWriter, n_params: int,
                   run_dir: Path) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        "encoding": cfg.encoding.name, "seed": int(cfg.seed),
        "train_length": int(cfg.train.context_length), "steps": int(st.step),
        "final_val_loss": st.last_val, "final_train_loss": st.last_train,
        "best_val_loss": st.best_val if math.isfinite(st.best_val) else None,
        "tokens_per_s": st.tokens_per_s, "n_params": int(n_params),
        "train_tokens": int(st.step * cfg.train.batch_size * cfg.train.context_length),
        "wall_time_s": round(st.wall_s, 2), "device": rt.device.type, "precision": rt.precision,
        "model": OmegaConf.to_container(cfg.model), "data": str(cfg.data.name),
        "vocab_size": int(data.meta["vocab_size"]), "tokenizer": str(data.tokenizer_path),
    }
    if cfg.eval.at_end:
        from posenc_cli.evaluate import evaluate_model

        metrics.update(evaluate_model(model, data, cfg, rt, writer))
    write_metrics(run_dir, metrics)
    return metrics


def write_metrics(run_dir: Path, metrics: dict[str, Any]) -> None:
    tmp = run_dir / ".metrics.json.tmp"
    tmp.write_text(json.dumps(metrics, indent=2))
    tmp.replace(run_dir / "metrics.json")
