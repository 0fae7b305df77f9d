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
from posenc_cli.model.flex import has_flex_form
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


def _loss_and_grads(model, x, y, rt: Runtime) -> tuple[float, torch.Tensor]:
    model.zero_grad()
    loss = lm_loss(model, x, y, rt)
    loss.backward()
    return loss.item(), torch.cat([p.grad.flatten().double().cpu() for p in model.parameters()])


@pytest.mark.encodings(select=lambda enc: has_flex_form(enc, local=True))
def test_compiled_flex_matches_the_default_path(
    name: str, make_model, tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train.attention=flex on CUDA (compiled FlexAttention, forward and backward) in a model
    with a windowed and a global layer, past the training length: fp32 loss and every
    gradient equal the default path's (TF32 off); bf16 autocast stays within bf16 rounding
    of the float64 default path."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    x, y = tokens(32).cuda(), tokens(32, seed=2).cuda()
    model = make_model(name).cuda()
    model.windows = [6, None]
    fp32 = Runtime(torch.device("cuda"), "fp32")
    results = {}
    for kernel in ("sdpa", "flex"):
        assert model.use_attention(kernel) in ("sdpa", kernel)
        results[kernel] = _loss_and_grads(model, x, y, fp32)
    assert results["flex"][0] == pytest.approx(results["sdpa"][0], rel=1e-5)
    assert torch.allclose(results["flex"][1], results["sdpa"][1], rtol=1e-3, atol=1e-5)
    reference = make_model(name).cuda().double()
    reference.windows = [6, None]
    exact, _ = _loss_and_grads(reference, x, y, fp32)
    model.use_attention("flex")
    bf16, _ = _loss_and_grads(model, x, y, Runtime(torch.device("cuda"), "bf16"))
    assert bf16 == pytest.approx(exact, rel=2e-2)


@pytest.mark.slow
def test_posenc_train_on_the_gpu(tmp_path: Path, corpus: Path, cache_dir: Path) -> None:
    args = [*TINY, "device=cuda", "data=text", f"data.path={corpus}", "hydra.run.dir=run"]
    res = run_cli(["train", *args], tmp_path, cache_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["extrapolation"]["device"] == "cuda"
    assert metrics["extrapolation"]["precision"] == pick_precision("auto", torch.device("cuda"))
