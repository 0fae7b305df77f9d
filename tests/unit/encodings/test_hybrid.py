"""Hybrid RoPE/NoPE layers (SmolLM3, Llama 4's layout) and RNoPE-SWA's sliding windows (Cohere
2025) against their definitions: which layers rotate, what a windowed layer sees, in float64,
inside and beyond the training length; rescaling touches only the RoPE layers."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.config.encoding_checks import check_encoding
from posenc_cli.config.run_config import typed
from posenc_cli.encodings import Span, build_encoding
from posenc_cli.encodings.hybrid import HybridEncoding
from posenc_cli.model.context import AttentionContext
from posenc_cli.workflows.jobs import run_training
from tests.helpers.configs import FOUR_STEPS

CPU = torch.device("cpu")


def test_the_pattern_repeats_as_smollm3_places_its_nope_layers() -> None:
    """transformers' SmolLM3: layer l rotates unless (l + 1) % no_rope_layer_interval == 0."""
    enc = HybridEncoding(64, 4, 16, 10, 10000.0, 1.0, 1.0, "hf", ["rope", "rope", "rope", "none"])
    assert enc.rope_layers == {layer for layer in range(10) if (layer + 1) % 4 != 0}


def _rotate(x: torch.Tensor, pos: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """RoPE's rotation of interleaved pairs by pos·θ_k, θ_k = theta^(-2k/E), written out."""
    E = x.shape[-1]
    angle = pos[:, None].double() * theta ** (-torch.arange(0, E, 2).double() / E)[None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * angle.cos() - x1 * angle.sin()
    out[..., 1::2] = x0 * angle.sin() + x1 * angle.cos()
    return out


def _reference_layer(attn, x, pos, rotate: bool, window: int | None) -> torch.Tensor:
    q, k, v = (attn._heads(p(x)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    if rotate:
        q, k = _rotate(q, pos), _rotate(k, pos)
    distance = pos[:, None] - pos[None, :]
    hidden = (distance < 0) | (window is not None and rotate) & (distance >= (window or 0))
    logits = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    y = torch.softmax(logits.masked_fill(hidden, -math.inf), -1) @ v
    return attn.output_proj(y.transpose(1, 2).flatten(2))


@pytest.mark.parametrize(("length", "offset"), [(16, 0), (64, 50)])
@pytest.mark.parametrize("name", ["hybrid", "rnope_swa"])
def test_each_layer_and_its_gradients_equal_the_definition(
    make_model, name: str, length: int, offset: int
) -> None:
    extra = {"window": 5} if name == "rnope_swa" else {}
    model = make_model(name, pattern=["rope", "none"], **extra).double()
    x = torch.randn(2, length, 32, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    x.requires_grad_(True)
    pos = torch.arange(offset, offset + length)
    for layer, rotate in ((0, True), (1, False)):
        attn = model.layers[layer].attn
        fast = attn(x, AttentionContext(model.encoding, Span(offset, length, CPU), batch=2))
        slow = _reference_layer(attn, x, pos, rotate, extra.get("window"))
        tol = 1e-6 if rotate else 1e-11  # RoPE rotates in float32 (complex64), as `rope` does
        torch.testing.assert_close(fast, slow, rtol=tol, atol=tol)
        grad = torch.randn_like(fast)
        inputs = (x, attn.q_proj.weight, attn.k_proj.weight)
        for a, b in zip(
            torch.autograd.grad(fast, inputs, grad),
            torch.autograd.grad(slow, inputs, grad),
            strict=True,
        ):
            torch.testing.assert_close(a, b, rtol=10 * tol, atol=10 * tol)


def test_a_window_hides_far_keys_only_in_rope_layers(make_model, tokens) -> None:
    model = make_model("rnope_swa", pattern=["rope", "none"], window=4)
    ids = tokens(30)
    changed = ids.clone()
    changed[:, 3] = (changed[:, 3] + 1) % 50
    x, y = (model.token_embeddings(t) for t in (ids, changed))
    ctx = AttentionContext(model.encoding, Span(0, 30, CPU), batch=2)
    with torch.no_grad():
        near, far = (model.layers[0].attn(h, ctx) for h in (x, y))
        assert torch.equal(near[:, 7:], far[:, 7:])  # 7 - 3 = 4: outside every window
        assert not torch.allclose(near[:, 6], far[:, 6])
        glob, glob_changed = (model.layers[1].attn(h, ctx) for h in (x, y))
        assert not torch.allclose(glob[:, 29], glob_changed[:, 29])


def test_context_extension_rescales_only_the_rope_layers(make_model) -> None:
    model = make_model("hybrid", pattern=["rope", "none"])
    x = torch.randn(1, 40, 32, generator=torch.Generator().manual_seed(0))
    ctx = AttentionContext(model.encoding, Span(0, 40, CPU))
    with torch.no_grad():
        before = [model.layers[i].attn(x, ctx) for i in (0, 1)]
        model.encoding.extend_context("pi", 4.0, 16)
        ctx = AttentionContext(model.encoding, Span(0, 40, CPU))
        after = [model.layers[i].attn(x, ctx) for i in (0, 1)]
    assert not torch.allclose(before[0], after[0])
    assert torch.equal(before[1], after[1])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            {"pattern": ["rope", "nope"]},
            r"^encoding\.pattern=\[rope,nope\] is not a non-empty list",
        ),
        ({"pattern": []}, r"^encoding\.pattern=\[\] is not a non-empty list"),
        ({"window": 0}, r"^encoding\.window=0 is not"),
    ],
)
def test_bad_patterns_and_windows_are_refused(repo, override: dict, message: str) -> None:
    cfg = OmegaConf.load(repo / "configs" / "encoding" / "rnope_swa.yaml")
    for key, value in override.items():
        cfg[key] = value
    with pytest.raises(PosencError, match=message):
        build_encoding(cfg, 32, 4, 2)


def test_irope_scales_the_nope_layers_queries_by_llama4s_temperature(make_model) -> None:
    """transformers' Llama4TextAttention: q · (log1p(floor((i + 1) / F)) · s + 1) in the NoPE
    layers only, written out here with F = 8 and s = 0.1 at positions 0 … 39."""
    model = make_model("irope", pattern=["rope", "none"], floor_scale=8).double()
    enc = model.encoding
    x = torch.randn(2, 40, 32, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    scale = torch.tensor(
        [1 + 0.1 * math.log(1 + (i + 1) // 8) for i in range(40)], dtype=torch.float64
    )
    ctx = AttentionContext(enc, Span(0, 40, CPU), batch=2)
    attn = model.layers[1].attn
    q, k, v = (attn._heads(p(x)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    q = q * scale[:, None]
    y = (
        torch.softmax(
            ((q @ k.transpose(-1, -2)) / math.sqrt(8)).masked_fill(
                torch.ones(40, 40, dtype=torch.bool).triu(1), -math.inf
            ),
            -1,
        )
        @ v
    )
    want = attn.output_proj(y.transpose(1, 2).flatten(2))
    torch.testing.assert_close(attn(x, ctx), want, rtol=1e-11, atol=1e-12)
    rope = make_model("hybrid", pattern=["rope", "none"]).double()
    rope.load_state_dict(model.state_dict())
    torch.testing.assert_close(  # the RoPE layer is hybrid's, untouched
        model.layers[0].attn(x, ctx), rope.layers[0].attn(x, ctx), rtol=0, atol=0
    )
    assert not enc.relative and make_model("irope").encoding.relative  # 2 layers: no NoPE one


def test_irope_equals_hybrid_inside_its_floor(make_model, tokens) -> None:
    tempered = make_model("irope", pattern=["rope", "none"], floor_scale=64)
    plain = make_model("hybrid", pattern=["rope", "none"])
    plain.load_state_dict(tempered.state_dict())
    ids = tokens(63)
    with torch.no_grad():
        torch.testing.assert_close(tempered(ids), plain(ids), rtol=0, atol=0)
        assert not torch.allclose(tempered(tokens(80))[:, 63:], plain(tokens(80))[:, 63:])


def test_a_window_that_hides_nothing_is_refused_before_anything_is_built() -> None:
    """At length 64 evaluated only at 1x, a 64-token window sees every key: one line (from
    composing, whose rules read the shorthand eval.factors as the section it sets)."""
    with pytest.raises(PosencError, match=r"^encoding\.window=64 hides no key .* longest is 64"):
        check_encoding(
            compose(["encoding=rnope_swa", "train.context_length=64", "eval.factors=[1]"])
        )
    check_encoding(compose(["encoding=rnope_swa", "train.context_length=64", "eval.factors=[1,2]"]))


@pytest.mark.parametrize(
    ("n_layers", "pattern", "expected"),
    [
        (4, ["rope", "rope", "rope", "none"], None),
        (2, ["rope", "rope", "rope", "none"], "every layer is 'rope'"),
        (3, ["rope", "rope", "rope", "none"], "model.n_layers=4 or more"),
        (2, ["none", "none", "rope"], "every layer is 'none'"),
        (5, ["rope"], "add 'none' to encoding.pattern"),
    ],
)
def test_a_pattern_the_model_is_too_shallow_to_mix_is_named(
    n_layers: int, pattern: list[str], expected: str | None
) -> None:
    """2 layers of [rope, rope, rope, none] never reach the NoPE layer: the run is RoPE, and a
    study that reads it as a hybrid is misled, so the run says so when it starts."""
    enc = HybridEncoding(64, 4, 16, n_layers, 10000.0, 1.0, 1.0, "hf", pattern)
    caveats = enc.caveats()
    if expected is None:
        assert caveats == []
    else:
        assert len(caveats) == 1 and expected in caveats[0] and "not a hybrid" in caveats[0]


@pytest.mark.encodings
def test_no_encoding_has_a_caveat_at_four_layers(encoding_config, name: str) -> None:
    """Four layers reach every preset's NoPE layer, and no other encoding has caveats."""
    enc = build_encoding(encoding_config(name), 32, 4, 4)
    assert enc.caveats() == []


def test_a_run_too_shallow_for_its_pattern_warns_when_it_starts(tmp_path, corpus, capsys) -> None:
    """`posenc train encoding=hybrid model=tiny` (2 layers) trains RoPE: the run says so."""
    cfg = compose(["encoding=hybrid", *FOUR_STEPS, f"data.path={corpus}", "eval.at_end=false"])
    run_training(typed(cfg), tmp_path)
    out = capsys.readouterr().out
    assert "warning: encoding=hybrid with model.n_layers=2: every layer is 'rope'" in out
