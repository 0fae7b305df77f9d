"""model.layers: the run's encoding in some layers and no position in the others (SmolLM3's and
Llama 4's layout, for any encoding that acts in attention). Checked layer by layer against the
definition (block l with the encoding, or with NoPE, built independently from none.yaml),
against `hybrid` (a separate implementation of the same layout for RoPE), for causality, and
through the config checks, inspect and the exports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from posenc_cli.common.errors import PosencError
from posenc_cli.common.layer_pattern import encoded_layers
from posenc_cli.config.compose import load
from posenc_cli.encodings import PositionalEncoding, Span, build_encoding
from posenc_cli.engine.build import build_model
from posenc_cli.inspection.attention_stats import collect
from posenc_cli.model.context import AttentionContext
from posenc_cli.model.transformer import TransformerLM

D, H, L, VOCAB = 32, 4, 3, 50
PATTERN = [True, False, True]  # [encoding, none] repeated over 3 layers


def _acts_in_attention(enc: PositionalEncoding) -> bool:
    return type(enc).embed is PositionalEncoding.embed and enc.config_name != "none"


def test_a_pattern_repeats_over_the_layers_as_smollm3s_interval() -> None:
    """transformers' SmolLM3: layer l has no RoPE where (l + 1) % 4 == 0."""
    flags = encoded_layers(["encoding", "encoding", "encoding", "none"], 10)
    assert flags == [(layer + 1) % 4 != 0 for layer in range(10)]
    assert encoded_layers(None, 3) == [True, True, True]


def _model(encoding_config: Callable[[str], Any], name: str, seed: int = 0) -> TransformerLM:
    torch.manual_seed(seed)
    enc = build_encoding(encoding_config(name), D, H, L)
    return TransformerLM(VOCAB, D, L, H, None, enc, encoded=PATTERN)


def _by_definition(model: TransformerLM, nope: PositionalEncoding, ids: Tensor) -> Tensor:
    """Block l with the model's encoding where PATTERN says so, else with ``nope``."""
    span = Span(0, ids.shape[1], ids.device)
    budget, B = model.bias_budget_bytes, ids.shape[0]
    with_encoding = AttentionContext(model.encoding, span, budget, B)
    without = AttentionContext(nope, span, budget, B)
    x = model.encoding.embed(model.token_embeddings(ids), with_encoding.pos_T)
    for block, encoded in zip(model.blocks, PATTERN, strict=True):
        x = block(x, with_encoding if encoded else without)
    return model.lm_head(model.ln_final(x))


@pytest.mark.encodings(select=_acts_in_attention)
def test_each_layer_is_the_encodings_or_nopes_with_and_without_gradients(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor], name: str
) -> None:
    """Training (autograd) and evaluation without gradients in small query chunks (where an
    all-encoded model would run blockwise with one shared bias) give the definition's logits."""
    model = _model(encoding_config, name)
    nope = build_encoding(encoding_config("none"), D, H, L)
    ids = tokens(40)
    assert torch.equal(model(ids), _by_definition(model, nope, ids))
    model.bias_budget_bytes = 4 * H * 16 * 40  # a few rows per chunk
    with torch.no_grad():
        assert torch.equal(model(ids), _by_definition(model, nope, ids))


def test_rope_with_nope_layers_is_the_hybrid_encoding(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor]
) -> None:
    """encoding=rope with model.layers=[encoding, none] computes what encoding=hybrid with
    pattern [rope, none] does, a separate implementation, on the same weights."""
    patterned = _model(encoding_config, "rope")
    hybrid_cfg = encoding_config("hybrid")
    hybrid_cfg.pattern = ["rope", "none"]
    hybrid = TransformerLM(VOCAB, D, L, H, None, build_encoding(hybrid_cfg, D, H, L))
    hybrid.load_state_dict(patterned.state_dict())
    ids = tokens(48)
    assert torch.equal(patterned(ids), hybrid(ids))


@pytest.mark.parametrize("name", ["alibi", "rope", "t5", "stick_breaking"])
def test_a_patterned_model_is_causal(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor], name: str
) -> None:
    model = _model(encoding_config, name)
    ids = tokens(32)
    changed = ids.clone()
    changed[:, 20:] = (changed[:, 20:] + 1) % VOCAB
    with torch.no_grad():
        assert torch.equal(model(ids)[:, :20], model(changed)[:, :20])


def test_the_nope_layers_carry_no_weights_of_their_own(
    encoding_config: Callable[[str], Any],
) -> None:
    """A checkpoint of a patterned model has the keys of the same model without a pattern."""
    torch.manual_seed(0)
    plain = TransformerLM(VOCAB, D, L, H, None, build_encoding(encoding_config("t5"), D, H, L))
    assert set(_model(encoding_config, "t5").state_dict()) == set(plain.state_dict())


def test_inspect_sees_a_zero_bias_in_the_nope_layers(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor]
) -> None:
    """ALiBi's bias is −m·d in its layers; the NoPE layer's bias is 0 at every distance."""
    model = _model(encoding_config, "alibi").eval()
    stats = collect(model, tokens(24), 16)
    assert stats.bias_by_distance is not None
    slopes = model.encoding.slopes.double()  # (H,)
    distance = torch.arange(24, dtype=torch.float64)
    expected = (-slopes[:, None] * distance[None, :]).numpy()
    assert stats.bias_by_distance[0] == pytest.approx(expected, abs=1e-5)
    assert (stats.bias_by_distance[1] == 0).all()


SMALL = ["model=tiny", "model.n_layers=4", "train.context_length=16"]


def test_the_config_builds_the_pattern_and_saves_it() -> None:
    cfg = load([*SMALL, "encoding=alibi", "model.layers=[encoding,encoding,none]"])
    assert cfg.model.layers == ["encoding", "encoding", "none"]
    assert build_model(cfg, VOCAB).encoded == [True, True, False, True]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.layers=[alibii,none]"], r"names 'alibii', which is not .* \(did you mean"),
        (["model.layers=[]"], r"model\.layers=\[\] is not a pattern"),
        (["encoding=learned", "model.layers=[encoding,none]"], "acts once, at the input"),
        (["encoding=none", "model.layers=[encoding,none]"], "is NoPE already"),
        (
            ["model.layers=[encoding,encoding,encoding,encoding,none]"],
            r"every one of the 4 layers 'encoding' — use model\.n_layers=5 or more",
        ),
        (["model.layers=[none]"], r"gives none of the 4 layers the run's encoding \(rope\)"),
    ],
)
def test_a_pattern_that_cannot_mean_what_it_says_is_refused(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(PosencError, match=message):
        load([*SMALL, *overrides])
