"""DistributedDataParallel over a model whose model.layers leaves some layers without the run's
encoding: DDP refuses, at the second step, a parameter that got no gradient, so an encoding
with per-layer weights must hold them only for the layers that use it (encodings/per_layer.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from posenc_cli.config.compose import load
from posenc_cli.engine.build import build_model
from posenc_cli.engine.distributed import data_parallel


@pytest.fixture
def one_process_group(tmp_path: Path) -> Iterator[None]:
    """A gloo group of this process alone (a file store: no port shared with other tests)."""
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "overrides",
    [
        ["encoding=deberta", "model.layers=[encoding,none]"],
        ["encoding=rope", "model.layers=[encoding,transformer_xl]"],
        ["encoding=fox"],
    ],
)
def test_every_step_trains_whatever_the_layers_use(
    one_process_group: None, overrides: list[str]
) -> None:
    torch.manual_seed(0)
    model = build_model(load(["model=tiny", *overrides]), 50)
    wrapped = data_parallel(model, torch.device("cpu"))
    ids = torch.randint(0, 50, (2, 16))
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        wrapped(ids).logsumexp(-1).mean().backward()
        optimizer.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
