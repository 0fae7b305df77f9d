"""Precision choices: what `train.precision=auto` resolves to, bf16 autocast keeps fp32 where it
must; a failing compiler becomes one line (the bf16-vs-fp32 and compiled runs are in e2e/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posenc_cli.common.errors import PosencError
from posenc_cli.engine import runtime


@pytest.mark.parametrize("fast", [True, False])
def test_auto_is_bf16_on_cpus_with_native_bf16_only(
    fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "cpu_has_fast_bf16", lambda: fast)
    cpu = torch.device("cpu")
    assert runtime.pick_precision("auto", cpu) == ("bf16" if fast else "fp32")
    assert runtime.pick_precision("fp32", cpu) == "fp32"
    assert runtime.pick_precision("bf16", cpu) == "bf16"
    assert runtime.pick_precision("auto", torch.device("mps")) == "fp32"


def test_explicit_bf16_on_a_cpu_without_it_warns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from posenc_cli.config.compose import load

    cfg = load(["device=cpu", "train.precision=bf16"])
    monkeypatch.setattr(runtime, "cpu_has_fast_bf16", lambda: False)
    assert runtime.make_runtime(cfg).precision == "bf16"
    assert "emulated and slower than fp32" in capsys.readouterr().out
    monkeypatch.setattr(runtime, "cpu_has_fast_bf16", lambda: True)
    runtime.make_runtime(cfg)
    assert "emulated" not in capsys.readouterr().out


def test_auto_is_bf16_on_cuda_and_refused_where_unsupported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cuda = torch.device("cuda")
    assert runtime.pick_precision("auto", cuda) == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    with pytest.raises(PosencError, match="does not support bf16"):
        runtime.pick_precision("bf16", cuda)


def test_bf16_autocast_keeps_fp32_master_weights_and_attention(
    monkeypatch: pytest.MonkeyPatch, make_model, tokens
) -> None:
    """Under the run's autocast on CPU the projections run in bf16, the fused attention in
    float32 (its bf16 backward is slower there), and the parameters stay float32."""
    import torch.nn.functional as F

    fused = F.scaled_dot_product_attention
    attention_dtypes: list[torch.dtype] = []

    def spy(q: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        attention_dtypes.append(q.dtype)
        return fused(q, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    model = make_model("rope")
    seen: dict[str, torch.dtype] = {}
    model.layers[0].attn.output_proj.register_forward_hook(
        lambda m, inp, out: seen.update(proj=out.dtype)
    )
    with runtime.Runtime(torch.device("cpu"), "bf16").autocast():
        logits = model(tokens(16))
    assert seen["proj"] == torch.bfloat16 and logits.dtype == torch.bfloat16
    assert attention_dtypes and set(attention_dtypes) == {torch.float32}
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_compile_failure_after_a_checkpoint_names_the_resume_command(tmp_path: Path) -> None:
    from torch._dynamo.exc import BackendCompilerFailed

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"")
    with pytest.raises(PosencError, match="no kernel for you") as info:
        with runtime.compile_failures(tmp_path, compiling=True):
            raise BackendCompilerFailed(lambda: None, RuntimeError("no kernel for you"), None)
    assert f"posenc train resume={tmp_path} train.compile=false" in str(info.value)
    with pytest.raises(ValueError):  # anything else, or not compiling: untouched
        with runtime.compile_failures(tmp_path, compiling=True):
            raise ValueError("x")
