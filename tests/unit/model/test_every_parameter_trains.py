"""Every parameter of every encoding's model gets a gradient in one training step, so
DistributedDataParallel can run without searching for unused parameters
(engine/distributed.py) and every rank's optimizer updates the same set."""

from __future__ import annotations

import pytest
import torch.nn.functional as F


@pytest.mark.encodings
def test_one_step_reaches_every_parameter(name: str, model, tokens) -> None:
    ids = tokens(17)
    logits = model(ids[:, :-1])
    F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, f"{name}: no gradient for {missing}"
