"""Atomic checkpoints: a failing save keeps the previous checkpoint (kills are in e2e/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posenc_cli.common.errors import PosencError
from posenc_cli.engine import checkpoint


def test_disk_full_during_save_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "last.pt"
    # load() accepts only states with model weights
    checkpoint.save_atomic({"step": 1, "model": {"w": torch.ones(3)}}, path)

    def full_disk(obj: object, fh: object) -> None:
        fh.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    with pytest.raises(PosencError, match="No space left on device"):
        checkpoint.save_atomic({"step": 2, "model": {"w": torch.zeros(3)}}, path)
    assert checkpoint.load(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
