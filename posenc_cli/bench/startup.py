"""How long the command line takes to answer: the median wall time of fresh processes.

Why a script of its own: `posenc --help`, `posenc encodings` and shell completion are paid on
every typo, and one heavy import at module level (torch is over 2 s on a small CPU) undoes
them silently. Each run is a new interpreter, as a user's shell starts it; the commands
alternate run by run, so a burst of load elsewhere hits them alike.

    python -m posenc_cli.bench.startup             # 10 runs of each command
    python -m posenc_cli.bench.startup --runs 20

Prints one line per command: median, fastest and slowest wall time in seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

#: The commands timed, as a user types them after `posenc`, and the exit code each must give:
#: the last is a wrong encoding parameter, refused in one line.
COMMANDS = ((("--help",), 0), (("encodings",), 0), (("train", "encoding.theta=-1"), 2))


def wall_time(args: tuple[str, ...], code: int) -> float:
    """Seconds from starting `python -m posenc_cli ARGS` to its exit (output discarded)."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "posenc_cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )
    seconds = time.perf_counter() - t0
    if done.returncode != code:
        raise SystemExit(f"posenc {' '.join(args)} exited {done.returncode}, not {code}")
    return seconds


def time_commands(runs: int) -> dict[str, list[float]]:
    """Each command's wall times over ``runs`` rounds, the commands interleaved."""
    times: dict[str, list[float]] = {" ".join(c): [] for c, _ in COMMANDS}
    for _ in range(runs):
        for command, code in COMMANDS:
            times[" ".join(command)].append(wall_time(command, code))
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each command")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs {args.runs} is too small — use --runs 1 or more")
    for command, times in time_commands(args.runs).items():
        print(
            f"posenc {command:<26} median {statistics.median(times):.3f} s  "
            f"(min {min(times):.3f}, max {max(times):.3f}, {len(times)} runs)"
        )


if __name__ == "__main__":
    main()
