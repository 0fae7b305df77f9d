"""FoX's folded column in bf16 (model/folded.py, the path an accelerator takes in evaluation
under bf16 autocast): three bf16 parts carry the float32 column exactly, so the bf16 kernel
keeps the float32 column's precision where one bf16 column would not. Run here on the CPU's
bf16 kernel, with the accelerator's choice forced."""

from __future__ import annotations

import pytest
import torch

from posenc_cli.model import folded
from posenc_cli.model.folded import BF16_PARTS, bf16_parts, folded_attention, in_bf16_parts
from tests.unit.model.test_folded import fox_inputs, site


@pytest.fixture
def bf16_parts_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(folded, "in_bf16_parts", lambda q, key_cols: True)


def test_the_parts_sum_to_the_float32_value_exactly() -> None:
    """Down to 2^-100, where the last part would fall below bf16's normal range; under it
    the error stays under 2^-126."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4000, generator=gen) * 10 ** torch.randint(-25, 6, (4000,), generator=gen)
    x = torch.cat([x, torch.tensor([-8000.123, 1 / 3, 65504.7, 2.0**-100, 0.0])]).float()
    parts = bf16_parts(x)
    assert parts.dtype == torch.bfloat16 and parts.shape == (x.numel(), BF16_PARTS)
    assert torch.equal(parts.double().sum(-1), x.double())
    assert not torch.equal(parts[:, 0].double(), x.double())  # one part would not do
    tiny = torch.tensor([-1e-38, 3e-35, 2.0**-120]).float()
    assert (bf16_parts(tiny).double().sum(-1) - tiny.double()).abs().max() < 2.0**-126


def test_the_accelerator_choice() -> None:
    """bf16 off the CPU, without a gradient for the gates, while the widened head fits
    FlashAttention (256, in steps of 8)."""
    meta = torch.empty(1, 1, 4, 32, dtype=torch.bfloat16, device="meta")

    def columns(groups: int, **kw) -> torch.Tensor:
        return torch.empty(1, 1, 4, groups, device="meta", **kw)

    assert in_bf16_parts(meta, columns(4))
    assert in_bf16_parts(meta, columns(74))  # 32 + 222 -> 256
    assert not in_bf16_parts(meta, columns(75))  # 32 + 225 -> 264
    assert not in_bf16_parts(meta, columns(4, requires_grad=True))
    assert not in_bf16_parts(meta.float(), columns(4))
    cpu = torch.empty(1, 1, 4, 32, dtype=torch.bfloat16)
    assert not in_bf16_parts(cpu, torch.empty(1, 1, 4, 4))


@pytest.mark.usefixtures("bf16_parts_forced")
def test_bf16_parts_keep_the_float32_column_at_8k_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """c reaches about -8,000: against float64 on the same bf16 inputs, the parts are off by
    the bf16 rounding of the output only; one bf16 part (8 bits of a column in the
    thousands) misweighs the keys."""
    T = 8192
    enc, x, qkv = fox_inputs(T, torch.float64, heads=1, dim=2, d_model=2, seed=1)
    with torch.no_grad():
        enc.gates[0].bias.fill_(-0.5)
        q, k, v = (t.to(torch.bfloat16) for t in qkv)
        key_bias = enc.key_bias(k, site(T, x))
        assert key_bias.max() > 7000
        ref = folded_attention(q.double(), k.double(), v.double(), key_bias, 0.5)
        parts = folded_attention(q, k, v, key_bias.float(), 0.5)
        monkeypatch.setattr(folded, "BF16_PARTS", 1)
        one_part = folded_attention(q, k, v, key_bias.float(), 0.5)
    assert parts.dtype == torch.bfloat16 and torch.isfinite(parts).all()
    error = (parts.double() - ref).abs().max()
    assert error <= 2**-8 * ref.abs().max()
    assert (one_part.double() - ref).abs().max() > 10 * error
