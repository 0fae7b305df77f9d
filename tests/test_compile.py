"""train.compile=true: the traced model agrees with eager mode, without graph breaks where the
encodings promise it, and `posenc train` runs compiled end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import TINY, run_cli
from test_encodings import make_model, tokens

#: Encodings whose hooks never read a position value while tracing: one graph per forward.
FULL_GRAPH = ["none", "learned", "sinusoidal", "sinusoidal_learned", "rope"]


@pytest.mark.parametrize("name", FULL_GRAPH)
def test_traced_forward_and_gradients_match_eager_in_one_graph(name: str) -> None:
    """fullgraph=True fails on any graph break; the "eager" backend runs Dynamo's trace (and
    the encodings' compile-only code paths, e.g. RoPE's real-valued rotation) without the
    minutes of C++ compilation."""
    torch._dynamo.reset()
    model = make_model(name)
    x = tokens(24)
    eager = model(x)
    (eager.square().mean()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    traced = torch.compile(model, backend="eager", fullgraph=True)(x)
    (traced.square().mean()).backward()
    torch.testing.assert_close(traced, eager, rtol=1e-5, atol=1e-5)
    for n, p in model.named_parameters():
        if n in grads:
            torch.testing.assert_close(p.grad, grads[n], rtol=1e-4, atol=1e-6, msg=n)


def test_posenc_train_compiled_matches_eager_end_to_end(tmp_path: Path, corpus: Path) -> None:
    """TorchInductor really compiles (C++ on CPU), and the run ends where the eager one does."""
    args = [*TINY, "encoding=rope", "train.steps=10", "train.precision=fp32", "train.threads=1",
            "data=text", f"data.path={corpus}"]
    losses = {}
    for flag in ("false", "true"):
        res = run_cli(["train", *args, f"train.compile={flag}", f"hydra.run.dir=run-{flag}"],
                      tmp_path, tmp_path / "cache", timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        metrics = json.loads((tmp_path / f"run-{flag}" / "metrics.json").read_text())
        assert metrics["steps"] == 10
        losses[flag] = metrics["final_val_loss"]
    assert losses["true"] == pytest.approx(losses["false"], abs=2e-3)
