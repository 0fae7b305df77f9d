"""train.attention=flex computes what the default paths compute (model/flex.py).

Forward: torch's own FlexAttention, eager on CPU, against the default path, for every encoding
with a FlexAttention form, globally and in windowed and chunked layers, at the training
length and past it. Gradients: torch's FlexAttention has no backward on CPU, so the kernel is
replaced by a dense evaluation of the same score_mod and block mask (the semantics the fused
kernel implements; its own gradients are checked on CUDA, tests/gpu/); every trained
parameter's gradient, the distance tables and FoX's gates included, must equal the default
path's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from posenc_cli.engine.runtime import Runtime
from posenc_cli.engine.step import lm_loss
from posenc_cli.model import TransformerLM, flex
from posenc_cli.model.flex import has_flex_form

#: Layer layouts of the 2-layer test model: (windows, chunks).
LAYOUTS = {
    "global": (None, None),
    "window": ([6, 6], None),
    "chunk": (None, [8, 8]),
    "window and chunk": ([6, None], [8, 8]),
}


def laid_out(model: TransformerLM, layout: str) -> TransformerLM:
    windows, chunks = LAYOUTS[layout]
    model.windows = list(windows or [None, None])
    model.chunks = list(chunks or [None, None])
    return model


def dense_flex(
    q: Tensor, k: Tensor, v: Tensor, score_mod: Callable[..., Tensor], block_mask: Any, scale: float
) -> Tensor:
    """FlexAttention written out: every score through ``score_mod`` with broadcast indices,
    the block mask's own mask_mod, a softmax; differentiable on any device."""
    B, H, T, _ = q.shape
    b, h = torch.arange(B)[:, None, None, None], torch.arange(H)[None, :, None, None]
    q_idx = torch.arange(T)[None, None, :, None]
    kv_idx = torch.arange(k.shape[2])[None, None, None, :]
    scores = score_mod(torch.matmul(q, k.transpose(-1, -2)) * scale, b, h, q_idx, kv_idx)
    seen = block_mask.mask_mod(b, h, q_idx, kv_idx)
    return torch.softmax(scores.masked_fill(~seen, float("-inf")), dim=-1) @ v


def assert_same_gradients(model: TransformerLM, tokens: Callable[..., Tensor]) -> None:
    """Every trained parameter's gradient of one LM loss, through each kernel."""
    rt = Runtime(torch.device("cpu"), "fp32")
    x, y = tokens(24), tokens(24, seed=2)
    grads = {}
    for kernel in ("sdpa", "flex"):
        model.use_attention(kernel)
        model.zero_grad()
        lm_loss(model, x, y, rt).backward()
        grads[kernel] = {
            n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
        }
    assert grads["flex"].keys() == grads["sdpa"].keys()
    for key, expected in grads["sdpa"].items():
        assert torch.allclose(grads["flex"][key], expected, rtol=1e-4, atol=1e-6), key


@pytest.mark.encodings(select=lambda enc: has_flex_form(enc, local=True))
@pytest.mark.parametrize("length", [16, 32])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_flex_logits_equal_the_default_path(
    name: str, model: TransformerLM, tokens: Callable[..., Tensor], layout: str, length: int
) -> None:
    laid_out(model, layout).eval()
    ids = tokens(length)
    with torch.no_grad():
        default = model(ids)
        used = model.use_attention("flex")
        flexed = model(ids)
    local = layout != "global"
    assert used == ("flex" if has_flex_form(model.encoding, local) else "sdpa")
    assert torch.allclose(flexed, default, atol=2e-5, rtol=1e-5), (flexed - default).abs().max()
    if used == "sdpa":
        assert torch.equal(flexed, default)


@pytest.mark.encodings(select=lambda enc: has_flex_form(enc, local=True))
@pytest.mark.parametrize("layout", ["global", "window and chunk"])
def test_flex_gradients_equal_the_default_path(
    name: str,
    model: TransformerLM,
    tokens: Callable[..., Tensor],
    layout: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(flex, "_kernel", lambda device_type: dense_flex)
    laid_out(model, layout)
    assert_same_gradients(model, tokens)


@pytest.mark.encodings(select=lambda enc: not has_flex_form(enc, local=True))
def test_an_encoding_without_a_flex_form_keeps_the_default_path(
    name: str, model: TransformerLM, tokens: Callable[..., Tensor]
) -> None:
    laid_out(model, "window").eval()
    with torch.no_grad():
        default = model(tokens(16))
        assert model.use_attention("flex") == "sdpa"
        assert torch.equal(model(tokens(16)), default)  # the flex path would round otherwise


def test_the_block_mask_hides_what_the_context_masks_hide() -> None:
    """mask_mod against AttentionContext's own rule, entry by entry."""
    from posenc_cli.encodings import PositionalEncoding, Span
    from posenc_cli.model.context import AttentionContext

    T = 40
    q_idx, kv_idx = torch.arange(T)[:, None], torch.arange(T)[None, :]
    for window, chunk in [(None, None), (5, None), (None, 7), (5, 7), (1, None), (None, 1)]:
        ctx = AttentionContext(
            PositionalEncoding(8, 2, 4, 1),
            Span(0, T, torch.device("cpu")),
            window=window,
            chunk=chunk,
        )
        hidden = ctx.window_mask(0, T)
        expected = (kv_idx <= q_idx) if hidden is None else hidden == 0
        seen = flex.mask_mod(window, chunk)(None, None, q_idx, kv_idx)
        assert torch.equal(seen, expected), (window, chunk)


#: Encodings whose score_bias has a regime the default test lengths do not reach: FIRE's rows
#: past its threshold L (normalised by their own ψ(i)), DeBERTa's distances past max_relative;
#: Transformer-XL's table of every distance, for the query chunks.
PAST_THE_KNEE = [
    ("fire", {"threshold": 5.0}),
    ("deberta", {"max_relative": 3}),
    ("transformer_xl", {}),
]


@pytest.mark.parametrize(("name", "overrides"), PAST_THE_KNEE)
@pytest.mark.parametrize("budget", [None, 4 * 4 * 2 * 64])
@pytest.mark.parametrize("offset", [0, 9])
def test_score_biases_past_their_knee_and_over_query_chunks(
    make_model: Callable[..., TransformerLM],
    tokens: Callable[..., Tensor],
    name: str,
    overrides: dict[str, object],
    budget: int | None,
    offset: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Forward at 40 tokens from position 0 or 9, in one call and (a budget of a few rows)
    over query chunks of one size, each with its own block mask offset."""
    model = make_model(name, **overrides).eval()
    model.bias_budget_bytes = budget
    ids = tokens(40)
    eager, rows = flex._kernel("cpu"), []

    def recorded(*args: Any, **kwargs: Any) -> Tensor:
        rows.append(args[0].shape[2])
        return eager(*args, **kwargs)

    monkeypatch.setattr(flex, "_kernel", lambda device_type: recorded)
    with torch.no_grad():
        default = model(ids, pos_offset=offset)
        assert model.use_attention("flex") == "flex"
        flexed = model(ids, pos_offset=offset)
    layers = len(model.layers)
    assert sum(rows) == 40 * layers
    chunked = budget is not None and model.encoding.score_table_spans_keys
    assert (len(rows) > layers) == chunked
    assert len(set(rows[: len(rows) // layers - 1])) <= 1  # one size, but for the last
    assert torch.allclose(flexed, default, atol=2e-5, rtol=1e-5), (flexed - default).abs().max()


@pytest.mark.parametrize(("name", "overrides"), PAST_THE_KNEE)
def test_score_bias_gradients_past_their_knee(
    make_model: Callable[..., TransformerLM],
    tokens: Callable[..., Tensor],
    name: str,
    overrides: dict[str, object],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(flex, "_kernel", lambda device_type: dense_flex)
    assert_same_gradients(make_model(name, **overrides), tokens)
