"""The one atomic writer never writes through a link planted where its temporary file goes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from posenc_cli.common.atomic import write_folder_atomic, write_text_atomic


def test_a_planted_temporary_link_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "folder" / "summary.md"
    target.parent.mkdir()
    (target.parent / f".summary.md.tmp{os.getpid()}").symlink_to(victim)
    write_text_atomic(target, "new")
    assert victim.read_text() == "precious"
    assert target.read_text() == "new" and not target.is_symlink()
    assert [p.name for p in target.parent.iterdir()] == ["summary.md"]


def test_a_link_at_the_destination_is_replaced_by_the_file(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "summary.md"
    target.symlink_to(victim)
    write_text_atomic(target, "new")
    assert victim.read_text() == "precious" and target.read_text() == "new"


def test_a_killed_writers_partial_folder_is_removed_by_the_next_write(tmp_path: Path) -> None:
    """What SIGKILL leaves (.OUT.partial<pid> of a pid no longer running) goes with the next
    write to OUT; a live writer's folder and other files stay."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    left = tmp_path / f".out.partial{dead.stdout.strip()}"
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "big.bin").write_bytes(b"x" * 1000)
    live = tmp_path / f".out.partial{os.getppid()}"
    live.mkdir()
    other = tmp_path / ".out.partialxyz"
    other.mkdir()
    write_folder_atomic(tmp_path / "out", lambda tmp: (tmp / "a.txt").write_text("done"))
    assert (tmp_path / "out" / "a.txt").read_text() == "done"
    assert not left.exists() and live.is_dir() and other.is_dir()
