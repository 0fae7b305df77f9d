"""An interrupted preparation continues from its last finished stage and gives the tokens of
an uninterrupted one; a damaged kept stage is redone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from posenc_cli.config.compose import compose
from posenc_cli.data import prepare as prep

DOCS = [f"Story {i}: the fox ran {i % 7} miles and slept under tree {i % 5}.\n" for i in range(400)]


def config(tmp_path: Path, cache: str):
    path = tmp_path / "corpus.txt"
    path.write_text("<|endoftext|>".join(DOCS))
    cfg = compose(["data=text", f"data.path={path}", "data.vocab_size=300"])
    cfg.data.cache_dir = str(tmp_path / cache)
    return cfg.data


def interrupt_at_val(monkeypatch: pytest.MonkeyPatch) -> None:
    real = prep.write_ids

    def write_ids(tok, segments, path, *args):
        if Path(path).name == "val.bin":
            raise KeyboardInterrupt
        return real(tok, segments, path, *args)

    monkeypatch.setattr(prep, "write_ids", write_ids)


def stages_dir(data_cfg) -> Path:
    (found,) = Path(data_cfg.cache_dir).glob("*.stages")
    return found


def test_a_rerun_keeps_the_tokenizer_and_training_ids(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data_cfg = config(tmp_path, "cache")
    with monkeypatch.context() as m:
        interrupt_at_val(m)
        with pytest.raises(KeyboardInterrupt):
            prep.prepare(data_cfg)
    kept = stages_dir(data_cfg)
    assert {p.name for p in kept.iterdir()} >= {"tokenizer.json", "train.bin", "train.stage.json"}
    written: list[str] = []
    real = prep.write_ids
    monkeypatch.setattr(prep, "train_tokenizer", lambda *a: pytest.fail("retrained"))
    monkeypatch.setattr(
        prep,
        "write_ids",
        lambda tok, seg, path, *a: written.append(Path(path).name) or real(tok, seg, path, *a),
    )
    resumed = prep.prepare(data_cfg)
    assert written == ["val.bin"] and not kept.exists()
    monkeypatch.undo()
    fresh = prep.prepare(config(tmp_path, "fresh"))
    assert resumed.tokenizer_path.read_bytes() == fresh.tokenizer_path.read_bytes()
    assert np.array_equal(resumed.train, fresh.train) and np.array_equal(resumed.val, fresh.val)


def test_a_damaged_kept_stage_is_redone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data_cfg = config(tmp_path, "cache")
    with monkeypatch.context() as m:
        interrupt_at_val(m)
        with pytest.raises(KeyboardInterrupt):
            prep.prepare(data_cfg)
    train = stages_dir(data_cfg) / "train.bin"
    train.write_bytes(train.read_bytes()[:-2])  # one id short
    written: list[str] = []
    real = prep.write_ids
    monkeypatch.setattr(
        prep,
        "write_ids",
        lambda tok, seg, path, *a: written.append(Path(path).name) or real(tok, seg, path, *a),
    )
    resumed = prep.prepare(data_cfg)
    assert written == ["train.bin", "val.bin"]
    assert len(resumed.train) == resumed.meta["train_tokens"]
