"""torch.compile traces the model of every encoding without a bias in one graph, and the traced
model agrees with eager mode (the compiled `posenc train` runs are in tests/e2e/)."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.encodings(select=lambda enc: not enc.has_bias)
def test_traced_forward_and_gradients_match_eager_in_one_graph(
    name: str, make_model, tokens
) -> None:
    """Encodings without a bias never read a position value while tracing: one graph per
    forward. fullgraph=True fails on any graph break; the "eager" backend runs Dynamo's trace
    (and the encodings' compile-only code paths, e.g. RoPE's real-valued rotation) without the
    minutes of C++ compilation."""
    torch._dynamo.reset()
    model = make_model(name)
    x = tokens(24)
    eager = model(x)
    (eager.square().mean()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    traced = torch.compile(model, backend="eager", fullgraph=True)(x)
    (traced.square().mean()).backward()
    torch.testing.assert_close(traced, eager, rtol=1e-5, atol=1e-5)
    for n, p in model.named_parameters():
        if n in grads:
            torch.testing.assert_close(p.grad, grads[n], rtol=1e-4, atol=1e-6, msg=n)
