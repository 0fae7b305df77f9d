"""model.qk_norm: each head's queries and keys RMS-normalised over the head dimension, with a
learned gain, before the encoding transforms them; checked against the formula written out by
hand, for an encoding without a bias (the fused kernel) and with one (its bias path); float32,
as RMSNorm computes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import load
from posenc_cli.encodings import Span, build_encoding
from posenc_cli.engine.build import build_model
from posenc_cli.engine.memory import n_params
from posenc_cli.model.context import AttentionContext

D, H, T = 32, 4, 9
E = D // H


def _norm(x: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * gain


@pytest.mark.parametrize("name", ["none", "alibi"])
def test_attention_with_qk_norm_is_the_formula(repo: Path, name: str) -> None:
    torch.manual_seed(0)
    enc = build_encoding(OmegaConf.load(repo / f"configs/encoding/{name}.yaml"), D, H, 1)
    from posenc_cli.model.attention import CausalSelfAttention

    attn = CausalSelfAttention(D, H, 0, qk_norm=True)
    assert attn.q_norm is not None and attn.k_norm is not None
    with torch.no_grad():  # gains other than 1, so a missing gain would show
        attn.q_norm.weight.uniform_(0.5, 1.5)
        attn.k_norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, T, D)
    ctx = AttentionContext(enc, Span(0, T, x.device), None, 2, None)
    fast = attn(x, ctx)
    heads = lambda y: y.view(2, T, H, E).transpose(1, 2)  # noqa: E731
    q = _norm(heads(attn.q_proj(x)), attn.q_norm.weight)
    k = _norm(heads(attn.k_proj(x)), attn.k_norm.weight)
    i = torch.arange(T)
    bias = enc.position_bias(i, i) if enc.has_bias else 0.0  # with -inf above the diagonal
    logits = q @ k.transpose(-1, -2) / math.sqrt(E) + bias
    logits = logits.masked_fill(i[None, :] > i[:, None], -math.inf)
    out = (logits.softmax(-1) @ heads(attn.v_proj(x))).transpose(1, 2).reshape(2, T, D)
    torch.testing.assert_close(fast, attn.output_proj(out), rtol=1e-5, atol=1e-6)


def test_off_by_default_adds_no_weights_and_on_adds_two_gains_per_layer() -> None:
    plain, normed = load(["model=tiny"]), load(["model=tiny", "model.qk_norm=true"])
    names = set(build_model(normed, 64).state_dict()) - set(build_model(plain, 64).state_dict())
    layers = plain.model.n_layers
    assert names == {f"layers.{i}.attn.{n}_norm.weight" for i in range(layers) for n in "qk"}
    assert n_params(normed, 64) == build_model(normed, 64).num_parameters()


def test_a_qk_norm_run_trains_a_step_with_every_kind_of_encoding() -> None:
    from posenc_cli.engine.runtime import Runtime
    from posenc_cli.engine.step import make_optimizer, train_step

    rt = Runtime(torch.device("cpu"), "fp32")
    for name in ("rope", "t5", "fox"):
        cfg = load([f"encoding={name}", "model=tiny", "model.qk_norm=true"])
        torch.manual_seed(0)
        model = build_model(cfg, 64)
        x = torch.randint(0, 64, (2, 16))
        loss, _ = train_step(model, make_optimizer(model, cfg.train), x, x, rt, 1.0)
        assert torch.isfinite(loss)
        assert model.layers[0].attn.q_norm.weight.grad is not None


def test_an_export_of_a_qk_norm_run_is_refused() -> None:
    from posenc_cli.hf.export_checks import check_exportable

    with pytest.raises(PosencError, match="uses model.qk_norm"):
        check_exportable(load(["model=tiny", "model.qk_norm=true"]), Path("run"))
