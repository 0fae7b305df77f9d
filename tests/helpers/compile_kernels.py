"""Compiles posenc's Triton kernels for an H100 (sm_90) without a GPU and prints, per kernel,
one JSON line: the scans in its Triton GPU IR, its register spills and its shared memory
(`ptxas -v`, the assembler bundled with Triton). Run as a script in a process where
TRITON_INTERPRET is unset: under the interpreter Triton defines no compilable kernels.

    python tests/helpers/compile_kernels.py bfloat16 tf32 64
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource

from posenc_cli.encodings import contextual_fused, stick_breaking_fused
from posenc_cli.nn.fused_kernels import kernel_constants

KERNELS = {
    "cope forward": (contextual_fused._forward, False),
    "cope backward": (contextual_fused._backward, True),
    "stick-breaking forward": (stick_breaking_fused._forward, False),
    "stick-breaking backward": (stick_breaking_fused._backward, True),
}


def argument_type(name: str, io: str) -> str:
    """Sizes are int32, scale and floor float32, q, k and v in ``io``, other pointers float32."""
    if name in ("T", "S", "E", "EV", "N", "P"):
        return "i32"
    if name in ("scale", "floor"):
        return "fp32"
    return io if name in ("Q", "K", "V") else "*fp32"


def aligned(kernel: Any, types: dict[str, str]) -> dict[tuple[int, ...], list[list[Any]]]:
    """What Triton's launcher asserts of a launch at GPT-2 small's sizes: every pointer
    16-byte aligned and the lengths, head sizes and table width multiples of 16."""
    sixteen = ("T", "S", "E", "EV", "N")
    return {
        (i,): [["tt.divisibility", 16]]
        for i, n in enumerate(kernel.arg_names)
        if types[n].startswith("*") or n in sixteen
    }


def report(name: str, kernel: Any, io: str, constants: dict[str, Any]) -> dict[str, Any]:
    options = {k: constants.pop(k) for k in ("num_warps", "num_stages")}
    constants |= {"KEEP": True} if "KEEP" in kernel.arg_names else {}
    types = {n: "constexpr" if n in constants else argument_type(n, io) for n in kernel.arg_names}
    source = ASTSource(kernel, types, constexprs=constants, attrs=aligned(kernel, types))
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    with tempfile.TemporaryDirectory() as folder:
        ptx = Path(folder) / "kernel.ptx"
        ptx.write_text(compiled.asm["ptx"])
        command = [get_ptxas(90).path, "-v", "--gpu-name=sm_90a", str(ptx), "-o", "/dev/null"]
        done = subprocess.run(command, capture_output=True, text=True)
    spills = sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", done.stderr))
    scans = compiled.asm["ttgir"].count('"tt.scan"')
    return {"kernel": name, "scans": scans, "spills": spills, "shared": compiled.metadata.shared,
            "ptxas": done.returncode}  # fmt: skip


def main() -> None:
    dtype, precision, head = sys.argv[1], sys.argv[2], int(sys.argv[3])
    q = torch.empty(1, 1, 1, head, dtype=getattr(torch, dtype), device="meta")
    io = "*bf16" if dtype == "bfloat16" else "*fp32"
    for name, (kernel, backward) in KERNELS.items():
        constants = dict(kernel_constants(q, q, precision, backward))
        print(json.dumps(report(name, kernel, io, constants)), flush=True)


if __name__ == "__main__":
    main()
