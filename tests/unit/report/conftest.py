"""Fake run directories for `posenc compare`: metrics.json as training and evaluation write
them, for several encodings and seeds, nested at varying depth."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from posenc_cli.report.runs import Group, group_runs, load_runs

LENGTHS = [128, 256, 512, 1024, 2048]
#: Perplexity per encoding at LENGTHS for seed 0; seed s adds s to every value.
CURVES: dict[str, list[float | None]] = {
    "rope": [60.0, 75.0, 130.0, 300.0, 700.0],
    "alibi": [62.0, 60.0, 59.0, 59.5, 60.0],
    "sinusoidal": [64.0, 210.0, 900.0, 2500.0, 5200.0],
    "learned": [61.0, 90.0, 180.0, None, None],
}


def _fake_metrics(
    encoding: str, seed: int, train_length: int = 128, extrapolation: bool = True
) -> dict[str, Any]:
    """A metrics.json as training and the extrapolation task write it."""
    m: dict[str, Any] = {
        "encoding": encoding,
        "seed": seed,
        "train_length": train_length,
        "steps": 2000,
        "final_val_loss": 4.1 + 0.01 * seed,
        "final_train_loss": 4.2,
        "best_val_loss": 4.1,
        "tokens_per_s": 9000.0 + 100 * seed + len(encoding),
        "n_params": 1901696,
        "train_tokens": 2048000,
        "wall_time_s": 210.0,
        "time_s": {"setup": 5.0, "steps": 190.0, "validation": 10.0, "checkpoints": 5.0},
        "device": "cpu",
        "precision": "fp32",
        "model": {"d_model": 128, "n_layers": 4, "n_heads": 4, "d_ff": None},
        "data": "sotu",
        "vocab_size": 4096,
    }
    if extrapolation:
        ppl = {
            str(n): None if v is None else v + seed
            for n, v in zip(LENGTHS, CURVES[encoding], strict=True)
        }
        edges = list(range(0, 2048 + 1, 64))
        growth = {"alibi": 0.0, "rope": 0.002, "sinusoidal": 0.004, "learned": 0.001}[encoding]
        loss = [4.6 - 0.4 * min(e, 128) / 128 + growth * max(0, e - 128) for e in edges[:-1]]
        m["extrapolation"] = {
            "mode": "nonoverlapping",
            "stride": None,
            "tokens": 32768,
            "ppl": ppl,
            "loss": {k: None if v is None else math.log(v) for k, v in ppl.items()},
            "loss_by_position": {"bucket_edges": edges, "loss": loss},
            "notes": [],
        }
    return m


def _write_run(root: Path, name: str, metrics: dict[str, Any]) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps(metrics))
    return run


@pytest.fixture(scope="session")
def fake_metrics() -> Callable[..., dict[str, Any]]:
    """fake_metrics(encoding, seed, train_length=128, extrapolation=True): a metrics.json
    whose perplexities follow CURVES (seed s adds s)."""
    return _fake_metrics


@pytest.fixture(scope="session")
def write_run() -> Callable[[Path, str, dict[str, Any]], Path]:
    """write_run(root, name, metrics): root/name/metrics.json."""
    return _write_run


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 seeds of rope, alibi, sinusoidal; 2 of learned (null beyond its table); one rope at
    train length 256; one alibi run without extrapolation results; nested at varying depth."""
    root = tmp_path_factory.mktemp("sweep")
    for enc in ("rope", "alibi", "sinusoidal"):
        for seed in range(3):
            _write_run(root, f"multirun/{enc}/{seed}", _fake_metrics(enc, seed))
    for seed in range(2):
        _write_run(root, f"learned_{seed}", _fake_metrics("learned", seed))
    _write_run(root, "long/rope", _fake_metrics("rope", 0, train_length=256))
    _write_run(root, "pending/alibi_3", _fake_metrics("alibi", 3, extrapolation=False))
    return root


@pytest.fixture(scope="module")
def groups(sweep: Path) -> list[Group]:
    notes: list[str] = []
    return group_runs(load_runs([sweep], notes), notes)
