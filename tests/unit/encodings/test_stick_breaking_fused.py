"""Stick-breaking's fused Triton kernel (encodings/stick_breaking_fused.py), run by Triton's
interpreter on the CPU: outputs and the gradients of q, k and v equal the paper's product
formula computed in float64 (tests/reference/stick_breaking.py), over several query and key
blocks and for queries that end with more keys; it is causal; it keeps nothing of size
(T, S); and a model with train.attention=flex takes it, with the default path's logits and
gradients. The compiled kernel on CUDA: tests/gpu/test_stick_breaking_fused_cuda.py."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest
import torch

from tests.helpers.fused import assert_same_results, through_each_kernel

pytest.importorskip("triton", reason="the fused kernel is written in Triton")
pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="with CUDA the compiled kernel is checked instead (tests/gpu/)",
)
SCALE = 0.7
FLOOR = -80.0


@pytest.fixture
def interpreted() -> ModuleType:
    """The kernel module, imported only where Triton is."""
    return importlib.import_module("posenc_cli.encodings.stick_breaking_fused")


def qkv(T: int, S: int, E: int = 8, Ev: int = 8, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(2, 2, n, e, generator=gen, dtype=torch.float64).requires_grad_()
        for n, e in ((T, E), (S, E), (S, Ev))
    ]


def outputs_and_gradients(out: torch.Tensor, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    weights = torch.randn(
        out.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64
    )
    return [out.detach(), *torch.autograd.grad((out * weights.to(out.dtype)).sum(), tensors)]


@pytest.mark.parametrize(
    ("T", "S", "E", "Ev", "floor"),
    [(24, 24, 8, 8, FLOOR), (9, 30, 8, 8, FLOOR), (16, 16, 8, 8, FLOOR), (1, 20, 8, 8, FLOOR),
     (21, 21, 12, 20, FLOOR), (20, 20, 8, 8, -3.0)],
    ids=["one-length", "fewer-queries", "one-block", "one-query", "head-12-value-20", "floor"],
)  # fmt: skip
def test_fused_equals_the_product_formula(
    interpreted: ModuleType, make_model, reference_attention, T, S, E, Ev, floor
) -> None:
    """float32 through the kernel against float64 through the formula, to float32 precision
    relative to each tensor's largest entry. At a floor of −3 (large logits) many
    log-weights are clamped, and the formula clamps them the same way."""
    enc = make_model("stick_breaking").encoding
    exact = qkv(T, S, E, Ev)
    scale = SCALE if floor == FLOOR else 2.0
    reference = (
        reference_attention(*exact, scale, enc=enc)
        if floor == FLOOR
        else floored_product(*exact, scale, floor)
    )
    expected = outputs_and_gradients(reference, exact)
    single = [t.detach().float().requires_grad_() for t in exact]
    got = outputs_and_gradients(interpreted.fused_stick_breaking(*single, scale, floor), single)
    for name, g, e in zip(["out", "q", "k", "v"], got, expected, strict=True):
        assert g.dtype == torch.float32
        err = (g.double() - e).abs().max() / e.abs().max().clamp(min=1.0)
        assert err < 2e-6, (name, float(err))


def floored_product(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, floor: float
) -> torch.Tensor:
    """The product formula in log space, log A_ij = log σ(z_ij) + Σ_{j<k<i} log(1 − σ(z_ik)),
    clamped to [floor, 0] as posenc clamps it; the rest, at least 0, to the own value."""
    T, S = q.shape[-2], k.shape[-2]
    beta = torch.sigmoid(scale * q @ k.transpose(-1, -2))
    earlier = torch.arange(S)[None, :] < torch.arange(S - T, S)[:, None]
    kept = torch.log1p(-beta).masked_fill(~earlier, 0.0)
    log_weights = beta.log() + kept.flip(-1).cumsum(-1).flip(-1) - kept
    assert (log_weights[..., earlier] < floor).any()  # the floor binds
    weights = log_weights.clamp(floor, 0.0).exp().masked_fill(~earlier, 0.0)
    rest = (1 - weights.sum(-1)).clamp(min=0.0)
    return weights @ v + rest[..., None] * v[..., S - T :, :]


def test_fused_is_causal_and_keeps_nothing_of_size_t_by_s(interpreted: ModuleType) -> None:
    """A new key 50 and value 50 change rows 50 on (row 50's own value) and no earlier one;
    what the backward keeps is q, k, v, a sum per row and a carry per row and key block."""
    q, k, v = (t.detach().float() for t in qkv(96, 96))
    before = interpreted.fused_stick_breaking(q, k, v, SCALE, FLOOR)
    k[..., 50, :], v[..., 50, :] = 5.0, -5.0
    after = interpreted.fused_stick_breaking(q, k, v, SCALE, FLOOR)
    assert torch.equal(before[..., :50, :], after[..., :50, :])
    assert not torch.equal(before[..., 50, :], after[..., 50, :])
    assert not torch.equal(before[..., 51, :], after[..., 51, :])
    out = interpreted.fused_stick_breaking(q.requires_grad_(), k, v, SCALE, FLOOR)
    blocks = -(-96 // 16)  # key tiles under the interpreter
    sizes = sorted(t.numel() for t in out.grad_fn.saved_tensors)
    assert sizes == sorted([2 * 2 * 96 * 8] * 3 + [2 * 2 * 96, 2 * 2 * 96 * blocks])


@pytest.mark.parametrize("windows", [[None, None], [6, None]], ids=["global", "one-windowed"])
def test_a_stick_breaking_model_takes_the_fused_kernel_under_flex(
    make_model, tokens, monkeypatch: pytest.MonkeyPatch, windows
) -> None:
    """Every global layer takes the kernel once per forward (a windowed one keeps its own
    path), and the logits and every gradient equal the default path's."""
    model = make_model("stick_breaking")
    model.windows = windows
    x = tokens(40)
    results = through_each_kernel(model, lambda m: m(x), monkeypatch)
    assert_same_results(results, windows.count(None))


def test_with_log_n_scaling_the_kernel_takes_the_scaled_queries(
    make_model, tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stick-breaking's default path attends with the scaled queries as well, so the kernel
    serves log-n scaling too (CoPE's does not: tests/unit/encodings/test_cope_fused.py)."""
    model = make_model("stick_breaking")
    model.logn_length = 16
    x = tokens(40)
    results = through_each_kernel(model, lambda m: m(x), monkeypatch)
    assert_same_results(results, 2)
