"""posenc's Triton kernels compiled for an H100 (sm_90) on any machine, with the launch
settings of nn/fused_kernels.py: what Triton's interpreter cannot show. Each kernel computes
its positions' (or its sums') scan once — a second copy, in another register layout, may
round apart from the first and pair an index with a weight from different positions — and
spills no register at head size 64, in bf16 and in exact fp32. The compiler and assembler
are Triton's own (tests/helpers/compile_kernels.py, in a process without the interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(find_spec("triton") is None, reason="the kernels are written in Triton"),
]
if find_spec("triton") and tuple(int(n) for n in version("triton").split(".")[:2]) < (3, 3):
    pytest.skip("compiling ahead of a launch takes Triton 3.3 or newer", allow_module_level=True)
SCANS = {
    "cope forward": 1,  # the gates' reverse cumulative sum
    "cope backward": 2,  # the same, and ∂L/∂gates' forward one
    "stick-breaking forward": 1,
    "stick-breaking backward": 2,
}


@pytest.mark.parametrize(
    ("dtype", "precision", "spills"),
    [("bfloat16", "tf32", 0), ("float32", "tf32", 0), ("float32", "ieee", 64)],
    ids=["bf16", "fp32 (TF32 products, as CUDA runs train)", "exact fp32"],
)
def test_kernels_compile_for_an_h100_with_one_scan_per_sum_and_no_spills(
    tmp_path: Path, dtype: str, precision: str, spills: int
) -> None:
    """Exact fp32 (the GPU tests' setting, TF32 off) may spill a few bytes; what trains does
    not."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env |= {"TRITON_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    script = REPO / "tests" / "helpers" / "compile_kernels.py"
    done = subprocess.run(
        [sys.executable, str(script), dtype, precision, "64"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["kernel"]: row for row in map(json.loads, done.stdout.splitlines())}
    assert {name: row["scans"] for name, row in rows.items()} == SCANS
    for row in rows.values():
        assert row["ptxas"] == 0 and row["spills"] <= spills, row
        assert row["shared"] <= 227 * 1024, row  # an H100's shared memory per block
