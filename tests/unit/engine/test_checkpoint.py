"""Atomic checkpoints: a failing save keeps the previous checkpoint (kills are in e2e/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import load
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


def test_a_checkpoint_changed_after_its_save_is_refused(tmp_path: Path) -> None:
    """The digest recorded at save time is checked by every load (eval, extend, export,
    resume, inspect all read through checkpoint.load)."""
    model = torch.nn.Linear(3, 2)
    path = tmp_path / "best.pt"
    checkpoint.save_atomic(checkpoint.best_state(model, 5, 4.2, load([])), path)
    assert checkpoint.load(path)["step"] == 5
    state = torch.load(path, weights_only=True)
    assert state["weights_sha256"] == checkpoint.weights_digest(model)
    state["model"]["weight"][0, 0] += 1.0  # one weight changed, the digest kept
    torch.save(state, path)
    with pytest.raises(PosencError, match="holds weights other than those it recorded"):
        checkpoint.load(path)
    state["model"]["weight"] = "not a tensor"
    torch.save(state, path)
    with pytest.raises(PosencError, match="holds weights other than those it recorded"):
        checkpoint.load(path)


def test_a_checkpoint_without_a_digest_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "old.pt"
    torch.save({"model": {"w": torch.ones(2)}, "step": 3}, path)
    assert checkpoint.load(path)["step"] == 3
