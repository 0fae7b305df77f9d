"""Every Markdown file `posenc compare` writes ends with where its figures come from: the
command that rewrites it, the code, the runs and the machine, each read rather than typed."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from posenc_cli.report import compare as compare_module
from posenc_cli.report.compare import compare
from posenc_cli.report.provenance import HEADING, command_line, provenance
from posenc_cli.report.runs import Run

REPO = Path(__file__).resolve().parents[3]


def test_the_command_line_survives_the_shell() -> None:
    dirs = [Path("runs/a b"), Path("it's")]
    line = command_line(dirs, Path("docs/results/x"))
    assert shlex.split(line) == ["posenc", "compare", "runs/a b", "it's", "--out", "docs/results/x"]
    assert command_line([Path("r")], None) == "posenc compare r"


def test_the_result_keys_are_those_the_runs_hold() -> None:
    """A synthetic-task run holds no perplexity by length: its block names the task's key."""
    task = Run(Path("a"), {"seed": 0, "length_generalization": {"copy": {}}}, {})
    scaled = Run(Path("b"), {"seed": 1, "extrapolation": {}, "extrapolation_yarn": {}}, {})
    assert "result keys: length_generalization; seeds: 0\n" in provenance([task], "c")
    both = provenance([task, scaled], "c")
    assert "result keys: extrapolation, extrapolation_yarn, length_generalization;" in both


def test_comparison_md_ends_with_the_provenance(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    compare([sweep / "multirun", sweep / "learned_0"], out)
    text = (out / "comparison.md").read_text()
    assert text.count(HEADING) == 1
    table, block = text.split(HEADING)
    assert "| rope |" in table and "| rope |" not in block
    assert f"`posenc compare {sweep / 'multirun'} {sweep / 'learned_0'} --out {out}`" in block
    assert "runs: 10;" in block  # 3 seeds of rope, alibi and sinusoidal, one learned
    assert "seeds: 0, 1, 2\n" in block and "result keys: extrapolation;" in block
    assert "device cpu, precision fp32" in block
    assert f"{os.cpu_count()} CPUs, Python {platform.python_version()}" in block
    if (REPO / ".git").exists():
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"commit {head[:12]}" in block


def test_the_provenance_is_read_before_anything_is_written(
    sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A comparison written into the checkout (docs/results/...) changes tracked files; read
    after writing, the commit would always carry '+ local changes'."""
    out = tmp_path / "out"
    seen: list[list[str]] = []

    def recording(runs: list[Any], command: str) -> str:
        seen.append(sorted(p.name for p in out.glob("*")) if out.exists() else [])
        return provenance(runs, command)

    monkeypatch.setattr(compare_module, "provenance", recording)
    compare([sweep / "multirun"], out)
    assert seen == [[]]
    assert (out / "comparison.md").read_text().count(HEADING) == 1


def test_only_markdown_gets_the_block(sweep: Path, tmp_path: Path) -> None:
    compare([sweep / "multirun"], tmp_path)
    assert HEADING not in (tmp_path / "comparison.csv").read_text()
