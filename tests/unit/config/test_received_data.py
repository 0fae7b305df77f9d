"""received_data (plain YAML for posenc compare) reads a saved config as load_received does:
OmegaConf's numbers (1e-3 is a float), no timestamps, the same refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posenc_cli.config.received import load_received, received_data

TEXT = """\
train: {lr: 1e-3, min_lr: 3.0e-5, steps: 2_000, beta2: .95, clip: +1, big: -2E+4}
eval: {factors: [1, 2, 16], stride: null, at_end: true, day: 2026-12-07, t: '1e-3'}
encoding: {name: rope, theta: 10000.0, inf: .inf, nan_like: .NaN, words: [a, 'b c']}
seed: ~
"""


def test_it_reads_what_load_received_reads(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(TEXT)
    plain = received_data(path)
    expected = OmegaConf.to_container(load_received(path), resolve=False)
    assert repr(plain).replace("nan", "NaN") == repr(expected).replace("nan", "NaN")
    assert plain["train"]["lr"] == 1e-3 and isinstance(plain["train"]["lr"], float)
    assert plain["eval"]["day"] == "2026-12-07" and plain["eval"]["t"] == "1e-3"


def test_it_refuses_what_load_received_refuses(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [1]\n" + "".join(f"b{i}: *a\n" for i in range(40)))
    for read in (received_data, load_received):
        with pytest.raises(ValueError, match="YAML aliases"):
            read(bomb)
