"""Every encoding in configs/encoding/ obeys the same contract with the model.

Parametrised by globbing the YAML files, so a new encoding is tested without editing this file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from posenc_cli.errors import PosencError
from posenc_cli.model.attention import AttentionContext, reference_attention
from posenc_cli.model.transformer import TransformerLM, build_encoding

CONFIGS = sorted((Path(__file__).parents[1] / "configs" / "encoding").glob("*.yaml"))
NAMES = [p.stem for p in CONFIGS]
KNOWN = {"none", "rope", "learned", "sinusoidal", "sinusoidal_learned", "transformer_xl", "t5",
         "deberta", "alibi"}
EXPECTED_RELATIVE = {"none", "rope", "transformer_xl", "t5", "deberta", "alibi"}
VOCAB, D_MODEL, N_LAYERS = 50, 32, 2
TRAIN_LEN = 16
#: The learned table in these tests; 4x the training length must then be refused.
SMALL_MAX_LEN = 2 * TRAIN_LEN


def make_model(name: str, n_heads: int = 4, seed: int = 0, d_model: int = D_MODEL,
               **overrides: object) -> TransformerLM:
    """A tiny model with the named encoding, initialised from ``seed``."""
    cfg = OmegaConf.load(CONFIGS[NAMES.index(name)])
    if name == "learned":
        cfg.max_len = SMALL_MAX_LEN
    for key, value in overrides.items():
        cfg[key] = value
    torch.manual_seed(seed)
    enc = build_encoding(cfg, d_model, n_heads, N_LAYERS)
    return TransformerLM(VOCAB, d_model, N_LAYERS, n_heads, None, enc)


def tokens(length: int, batch: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def randomise_zero_params(model: TransformerLM) -> None:
    """Give zero-initialised parameters (e.g. Transformer-XL's u, v) values that matter."""
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.encoding.parameters():
            if not p.any():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)


def test_yaml_files_are_complete() -> None:
    assert KNOWN <= set(NAMES)
    for path in CONFIGS:
        cfg = OmegaConf.load(path)
        assert cfg.name == path.stem
        assert cfg.description and "\n" not in cfg.description
        assert cfg.paper and cfg._target_


def test_relative_labels() -> None:
    labelled = {n for n in KNOWN if type(make_model(n).encoding).relative}
    assert labelled == EXPECTED_RELATIVE


@pytest.mark.parametrize("name", NAMES)
def test_shapes_and_finite_loss_beyond_training_length(name: str) -> None:
    model = make_model(name)
    for length in (TRAIN_LEN, 4 * TRAIN_LEN):
        ids = tokens(length)
        if name == "learned" and length > SMALL_MAX_LEN:
            with pytest.raises(PosencError, match="max_len"):
                model(ids)
            continue
        logits = model(ids)
        assert logits.shape == (2, length, VOCAB)
        loss = F.cross_entropy(logits.flatten(0, 1), ids.flatten())
        assert torch.isfinite(loss)


def test_learned_table_is_usable_up_to_max_len_and_not_beyond() -> None:
    model = make_model("learned")
    assert model(tokens(SMALL_MAX_LEN)).shape[1] == SMALL_MAX_LEN
    with pytest.raises(PosencError):
        model(tokens(SMALL_MAX_LEN - 4), pos_offset=5)
    with pytest.raises(PosencError):
        model.encoding.check_length(SMALL_MAX_LEN + 1)


@pytest.mark.parametrize("name", NAMES)
def test_causal(name: str) -> None:
    model = make_model(name)
    randomise_zero_params(model)
    ids = tokens(TRAIN_LEN)
    t = TRAIN_LEN // 2
    changed = ids.clone()
    changed[:, t + 1] = (changed[:, t + 1] + 1) % VOCAB
    a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, t + 1], b[:, t + 1])


@pytest.mark.parametrize("name", NAMES)
def test_shift_invariance_matches_relative_label(name: str) -> None:
    model = make_model(name)
    randomise_zero_params(model)
    ids = tokens(TRAIN_LEN)
    base, shifted = model(ids), model(ids, pos_offset=9)
    if type(model.encoding).relative:
        torch.testing.assert_close(base, shifted, rtol=1e-5, atol=1e-5)
    else:
        assert (base - shifted).abs().max() > 1e-3


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_gets_a_gradient(name: str) -> None:
    model = make_model(name)
    randomise_zero_params(model)
    ids = tokens(TRAIN_LEN)
    F.cross_entropy(model(ids).flatten(0, 1), ids.flatten()).backward()
    for pname, p in model.encoding.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip(name: str) -> None:
    src, dst = make_model(name, seed=0), make_model(name, seed=1)
    randomise_zero_params(src)
    ids = tokens(TRAIN_LEN)
    dst.load_state_dict(src.state_dict())
    torch.testing.assert_close(src(ids), dst(ids), rtol=0, atol=0)


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize("name", NAMES)
def test_fused_attention_equals_reference(name: str, layer: int) -> None:
    model = make_model(name)
    randomise_zero_params(model)
    enc, attn = model.encoding, model.layers[layer].attn
    x = torch.randn(2, TRAIN_LEN, D_MODEL, generator=torch.Generator().manual_seed(5))
    pos = torch.arange(3, 3 + TRAIN_LEN)
    fused = attn(x, AttentionContext(enc, pos))
    q, k, v = attn._heads(attn.q_proj(x)), attn._heads(attn.k_proj(x)), attn._heads(attn.v_proj(x))
    bias = None
    if enc.has_bias:
        bias = (enc.score_bias(None, None, pos, pos, None) if enc.bias_is_positional
                else enc.score_bias(q, k, pos, pos, layer))
        assert bias.dim() == 4 and bias.dtype == torch.float32
        assert bias.shape[1:] == (attn.n_heads, TRAIN_LEN, TRAIN_LEN)
    q, k = enc.transform_qk(q, k, pos, pos, layer)
    y = reference_attention(q, k, v, enc.softmax_scale(attn.head_dim), bias)
    reference = attn.output_proj(y.transpose(1, 2).reshape(2, TRAIN_LEN, D_MODEL))
    torch.testing.assert_close(fused, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_chunked_equals_unchunked(name: str) -> None:
    model = make_model(name)
    randomise_zero_params(model)
    ids = tokens(SMALL_MAX_LEN + 8 if name != "learned" else SMALL_MAX_LEN)
    whole = model(ids, pos_offset=0 if name == "learned" else 2)
    model.bias_budget_bytes = 1
    if model.encoding.has_bias:
        ctx = AttentionContext(model.encoding, torch.arange(ids.shape[1]), 1)
        assert len(ctx.chunks(4)) > 1
    chunked = model(ids, pos_offset=0 if name == "learned" else 2)
    torch.testing.assert_close(whole, chunked, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_non_power_of_two_heads(name: str) -> None:
    model = make_model(name, n_heads=6, d_model=24)
    ids = tokens(TRAIN_LEN)
    logits = model(ids)
    assert torch.isfinite(logits).all()
    if type(model.encoding).relative:
        torch.testing.assert_close(logits, model(ids, pos_offset=1), rtol=1e-5, atol=1e-5)
