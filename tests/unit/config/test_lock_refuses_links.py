"""Locking a run folder refuses symbolic links where posenc would write, so a planted link
never redirects a write outside the user's folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc_cli.common.errors import PosencError
from posenc_cli.config.rundir import lock_run_dir


def test_a_planted_lock_link_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".posenc.lock").symlink_to(victim)
    with pytest.raises(PosencError, match="symbolic link"):
        lock_run_dir(run)
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("where", ["checkpoints", "eval/extrapolation", "tokenizer.json"])
def test_links_where_posenc_writes_are_refused(where: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "elsewhere").mkdir()
    (run / where).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PosencError, match="is a symbolic link"):
        lock_run_dir(run)
    assert list((tmp_path / "elsewhere").iterdir()) == []
