"""CoPE's attention in one node (encodings/contextual.py ``ContextualAttention``, the training path)
equals, in float64, ``ContextualBias`` followed by the explicit softmax attention (the path
evaluation takes) and an independent naive formula, in outputs and in the gradients of q, k,
v and the position embeddings; it is causal; and a model takes it under autograd only, with
the same loss either way."""

from __future__ import annotations

import pytest
import torch

from posenc_cli.encodings import contextual
from posenc_cli.encodings.contextual import ContextualAttention
from posenc_cli.model.attention import BiasedAttention
from tests.helpers.cope import SCALE, inputs, naive


def composed(q, k, v, emb):
    """The bias node, then the explicit softmax attention (BiasedAttention)."""
    bias = contextual.ContextualBias.apply(q, k, emb, SCALE)
    return BiasedAttention.apply(q, k, v, bias, SCALE)


def outputs_and_gradients(fn, tensors):
    out = fn(*tensors)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=out.dtype)
    return [out.detach(), *torch.autograd.grad((out * weights).sum(), tensors)]


@pytest.mark.parametrize(
    ("key_block", "max_position"), [(512, 5), (4, 5), (512, 25), (4, 25), (4, 40), (512, 90)]
)
@pytest.mark.parametrize("T", [24, 4])
@pytest.mark.parametrize("reference", [composed, naive])
def test_contextual_attention_equals_the_references_in_float64(
    T: int, reference, key_block: int, max_position: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queries [24 - T, 24) against 24 keys; max_position 5: positions pass the clamp (with
    blocks of 4 the far keys are filled as clamped); 25: no position can reach it; 40 and 90:
    the tables stop at the largest position reached, short of max_position (90: short of
    half of it)."""
    monkeypatch.setattr(contextual, "KEY_BLOCK", key_block)
    tensors = inputs(T, 24, max_position)
    got = outputs_and_gradients(lambda *t: ContextualAttention.apply(*t, SCALE), tensors)
    want = outputs_and_gradients(reference, tensors)
    for name, a, b in zip(("out", "q", "k", "v", "emb"), got, want, strict=True):
        assert (a - b).abs().max() <= 1e-10, name


def test_contextual_attention_is_causal() -> None:
    """Changing the keys and values from position 10 on leaves outputs before 10 unchanged."""
    q, k, v, emb = (t.detach() for t in inputs(24, 24, 5))
    before = ContextualAttention.apply(q, k, v, emb, SCALE)
    k2, v2 = k.clone(), v.clone()
    k2[..., 10:, :] += 3.0
    v2[..., 10:, :] -= 1.0
    after = ContextualAttention.apply(q, k2, v2, emb, SCALE)
    assert torch.equal(before[..., :10, :], after[..., :10, :])
    assert not torch.allclose(before[..., 10:, :], after[..., 10:, :])


def test_a_model_takes_it_under_autograd_only_with_the_same_logits(
    make_model, randomise_zero_params, tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same tiny CoPE model: logits under autograd (one node per layer) equal the logits
    without (the bias through the fused kernel) to float32 rounding."""
    model = make_model("cope").eval()
    randomise_zero_params(model)
    calls: list[int] = []
    apply = ContextualAttention.apply
    monkeypatch.setattr(ContextualAttention, "apply", lambda *a: calls.append(1) or apply(*a))
    x = tokens(40)
    trained = model(x)
    assert len(calls) == len(model.layers)
    with torch.no_grad():
        evaluated = model(x)
    assert len(calls) == len(model.layers)
    assert (trained.detach() - evaluated).abs().max() <= 1e-5 * evaluated.abs().max()
