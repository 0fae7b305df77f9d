"""Query chunks change the order of the work, not the result: in float64, a model whose bias
budget cuts every forward into chunks of a few query rows gives the logits and every
parameter's gradient of the same model in one chunk (training), and the same logits without
gradients (evaluation, where FIRE also runs block by block through the layers). This is what
bounds memory at 32k tokens (docs/performance.md). The one exception is by design: biases are
float32 (``distance_bias``, ``pair_bias``), so the gradients of the encoding's own parameters
are sums of float32 terms, and chunks change their order: those agree to float32 rounding."""

from __future__ import annotations

import pytest
import torch

from posenc_cli.encodings import Span
from posenc_cli.model.context import DEFAULT_BIAS_BUDGET, AttentionContext

T = 48


def run(model, ids: torch.Tensor, budget: int) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """Training logits, every parameter's gradient and the evaluation logits at ``budget``."""
    model.bias_budget_bytes = budget
    model.zero_grad(set_to_none=True)
    logits = model(ids)
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(5))
    (logits * weights.double()).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    with torch.no_grad():
        evaluation = model(ids)
    return logits.detach(), grads, evaluation


@pytest.mark.encodings(select=lambda enc: enc.has_bias)
def test_chunks_of_a_few_queries_equal_one_chunk_in_float64(
    name: str, make_model, randomise_zero_params, tokens
) -> None:
    model = make_model(name).double()
    randomise_zero_params(model)
    ids = tokens(T)
    chunked = AttentionContext(model.encoding, Span(0, T, torch.device("cpu")), 1, 2)
    assert len(chunked.chunks(4)) > 1  # under autograd: rows of MIN_CHUNK_ROWS
    whole, parts = run(model, ids, DEFAULT_BIAS_BUDGET), run(model, ids, 1)
    scale = whole[0].abs().max()
    assert (parts[0] - whole[0]).abs().max() <= 1e-12 * scale
    assert (parts[2] - whole[2]).abs().max() <= 1e-12 * scale
    assert (whole[2] - whole[0]).abs().max() <= 1e-6 * scale  # float32 biases in both
    assert parts[1].keys() == whole[1].keys() and len(whole[1]) > 0
    for n, g in whole[1].items():
        tolerance = 1e-6 if n.startswith("encoding.") else 1e-12
        assert (parts[1][n] - g).abs().max() <= tolerance * max(1.0, g.abs().max().item()), n
