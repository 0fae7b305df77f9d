"""The CUDA paths, run where a GPU is (`python -m pytest -m gpu`); skipped without one.

What the CPU suite cannot reach: device selection, every encoding's forward and backward on
the GPU against the same model on the CPU, bf16 autocast, and a whole `posenc train` run on
the GPU (its fused kernels, its NCCL-capable process group)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from posenc_cli.engine.runtime import Runtime, pick_device, pick_precision
from posenc_cli.engine.step import lm_loss
from tests.helpers.cli import run_cli
from tests.helpers.configs import TINY

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_auto_picks_the_gpu_and_bf16() -> None:
    device = pick_device("auto")
    assert device.type == "cuda"
    expected = "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    assert pick_precision("auto", device) == expected


@pytest.mark.encodings
def test_every_encoding_on_the_gpu_matches_the_cpu(
    name: str, make_model, tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fp32 logits and gradients on CUDA equal the CPU's (TF32 off), and bf16 autocast gives
    a finite loss close to fp32's."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    x = tokens(24)
    y = tokens(24, seed=2)
    losses = {}
    grads = {}
    for device in ("cpu", "cuda"):
        model = make_model(name).to(device)
        rt = Runtime(torch.device(device), "fp32")
        loss = lm_loss(model, x.to(device), y.to(device), rt)
        loss.backward()
        losses[device] = loss.item()
        grads[device] = torch.cat([p.grad.flatten().cpu() for p in model.parameters()])
    assert losses["cuda"] == pytest.approx(losses["cpu"], rel=1e-4)
    assert torch.allclose(grads["cuda"], grads["cpu"], rtol=1e-3, atol=1e-5)
    model = make_model(name).cuda()
    bf16 = lm_loss(model, x.cuda(), y.cuda(), Runtime(torch.device("cuda"), "bf16"))
    bf16.backward()
    assert torch.isfinite(bf16) and bf16.item() == pytest.approx(losses["cpu"], rel=5e-2)


@pytest.mark.slow
def test_posenc_train_on_the_gpu(tmp_path: Path, corpus: Path, cache_dir: Path) -> None:
    args = [*TINY, "device=cuda", "data=text", f"data.path={corpus}", "hydra.run.dir=run"]
    res = run_cli(["train", *args], tmp_path, cache_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["extrapolation"]["device"] == "cuda"
    assert metrics["extrapolation"]["precision"] == pick_precision("auto", torch.device("cuda"))
