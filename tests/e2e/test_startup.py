"""The help screens and the encoding list answer without importing torch (or Hydra), and a bad
override (an encoding's own parameters included) is refused without torch: a new interpreter
runs `python -X importtime -m posenc_cli ...`, whose import log names every module the command
loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.cli import run_cli

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
HEAVY = {"torch", "hydra", "numpy", "matplotlib", "tokenizers"}


def _imported(stderr: str) -> set[str]:
    """Top-level package names in a `-X importtime` log ("import time: self | total | name")."""
    lines = [ln for ln in stderr.splitlines() if ln.startswith("import time:")]
    return {ln.rsplit("|", 1)[1].strip().split(".")[0] for ln in lines[1:]}


@pytest.mark.parametrize("args", [["--help"], ["train", "--help"], ["eval", "--help"]])
def test_help_imports_no_heavy_module(tmp_path, args) -> None:
    out = run_cli(args, tmp_path, tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert out.returncode == 0, out.stderr
    assert "Usage:" in out.stdout
    imported = _imported(out.stderr)
    assert "typer" in imported  # the log is read right: the CLI's own framework is in it
    assert not HEAVY & imported


EVERY_HELP = """
import json, sys, typer
from posenc_cli.cli.app import app, main
for name in typer.main.get_command(app).commands:
    sys.argv = ["posenc", name, "--help"]
    try:
        main()
    except SystemExit as exc:
        assert exc.code in (0, None), name
print(json.dumps([len(typer.main.get_command(app).commands), sorted(sys.modules)]))
"""


def test_every_command_help_in_one_process_imports_no_heavy_module() -> None:
    """All of them in one interpreter, so a command whose help imports torch cannot hide."""
    out = subprocess.run(
        [sys.executable, "-c", EVERY_HELP], capture_output=True, text=True, check=True
    )
    count, modules = json.loads(out.stdout.strip().splitlines()[-1])
    assert count >= 13 and "Usage:" in out.stdout
    assert not HEAVY & {m.split(".")[0] for m in modules}


def test_encodings_lists_every_yaml_without_torch(tmp_path) -> None:
    out = run_cli(["encodings"], tmp_path, tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert out.returncode == 0, out.stderr
    assert not HEAVY & _imported(out.stderr)
    rows = {ln.split("│")[1].strip(): ln for ln in out.stdout.splitlines() if "│" in ln}
    yamls = sorted((REPO / "configs" / "encoding").glob("*.yaml"))
    assert len(yamls) > 10 and set(rows) >= {p.stem for p in yamls}
    for path in yamls:
        description = yaml.safe_load(path.read_text())["description"]
        assert description in rows[path.stem]


ENCODING_ERRORS = [
    ["train", "encoding=rope", "encoding.theta=-1"],
    ["train", "encoding=t5", "encoding.max_distance=10"],
    ["train", "encoding=alibi", "eval.rope_scaling=pi"],
]


@pytest.mark.parametrize(
    "args",
    [
        ["train", "model.d_modl=3"],
        ["sweep", "encoding=rope,ropee"],
        ["bench", "encoding=nope"],
        ["resume", "no-such-run"],
        *ENCODING_ERRORS,
    ],
)
def test_a_config_error_is_one_line_and_creates_nothing(tmp_path, args) -> None:
    """Errors of the schema's keys come without torch; an encoding's own parameters are its
    class's (encodings/parameters.py), whose module imports torch: one line all the same."""
    out = run_cli(args, tmp_path, tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    said = [ln for ln in out.stderr.splitlines() if not ln.startswith("import time:")]
    assert out.returncode == 2 and len(said) == 1 and said[0].startswith("posenc: error: ")
    assert bool((HEAVY - {"hydra"}) & _imported(out.stderr)) == (args in ENCODING_ERRORS)
    assert list(tmp_path.iterdir()) == []


def test_the_startup_bench_times_every_command_with_its_exit_code() -> None:
    from posenc_cli.bench.startup import COMMANDS, time_commands

    times = time_commands(1)
    assert list(times) == [" ".join(c) for c, _ in COMMANDS]
    assert all(len(t) == 1 and 0 < t[0] < 60 for t in times.values())
