"""Interleaved A/B timing of variants (encoding, precision, torch.compile) in one process.

Why a separate script: `posenc bench` runs each case in a fresh process, which is right for peak
memory but lets machine load drift between cases; a speed-up *ratio* needs both sides measured
under the same load. Here every variant has its own model and optimizer, and the timed blocks
alternate (the order rotates every round), so a burst of load elsewhere hits all variants alike.

    python -m posenc_cli.bench.ab                       # the default `posenc train` config
    python -m posenc_cli.bench.ab --variants fp32,bf16 model=base train.context_length=256 \
        train.batch_size=16                             # the bench reference config

    python -m posenc_cli.bench.ab --variants none:fp32,fox:fp32 --eval 4096 \
        model=base                                      # no-grad forwards at batch 1

    python -m posenc_cli.bench.ab --clock cpu --variants none:fp32,cope:fp32 \
        train.threads=1                                 # ratios on a machine others load

    python -m posenc_cli.bench.ab --variants none:bf16,alibi:bf16,alibi:bf16+flex \
        device=cuda model=gpt2_small                    # FlexAttention against SDPA on a GPU

A variant is an optional encoding and a colon (default: the config's), a precision
(fp32|bf16), optionally with "+compile" and "+flex" (train.attention=flex; training with it
needs device=cuda). The device is the config's (`device=cuda`). Overrides are the ones
`posenc train` takes. ``--eval N`` times no-grad forwards of one sequence of N tokens instead
of training steps. Prints one line per variant: median step time, tokens/s, ratio to the first
variant, and the first step's time (which includes compilation).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from posenc_cli.bench.case import evaluation_step, timed, training_step
from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import load
from posenc_cli.config.run_config import RunConfig
from posenc_cli.engine.build import build_model
from posenc_cli.engine.runtime import flush_denormals, keep_freed_memory, pick_device
from posenc_cli.engine.step import make_optimizer


@dataclass
class Variant:
    """One way of running the same training step, with its own model and optimizer."""

    name: str
    precision: str
    compile: bool
    encoding: str | None = None
    flex: bool = False
    step: Any = None
    first_step_s: float = 0.0
    times: list[float] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Variant:
        encoding, _, rest = text.rpartition(":")
        precision, *flags = rest.split("+")
        if precision not in ("fp32", "bf16") or not set(flags) <= {"compile", "flex"}:
            raise PosencError(
                f"unknown variant '{text}'",
                "use [ENCODING:]fp32 or bf16, optionally followed by +compile and +flex",
            )
        return cls(text, precision, "compile" in flags, encoding or None, "flex" in flags)


def make_step(
    variant: Variant, cfg: RunConfig, x: torch.Tensor, y: torch.Tensor, evaluate: bool
) -> Any:
    """A fresh model (same seed for every variant) and its training step or no-grad forward,
    on the device of ``x``."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, cfg.data.vocab_size).to(x.device)
    kernel = "flex" if variant.flex else "sdpa"
    if model.use_attention(kernel) != kernel:
        raise PosencError(
            f"variant '{variant.name}': no layer of {cfg.encoding.name} has a FlexAttention "
            f"form on {x.device.type}",
            "drop +flex for it (docs/performance.md, FlexAttention)",
        )
    if variant.flex and not evaluate and x.device.type != "cuda":
        raise PosencError(
            f"variant '{variant.name}' trains with FlexAttention, which trains on CUDA only",
            "add device=cuda, or time it with --eval N",
        )
    if evaluate:
        return evaluation_step(model, x, variant.precision, variant.compile)
    opt = make_optimizer(model, cfg.train)
    return training_step(model, opt, x, y, variant.precision, variant.compile, cfg.train.grad_clip)


#: --clock: wall time, or this process's CPU time, which other processes' load barely touches
#: (with one thread it is the step's own compute; with more it sums their busy time).
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default="fp32,bf16,fp32+compile,bf16+compile")
    p.add_argument("--rounds", type=int, default=6, help="alternations of all variants")
    p.add_argument("--steps", type=int, default=10, help="timed steps per variant per round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps after the first")
    p.add_argument(
        "--eval",
        type=int,
        metavar="N",
        help="time no-grad forwards of one N-token sequence instead of training",
    )
    p.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="cpu: time by this process's CPU time, for ratios on a loaded machine "
        "(use with train.threads=1)",
    )
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("overrides", nargs="*", help="`posenc train` overrides, e.g. encoding=rope")
    return p.parse_args(argv)


def check_arguments(args: argparse.Namespace) -> None:
    """Counts of at least one (--warmup: zero), and a --json folder that exists, before any
    timing: a mistake found after minutes of measuring would lose them."""
    for name, low in (("rounds", 1), ("steps", 1), ("warmup", 0), ("eval", 1)):
        value = getattr(args, name)
        if value is not None and value < low:
            raise PosencError(f"--{name} {value}", f"use --{name} >= {low}")
    if args.json and not Path(args.json).resolve().parent.is_dir():
        raise PosencError(
            f"--json {args.json}: its folder does not exist", "create it, or give another path"
        )


def tokens_per_step(cfg: RunConfig, evaluate: int | None) -> tuple[int, int]:
    """(batch, length) of one timed step: the training batch, or one sequence of --eval."""
    if evaluate is not None:
        return 1, evaluate
    return cfg.train.batch_size, cfg.train.context_length


def run_interleaved(variants: list[Variant], configs: list[Any], args: argparse.Namespace) -> None:
    """Build every variant, then alternate their timed blocks (the order rotates per round)."""
    cfg = configs[0]
    clock = CLOCKS[args.clock]
    batch, length = tokens_per_step(cfg, args.eval)
    gen = torch.Generator().manual_seed(cfg.seed)
    ids = torch.randint(0, cfg.data.vocab_size, (batch, length + 1), generator=gen)
    device = pick_device(cfg.device)
    x, y = ids[:, :-1].contiguous().to(device), ids[:, 1:].contiguous().to(device)
    for v, v_cfg in zip(variants, configs, strict=True):
        v.step = make_step(v, v_cfg, x, y, bool(args.eval))
        v.first_step_s = timed(v.step, clock)
        for _ in range(args.warmup):
            v.step()
    for r in range(args.rounds):
        for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
            v.times += [timed(v.step, clock) for _ in range(args.steps)]


def report(
    variants: list[Variant], cfg: RunConfig, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """One printed line and one JSON row per variant, ratios to the first variant."""
    batch, length = tokens_per_step(cfg, args.eval)
    tokens = batch * length
    base = statistics.median(variants[0].times)
    mode = "evaluation (no grad)" if args.eval else "training"
    print(
        f"{cfg.encoding.name}, d_model {cfg.model.d_model}, {mode}, batch {batch} x {length}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"{args.rounds} rounds x {args.steps} steps per variant, {args.clock} clock"
    )
    rows = []
    for v in variants:
        med = statistics.median(v.times)
        rows.append(
            {
                "variant": v.name,
                "median_step_s": med,
                "tokens_per_s": tokens / med,
                "speedup_vs_first": base / med,
                "first_step_s": v.first_step_s,
            }
        )
        print(
            f"  {v.name:>14}: {med * 1e3:7.1f} ms/step  {tokens / med:8,.0f} tok/s  "
            f"{base / med:5.2f}x vs {variants[0].name}  first step {v.first_step_s:6.1f} s"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        check_arguments(args)
        variants = [Variant.parse(v) for v in args.variants.split(",")]
        configs = [
            load([*args.overrides, *([f"encoding={v.encoding}"] if v.encoding else [])])
            for v in variants
        ]
        keep_freed_memory()
        flush_denormals()
        if configs[0].train.threads:
            torch.set_num_threads(int(configs[0].train.threads))
        run_interleaved(variants, configs, args)
    except PosencError as err:
        print(f"ab_train: error: {err}", file=sys.stderr)
        return 2
    rows = report(variants, configs[0], args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"overrides": args.overrides, "variants": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
