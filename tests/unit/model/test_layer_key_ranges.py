"""A windowed or chunked layer attends, per query chunk, only to the keys from the first its
window or chunk lets any of those queries see (AttentionContext.first_key): the Toeplitz and
shared-bias paths, stick-breaking, FoX and every content bias that reads nothing before a key
(``bias_from_any_key``). Cutting the keys must change nothing: checked for every encoding with
its YAML's parameters (PaTH's short convolution included) against the same layer attending to
every earlier key, masked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from posenc_cli.encodings import build_encoding
from posenc_cli.model.context import AttentionContext
from posenc_cli.model.transformer import TransformerLM

D, H, VOCAB, T = 32, 4, 50, 32  # T: the learned table's length in the tests


@pytest.mark.encodings
@pytest.mark.parametrize(("window", "chunk"), [(4, None), (None, 8), (6, 8)])
def test_cutting_the_keys_a_query_chunk_cannot_see_changes_nothing(
    encoding_config: Callable[[str], Any],
    tokens: Callable[..., Tensor],
    name: str,
    window: int | None,
    chunk: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch.manual_seed(0)
    enc = build_encoding(encoding_config(name), D, H, 2)
    model = TransformerLM(
        VOCAB, D, 2, H, None, enc, windows=[window, None], chunks=[chunk, None]
    ).double()
    model.bias_budget_bytes = 4 * H * 8 * T  # query chunks of a few rows: most start past 0
    ids = tokens(T)
    cut = model(ids)
    with torch.no_grad():
        cut_blockwise = model(ids)
    monkeypatch.setattr(AttentionContext, "first_key", lambda self, start: 0)
    every = model(ids).detach()
    torch.testing.assert_close(cut.detach(), every, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(cut_blockwise, every, rtol=1e-10, atol=1e-10)
