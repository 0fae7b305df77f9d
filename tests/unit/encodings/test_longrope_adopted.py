"""A model fine-tuned with LongRoPE (`posenc extend extend.method=longrope`) switches its factor
sets per forward as transformers does: the long set once max position + 1 > L, the short set
up to L, with the attention factor sqrt(1 + ln S / ln L) — the frequencies against
transformers' ``_compute_longrope_parameters`` and the cos/sin of its rotary embedding, the
logits against the parent evaluated with the set of each length, in eager mode and traced by
torch.compile in one graph; another scaling evaluated on top leaves the switch restored."""

from __future__ import annotations

import math

import pytest
import torch

from posenc_cli.config.compose import load
from posenc_cli.encodings.rope import RotaryEncoding
from posenc_cli.encodings.rope_scaling import RescaleSets
from posenc_cli.engine.build import build_model
from posenc_cli.model import TransformerLM

#: model=tiny: head_dim 16, 8 rotated pairs; trained at L = 16, fine-tuned at S·L = 64.
LONG = [1.0, 1.0, 1.2, 1.6, 2.3, 3.0, 3.6, 4.4]
SHORT = [1.0, 1.0, 1.0, 1.0, 1.1, 1.1, 1.2, 1.2]
L, S = 16, 4.0
LENGTHS = [1, 15, 16, 17, 64]
RECORDED = [
    "extend.method=longrope",
    "extend.parent=parent",
    "extend.parent_sha256=ab",
    f"extend.original_length={L}",
    f"extend.factor={S}",
    f"extend.long_factor={LONG}",
    f"extend.short_factor={SHORT}",
]


def models() -> tuple[TransformerLM, TransformerLM]:
    """(the fine-tuned child as its config rebuilds it, the parent with the same weights)."""
    torch.manual_seed(0)
    child = build_model(load(["model=tiny", "train.context_length=64", *RECORDED]), 64).eval()
    parent = build_model(load(["model=tiny", f"train.context_length={L}"]), 64).eval()
    parent.load_state_dict(child.state_dict())
    return child, parent


def encoding(model: TransformerLM) -> RotaryEncoding:
    enc = model.encoding
    assert isinstance(enc, RotaryEncoding)
    return enc


def hf_config(theta: float) -> object:
    """transformers' LlamaConfig of the tiny model with the child's LongRoPE."""
    hf = pytest.importorskip("transformers")
    params = {
        "rope_type": "longrope",
        "rope_theta": theta,
        "long_factor": LONG,
        "short_factor": SHORT,
        "original_max_position_embeddings": L,
    }
    return hf.LlamaConfig(
        hidden_size=32,
        num_attention_heads=2,
        head_dim=16,
        max_position_embeddings=int(S * L),
        rope_parameters=params,
    )


@pytest.mark.parametrize("length", LENGTHS)
def test_the_childs_frequencies_are_transformers_longrope_with_its_switch(length: int) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    enc = encoding(models()[0])
    config = hf_config(enc.theta)
    # the forward's switch: seq_len = max(position_ids) + 1 (longrope_frequency_update)
    want, attention = ROPE_INIT_FUNCTIONS["longrope"](config, "cpu", seq_len=length)
    got = enc.frequencies(torch.arange(length))
    torch.testing.assert_close(got.double(), want.double(), rtol=1e-6, atol=0)
    assert enc.attention_factor == pytest.approx(attention, rel=1e-6)
    assert attention == pytest.approx(math.sqrt(1 + math.log(S) / math.log(L)), rel=1e-12)


@pytest.mark.parametrize("length", [16, 17, 64])
def test_the_childs_rotation_is_llamas_rotary_embedding(length: int) -> None:
    """cos and sin (attention factor included) of a forward over 0 … length-1, against the
    ones transformers' LlamaRotaryEmbedding computes after its per-forward switch."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    enc = encoding(models()[0])
    rotary = LlamaRotaryEmbedding(hf_config(enc.theta))
    cos, sin = rotary(torch.zeros(1, length, 16), torch.arange(length)[None])
    phase = enc.phase(torch.arange(length))
    torch.testing.assert_close(phase.real, cos[0, :, :8], rtol=0, atol=1e-5)
    torch.testing.assert_close(phase.imag, sin[0, :, :8], rtol=0, atol=1e-5)


def test_the_set_follows_the_largest_position_not_the_count() -> None:
    """Randomized positions: 3 positions reaching 20 > L use the long set."""
    enc = encoding(models()[0])
    long, short = enc.long_inv_freq, enc.short_inv_freq
    torch.testing.assert_close(long.double(), enc.trained_inv_freq / torch.tensor(LONG).double())
    torch.testing.assert_close(short.double(), enc.trained_inv_freq / torch.tensor(SHORT).double())
    assert enc.frequencies(torch.tensor([0, 5, 20])) is long
    assert enc.frequencies(torch.tensor([3, 9, 15])) is short


@pytest.mark.parametrize("length", [16, 17])
def test_the_childs_logits_are_the_parents_with_each_lengths_set(length: int) -> None:
    child, parent = models()
    ids = torch.arange(length)[None] * 5 % 64
    encoding(parent).extend_context("longrope", S, L, LONG if length > L else SHORT)
    with torch.no_grad():
        torch.testing.assert_close(child(ids), parent(ids), rtol=0, atol=1e-6)


def test_another_scaling_on_top_then_none_restores_the_switch() -> None:
    enc = encoding(models()[0])
    enc.extend_context("pi", 2.0, L)
    assert enc.switch_length is None and enc.attention_factor == 1.0
    torch.testing.assert_close(
        enc.frequencies(torch.arange(64)), (enc.trained_inv_freq / 2).float()
    )
    enc.extend_context("none", 1.0, L)
    assert enc.switch_length == L and enc.attention_factor > 1.0
    assert enc.frequencies(torch.arange(17)) is enc.long_inv_freq
    assert enc.frequencies(torch.arange(16)) is enc.short_inv_freq


def test_only_longrope_is_adopted_with_sets() -> None:
    enc = encoding(models()[1])
    with pytest.raises(ValueError, match="only LongRoPE, is adopted with its two factor sets"):
        enc.adopt_extension("yarn", S, L, RescaleSets(LONG, SHORT))
    with pytest.raises(ValueError, match="only LongRoPE, is adopted with its two factor sets"):
        enc.adopt_extension("longrope", S, L)


@pytest.mark.parametrize("length", [16, 17])
def test_traced_in_one_graph_it_switches_as_in_eager_mode(length: int) -> None:
    """torch.compile (the "eager" backend runs Dynamo's trace without C++ compilation) with
    fullgraph=True: the switch reads no position value, and picks the same set."""
    torch._dynamo.reset()
    child, _ = models()
    ids = torch.arange(length)[None] * 3 % 64
    eager = child(ids)
    traced = torch.compile(child, backend="eager", fullgraph=True)(ids)
    torch.testing.assert_close(traced, eager, rtol=1e-5, atol=1e-5)
