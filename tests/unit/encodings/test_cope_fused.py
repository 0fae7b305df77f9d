"""CoPE's fused Triton kernel (encodings/contextual_fused.py), run by Triton's interpreter on
the CPU: outputs and the gradients of q, k, v and the position embeddings equal the paper's
naive formula computed in float64, with and without the clamp, over several query and key
blocks, for queries that end with more keys; it keeps nothing of size (T, S) for its
backward; and a model with train.attention=flex takes it, with the default path's logits and
gradients. Without the interpreter on a CPU, CoPE has no such form. The compiled kernel on
CUDA: tests/gpu/test_cope_fused_cuda.py."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest
import torch

from tests.helpers.cope import SCALE, inputs, naive
from tests.helpers.fused import assert_same_results, through_each_kernel

pytest.importorskip("triton", reason="the fused kernel is written in Triton")
pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="with CUDA the compiled kernel is checked instead (tests/gpu/)",
)


@pytest.fixture
def interpreted() -> ModuleType:
    """The kernel module, imported only where Triton is."""
    return importlib.import_module("posenc_cli.encodings.contextual_fused")


@pytest.mark.parametrize(
    ("T", "S", "max_position"),
    [(40, 40, 6), (37, 37, 64), (13, 45, 10), (16, 16, 17), (1, 33, 4)],
    ids=["clamped", "unclamped", "fewer-queries", "one-block", "one-query"],
)
def test_fused_equals_the_naive_formula(
    interpreted: ModuleType, T: int, S: int, max_position: int
) -> None:
    """float32 through the kernel against float64 through the formula: outputs and every
    gradient to float32 precision (relative to each tensor's largest entry; the default
    path is within 3e-6 on these inputs)."""
    exact = inputs(T, S, max_position)
    single = [t.detach().float().requires_grad_() for t in exact]
    weights = torch.randn(2, 2, T, 4, generator=torch.Generator().manual_seed(5))
    expected = outputs_and_gradients(naive(*exact), exact, weights.double())
    fused = interpreted.fused_contextual_attention(*single, SCALE)
    got = outputs_and_gradients(fused, single, weights)
    for name, g, e in zip(["out", "q", "k", "v", "emb"], got, expected, strict=True):
        assert g.dtype == torch.float32
        err = (g.double() - e).abs().max() / e.abs().max().clamp(min=1.0)
        assert err < 1e-5, (name, float(err))


def outputs_and_gradients(
    out: torch.Tensor, tensors: list[torch.Tensor], weights: torch.Tensor
) -> list[torch.Tensor]:
    """The output and the gradients of (out · weights).sum() by every input."""
    return [out.detach(), *torch.autograd.grad((out * weights).sum(), tensors)]


def test_queries_in_chunks_under_the_table_budget_give_the_same_result(
    interpreted: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A budget of one query block's tables: 40 queries in three launches, each against the
    keys up to its last query, equal one launch (forward and gradients)."""
    tensors = [t.detach().float().requires_grad_() for t in inputs(40, 40, 6)]
    weights = torch.randn(2, 2, 40, 4, generator=torch.Generator().manual_seed(5))
    whole = outputs_and_gradients(
        interpreted.fused_contextual_attention(*tensors, SCALE), tensors, weights
    )
    monkeypatch.setattr(interpreted, "TABLE_BUDGET", 2 * 2 * 16 * 16 * 4)
    chunked = interpreted.fused_contextual_attention(*tensors, SCALE)
    assert chunked.grad_fn.name() == "CatBackward0"
    for a, b in zip(outputs_and_gradients(chunked, tensors, weights), whole, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fused_is_causal(interpreted: ModuleType) -> None:
    """Changing the last key and value changes no earlier query's output."""
    q, k, v, emb = (t.detach().float() for t in inputs(24, 24, 8))
    before = interpreted.fused_contextual_attention(q, k, v, emb, SCALE)
    k[..., -1, :], v[..., -1, :] = 5.0, -5.0
    after = interpreted.fused_contextual_attention(q, k, v, emb, SCALE)
    assert torch.equal(before[..., :-1, :], after[..., :-1, :])
    assert not torch.equal(before[..., -1, :], after[..., -1, :])


def test_fused_keeps_nothing_of_size_t_by_s(interpreted: ModuleType) -> None:
    """What the backward keeps: q, k, v, the (T, 2P) tables (P = 8, padded to 16 columns),
    the output, a log-sum-exp per row and a count per row and key block — no (T, S) block."""
    T = S = 96
    q, k, v, emb = inputs(T, S, 8)
    out = interpreted.fused_contextual_attention(
        *(t.detach().float().requires_grad_() for t in (q, k, v)), emb.detach().float(), SCALE
    )
    rows, blocks = 2 * 2 * T, -(-S // 16)  # (batch·head) rows; key tiles under the interpreter
    sizes = sorted(t.numel() for t in out.grad_fn.saved_tensors)
    assert sizes == sorted([rows * 4] * 4 + [rows * 16, rows, rows * blocks])


@pytest.mark.parametrize("windows", [[None, None], [6, None]], ids=["global", "one-windowed"])
def test_a_cope_model_takes_the_fused_kernel_under_flex(
    interpreted: ModuleType, make_model, tokens, monkeypatch: pytest.MonkeyPatch, windows
) -> None:
    """train.attention=flex: every global layer takes the kernel once per forward (a windowed
    one keeps its own path), and the logits and every gradient equal the default path's."""
    model = make_model("cope")
    model.windows = windows
    with torch.no_grad():  # CoPE's embeddings start at zero: give the positions a say
        for table in model.encoding.parameters():
            table.normal_(generator=torch.Generator().manual_seed(3))
    x = tokens(40)
    results = through_each_kernel(model, lambda m: m(x), monkeypatch)
    assert_same_results(results, windows.count(None))


def test_without_the_interpreter_a_cpu_has_no_fused_form(
    monkeypatch: pytest.MonkeyPatch, make_model
) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    model = make_model("cope")
    assert not model.encoding.fuses_attention(torch.device("cpu"))
    assert model.use_attention("flex") == "sdpa"


def test_log_n_scaling_keeps_the_default_path(make_model) -> None:
    """CoPE's bias and gates read the unscaled queries, which the kernel does not take."""
    model = make_model("cope")
    model.logn_length = 16
    assert model.use_attention("flex") == "sdpa"
