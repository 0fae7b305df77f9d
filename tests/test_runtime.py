"""Precision choices: what `train.precision=auto` resolves to, and that bf16 trains like fp32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from posenc_cli import runtime
from posenc_cli.errors import PosencError

from conftest import TINY, run_cli


@pytest.mark.parametrize("fast", [True, False])
def test_auto_is_bf16_on_cpus_with_native_bf16_only(fast: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "cpu_has_fast_bf16", lambda: fast)
    cpu = torch.device("cpu")
    assert runtime.pick_precision("auto", cpu) == ("bf16" if fast else "fp32")
    assert runtime.pick_precision("fp32", cpu) == "fp32"
    assert runtime.pick_precision("bf16", cpu) == "bf16"
    assert runtime.pick_precision("auto", torch.device("mps")) == "fp32"


def test_explicit_bf16_on_a_cpu_without_it_warns(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"device": "cpu", "train": {"threads": None, "precision": "bf16"}})
    monkeypatch.setattr(runtime, "cpu_has_fast_bf16", lambda: False)
    assert runtime.make_runtime(cfg).precision == "bf16"
    assert "emulated and slower than fp32" in capsys.readouterr().out
    monkeypatch.setattr(runtime, "cpu_has_fast_bf16", lambda: True)
    runtime.make_runtime(cfg)
    assert "emulated" not in capsys.readouterr().out


def test_auto_is_bf16_on_cuda_and_refused_where_unsupported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = torch.device("cuda")
    assert runtime.pick_precision("auto", cuda) == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    with pytest.raises(PosencError, match="does not support bf16"):
        runtime.pick_precision("bf16", cuda)


def test_bf16_autocast_keeps_fp32_master_weights_and_attention(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the run's autocast on CPU the projections run in bf16, the fused attention in
    float32 (its bf16 backward is slower there), and the parameters stay float32."""
    import torch.nn.functional as F

    from test_encodings import make_model, tokens

    fused = F.scaled_dot_product_attention
    attention_dtypes: list[torch.dtype] = []

    def spy(q: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        attention_dtypes.append(q.dtype)
        return fused(q, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    model = make_model("rope")
    seen: dict[str, torch.dtype] = {}
    model.layers[0].attn.output_proj.register_forward_hook(
        lambda m, inp, out: seen.update(proj=out.dtype))
    with runtime.Runtime(torch.device("cpu"), "bf16").autocast():
        logits = model(tokens(16))
    assert seen["proj"] == torch.bfloat16 and logits.dtype == torch.bfloat16
    assert attention_dtypes and set(attention_dtypes) == {torch.float32}
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_bf16_run_ends_close_to_the_fp32_run(tmp_path: Path, corpus: Path) -> None:
    """The reason bf16 may be the default: same data, same seed, nearly the same loss."""
    losses = {}
    for precision in ("fp32", "bf16"):
        res = run_cli(["train", *TINY, "encoding=rope", "data=text", f"data.path={corpus}",
                       f"train.precision={precision}", f"hydra.run.dir={precision}"],
                      tmp_path, tmp_path / "cache")
        assert res.returncode == 0, res.stderr[-2000:]
        metrics = json.loads((tmp_path / precision / "metrics.json").read_text())
        assert metrics["precision"] == precision
        losses[precision] = metrics["final_val_loss"]
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.01)
    assert losses["bf16"] != losses["fp32"]  # it really ran in bf16
