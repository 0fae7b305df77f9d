"""The one atomic writer never writes through a link planted where its temporary file goes."""

from __future__ import annotations

import os
from pathlib import Path

from posenc_cli.common.atomic import write_text_atomic


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
