"""Every encoding in configs/encoding/ obeys the same contract with the model.

Parametrised by globbing the YAML files (the ``encodings`` marker, tests/conftest.py), so a new
encoding is tested without editing this file.
"""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.encodings import Span
from posenc_cli.encodings.names import META_KEYS
from posenc_cli.model.context import AttentionContext

CPU = torch.device("cpu")


def test_yaml_files_are_complete(repo) -> None:
    paths = sorted((repo / "configs" / "encoding").glob("*.yaml"))
    assert paths
    for path in paths:
        cfg = OmegaConf.load(path)
        assert cfg.name == path.stem
        assert cfg.description and "\n" not in cfg.description
        assert cfg.paper and cfg._target_


def test_each_parameter_default_is_written_once_in_its_yaml(repo) -> None:
    """A parameter's default lives in configs/encoding/<name>.yaml only: the class takes every
    YAML parameter and has no default of its own to drift from it (CoPE's constructor once
    said 128 where its YAML says L + 1)."""
    for path in sorted((repo / "configs" / "encoding").glob("*.yaml")):
        cfg = OmegaConf.load(path)
        module, _, name = str(cfg._target_).rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        extra = list(inspect.signature(cls.__init__).parameters.values())[5:]  # after the dims
        assert [p.name for p in extra] == [k for k in cfg if k not in META_KEYS], path.name
        assert all(p.default is inspect.Parameter.empty for p in extra), path.name


@pytest.mark.encodings
def test_shapes_and_finite_loss_beyond_training_length(
    name: str, make_model, tokens, model_sizes
) -> None:
    model = make_model(name)
    train_len = model_sizes["train_len"]
    vocab = model_sizes["vocab"]
    for length in (train_len, 4 * train_len):
        ids = tokens(length)
        if name == "learned" and length > model_sizes["small_max_len"]:
            with pytest.raises(PosencError, match="max_len"):
                model(ids)
            continue
        logits = model(ids)
        assert logits.shape == (2, length, vocab)
        loss = F.cross_entropy(logits.flatten(0, 1), ids.flatten())
        assert torch.isfinite(loss)


def test_learned_table_is_usable_up_to_max_len_and_not_beyond(
    make_model, tokens, model_sizes
) -> None:
    small_max_len = model_sizes["small_max_len"]
    model = make_model("learned")
    assert model(tokens(small_max_len)).shape[1] == small_max_len
    with pytest.raises(PosencError):
        model(tokens(small_max_len - 4), pos_offset=5)
    with pytest.raises(PosencError):
        model.encoding.check_length(small_max_len + 1)


@pytest.mark.encodings
def test_causal(model, tokens, model_sizes) -> None:
    ids = tokens(model_sizes["train_len"])
    t = model_sizes["train_len"] // 2
    changed = ids.clone()
    changed[:, t + 1] = (changed[:, t + 1] + 1) % model_sizes["vocab"]
    a = model(ids)
    b = model(changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, t + 1], b[:, t + 1])


@pytest.mark.encodings
def test_shift_invariance_matches_relative_label(model, tokens, model_sizes) -> None:
    ids = tokens(model_sizes["train_len"])
    base = model(ids)
    shifted = model(ids, pos_offset=9)
    if model.encoding.relative:
        torch.testing.assert_close(base, shifted, rtol=1e-5, atol=1e-5)
    else:  # some shift must matter: a small one, or one past a threshold such as FIRE's L
        far = [model(ids, pos_offset=o) for o in (600, 5000) if model.encoding.max_len is None]
        assert max((base - s).abs().max() for s in [shifted, *far]) > 1e-3


@pytest.mark.encodings
def test_every_parameter_gets_a_gradient(model, tokens, model_sizes) -> None:
    ids = tokens(model_sizes["train_len"])
    F.cross_entropy(model(ids).flatten(0, 1), ids.flatten()).backward()
    for pname, p in model.encoding.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


@pytest.mark.encodings
def test_state_dict_round_trip(
    name: str, make_model, tokens, randomise_zero_params, model_sizes
) -> None:
    src = make_model(name, seed=0)
    dst = make_model(name, seed=1)
    randomise_zero_params(src)
    ids = tokens(model_sizes["train_len"])
    dst.load_state_dict(src.state_dict())
    torch.testing.assert_close(src(ids), dst(ids), rtol=0, atol=0)


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.encodings
def test_fused_attention_equals_reference(
    layer: int, model, reference_attention, reference_bias, model_sizes
) -> None:
    train_len = model_sizes["train_len"]
    d_model = model_sizes["d_model"]
    enc = model.encoding
    attn = model.layers[layer].attn
    x = torch.randn(2, train_len, d_model, generator=torch.Generator().manual_seed(5))
    pos = torch.arange(3, 3 + train_len)
    fused = attn(x, AttentionContext(enc, Span(3, train_len, CPU)))
    q = attn._heads(attn.q_proj(x))
    k = attn._heads(attn.k_proj(x))
    v = attn._heads(attn.v_proj(x))
    bias = None
    if enc.has_bias:
        bias = reference_bias(enc, q, k, pos, pos, layer, attn_input=x)
        assert bias.dim() == 4 and bias.dtype == torch.float32
        assert bias.shape[1:] == (attn.n_heads, train_len, train_len)
    q, k = enc.transform_qk(q, k, pos, pos, layer)
    y = reference_attention(q, k, v, enc.softmax_scale(attn.head_dim), bias, enc)
    reference = attn.output_proj(y.transpose(1, 2).reshape(2, train_len, d_model))
    torch.testing.assert_close(fused, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.encodings
def test_chunked_equals_unchunked(name: str, model, tokens, model_sizes) -> None:
    small_max_len = model_sizes["small_max_len"]
    ids = tokens(small_max_len + 8 if name != "learned" else small_max_len)
    whole = model(ids, pos_offset=0 if name == "learned" else 2)
    model.bias_budget_bytes = 1
    if model.encoding.has_bias:
        ctx = AttentionContext(model.encoding, Span(0, ids.shape[1], CPU), 1)
        assert len(ctx.chunks(4)) > 1
    chunked = model(ids, pos_offset=0 if name == "learned" else 2)
    torch.testing.assert_close(whole, chunked, rtol=1e-5, atol=1e-5)


@pytest.mark.encodings
def test_non_power_of_two_heads(name: str, make_model, tokens, model_sizes) -> None:
    model = make_model(name, n_heads=6, d_model=24)
    ids = tokens(model_sizes["train_len"])
    logits = model(ids)
    assert torch.isfinite(logits).all()
    if model.encoding.relative:
        torch.testing.assert_close(logits, model(ids, pos_offset=1), rtol=1e-5, atol=1e-5)
