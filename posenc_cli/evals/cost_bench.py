"""What the default evaluation costs: a trained run's extrapolation evaluation (all lengths,
with its loss-by-position curve and intervals) timed with and without the tail protocol,
interleaved in one process so that a change of machine load hits both alike.

    python -m posenc_cli.evals.cost_bench RUN_DIR [--rounds 3]

Prints each round's seconds and the median ratio (with tail / without): the evaluation's
cost beyond what it was before the tail protocol was scored beside eval.mode.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

from posenc_cli.common.errors import PosencError
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import load_run_config
from posenc_cli.data.prepare import prepare
from posenc_cli.engine.runtime import make_runtime
from posenc_cli.evals.extrapolation_result import extrapolation
from posenc_cli.evals.run import load_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m posenc_cli.evals.cost_bench")
    parser.add_argument("run_dir", type=Path, help="a trained run directory")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        cfg = typed(load_run_config(args.run_dir))
        rt = make_runtime(cfg)
        model = load_model(args.run_dir, cfg, rt).eval()
        data = prepare(cfg.data)
    except PosencError as exc:
        print(f"posenc: error: {exc.what} — {exc.fix}", file=sys.stderr)
        return 2
    settings = cfg.eval.extrapolation
    without = dataclasses.replace(settings, tail_targets=0)
    train_length = cfg.train.context_length
    times: dict[str, list[float]] = {"without tail": [], "with tail": []}
    for r in range(args.rounds):
        order = [("without tail", without), ("with tail", settings)]
        for name, ev in order if r % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            extrapolation(model, data.val, train_length, ev, rt, data.meta.get("eot_id"))
            times[name].append(time.perf_counter() - t0)
    for name, ts in times.items():
        print(
            f"{name}: "
            + "  ".join(f"{t:.1f} s" for t in ts)
            + f"  (median {statistics.median(ts):.1f} s)"
        )
    ratios = [b / a for a, b in zip(times["without tail"], times["with tail"], strict=True)]
    per_round = "  ".join(f"{x:.2f}" for x in ratios)
    print(f"with / without, per round: {per_round}; median {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
