"""PaTH (Yang et al. 2025) against its definition, written the slow way in float64: explicit
E x E matrices H_t = I - β_t w_t w_tᵀ multiplied pair by pair, the logit q_iᵀ H_i ⋯ H_{j+1} k_j,
the softmax and the layer around it; values and gradients inside the training length and 4x
beyond it, in query chunks and across many blocks. Then what the paper's transforms are (and
are not): symmetric, eigenvalues 1 and 1 - β, orthogonal only at β = 2 (β lies in (0, 2), so in
general they contract, never rotate), the identity at w = 0 or β = 0, where PaTH is `none`."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.config.encoding_checks import check_encoding
from posenc_cli.encodings import BiasSite, ForwardCache, Span, build_encoding
from posenc_cli.encodings.householder import key_blocks, path_attention, path_scores
from posenc_cli.model.context import AttentionContext

CPU = torch.device("cpu")
F64 = torch.float64


def transforms(proj, x: torch.Tensor, n_heads: int) -> tuple[torch.Tensor, ...]:
    """Explicit (B, H, T, E, E) matrices H_t and the per-position log forget gate (or None) of
    one layer's parameters: low rank, a causal window of the convolution, SiLU, w/‖w‖."""
    u = x if proj.down is None else x @ proj.down.weight.T
    u = u @ proj.up.weight.T
    if proj.conv is not None:
        taps = proj.conv.weight[:, 0, :]
        window = F.pad(u, (0, 0, taps.shape[1] - 1, 0)).unfold(1, taps.shape[1], 1)
        u = (window * taps).sum(-1)
        u = u * torch.sigmoid(u)
    B, T, _ = u.shape
    w = u.view(B, T, n_heads, -1).transpose(1, 2)
    w = w / w.norm(dim=-1, keepdim=True)
    beta = 2 * torch.sigmoid(x @ proj.beta.weight.T + proj.beta.bias).transpose(1, 2)
    eye = torch.eye(w.shape[-1], dtype=x.dtype)
    h = eye - beta[..., None, None] * (w[..., :, None] * w[..., None, :])
    gate = None if proj.gate is None else F.logsigmoid(x @ proj.gate.weight.T + proj.gate.bias)
    return h, beta, None if gate is None else gate.transpose(1, 2)


def naive_logits(q, k, h, gate=None) -> torch.Tensor:
    """(B, H, T, T): q_iᵀ (H_i ⋯ H_{j+1}) k_j, each pair's product of matrices built up from
    the identity, plus Σ_{l=j+1..i} log f_l with the gate; 0 where j > i."""
    B, H, T, E = q.shape
    columns = []
    for j in range(T):
        product = torch.eye(E, dtype=q.dtype).expand(B, H, E, E)
        column = [torch.zeros(B, H, dtype=q.dtype)] * j
        for i in range(j, T):
            if i > j:
                product = h[:, :, i] @ product
            value = (q[:, :, i, None, :] @ product @ k[:, :, j, :, None])[..., 0, 0]
            column.append(value if gate is None else value + gate[:, :, j + 1 : i + 1].sum(-1))
        columns.append(torch.stack(column, dim=-1))
    return torch.stack(columns, dim=-1)


def naive_layer(model, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention layer's output and its PaTH logits from the definition."""
    attn, enc = model.layers[layer].attn, model.encoding
    q, k, v = (attn._heads(p(x)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    h, _, gate = transforms(enc.transforms[layer], x, enc.n_heads)
    logits = naive_logits(q, k, h, gate)
    T = x.shape[1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    scaled = (logits / math.sqrt(q.shape[-1])).masked_fill(future, -math.inf)
    y = torch.softmax(scaled, dim=-1) @ v
    return attn.output_proj(y.transpose(1, 2).flatten(2)), logits


def spread_betas(model, seed: int = 4) -> None:
    """β = 2σ(·) from weights of unit size, so β covers (0, 2) rather than staying near 1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for proj in model.encoding.transforms:
            for lin in (proj.beta, proj.gate):
                if lin is not None:
                    lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen))
                    lin.bias.copy_(torch.randn(lin.bias.shape, generator=gen))


@pytest.mark.parametrize(
    ("length", "offset", "budget", "gated"),
    [(16, 0, None, False), (64, 5, 1, False), (64, 5, 1, True)],
)
def test_a_layer_and_its_gradients_equal_the_definition_in_float64(
    make_model, length: int, offset: int, budget: int | None, gated: bool
) -> None:
    """Inside the training length (16) in one chunk, and 4x beyond it shifted by 5, in chunks
    of 16 queries and blocks of 8 keys: output, input gradient (through q, k, v, w and β) and
    every parameter's gradient agree with the explicit products to 1e-10."""
    model = make_model("path", forget_gate=gated).double()
    spread_betas(model)
    model.encoding.block = 8
    x = torch.randn(2, length, 32, dtype=F64, generator=torch.Generator().manual_seed(7))
    x.requires_grad_()
    weights = torch.randn(2, length, 32, dtype=F64, generator=torch.Generator().manual_seed(8))
    ctx = AttentionContext(model.encoding, Span(offset, length, CPU), budget, 2)
    assert len(ctx.chunks(4)) == (1 if budget is None else length // 16)
    results = []
    for run in (lambda: model.layers[1].attn(x, ctx), lambda: naive_layer(model, 1, x)[0]):
        model.zero_grad(set_to_none=True)
        x.grad = None
        out = run()
        (out * weights).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((out.detach(), x.grad.clone(), grads))
    (fast, fast_x, fast_p), (slow, slow_x, slow_p) = results
    assert fast_p.keys() == slow_p.keys() and any(n.startswith("encoding.") for n in slow_p)
    torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-10)
    with torch.no_grad():  # evaluation: the flash kernel per key block (the gate: the softmax)
        torch.testing.assert_close(model.layers[1].attn(x, ctx), slow, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(fast_x, slow_x, rtol=1e-10, atol=1e-10)
    for n in slow_p:
        torch.testing.assert_close(fast_p[n], slow_p[n], rtol=1e-10, atol=1e-10, msg=n)


def test_the_bias_plus_scaled_q_k_is_the_scaled_path_logit(make_model) -> None:
    """What `posenc inspect` and log-n scaling read: scale·q·k + content_bias."""
    model = make_model("path", forget_gate=True).double()
    spread_betas(model)
    model.encoding.block = 4
    enc, attn, T = model.encoding, model.layers[0].attn, 24
    x = torch.randn(1, T, 32, dtype=F64, generator=torch.Generator().manual_seed(2))
    q, k = (attn._heads(p(x)) for p in (attn.q_proj, attn.k_proj))
    span = Span(0, T, CPU)
    for s in (0, 5, 16):
        site = BiasSite(span.part(s, T), span, 0, ForwardCache(span), x)
        bias = enc.content_bias(q[:, :, s:], k, site)
        scale = 1 / math.sqrt(enc.head_dim)
        got = (bias + scale * q[:, :, s:] @ k.mT).nan_to_num(neginf=0.0)
        want = scale * naive_layer(model, 0, x)[1][:, :, s:]
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        assert torch.isinf(bias[..., -1, :]).sum() == 0 and torch.isinf(bias).sum() > 0


@pytest.mark.parametrize("size", [1, 3, 8, 64])
def test_blockwise_products_equal_explicit_ones_for_any_block_and_chunk(size: int) -> None:
    """The logits, and without gradients the attention that never forms them."""
    gen = torch.Generator().manual_seed(size)
    B, H, S, E = 2, 2, 21, 5
    q, k, w, v = (torch.randn(B, H, S, E, dtype=F64, generator=gen) for _ in range(4))
    w = w / w.norm(dim=-1, keepdim=True)
    beta = 2 * torch.rand(B, H, S, dtype=F64, generator=gen)
    h = torch.eye(E, dtype=F64) - beta[..., None, None] * w[..., :, None] * w[..., None, :]
    want = naive_logits(q, k, h)
    whole = key_blocks(k, w, beta, size)
    for start, end in [(0, S), (4, S), (7, 13), (12, 13)]:
        part = key_blocks(k[:, :, :end], w[:, :, :end], beta[:, :, :end], size)
        for blocks in (whole, part):  # longer blocks serve shorter chunks
            got = path_scores(q[:, :, start:end], blocks, start, end)
            assert got.shape[-1] == -(-end // size) * size and torch.isinf(got[..., end:]).all()
            weights = torch.softmax(got, dim=-1)[..., :end]
            got = got[..., :end].nan_to_num(neginf=0.0)  # the mask folded in: -inf for j > i
            torch.testing.assert_close(got, want[:, :, start:end, :end], rtol=0, atol=1e-12)
            with torch.no_grad():
                attended = path_attention(q[:, :, start:end], v[:, :, :end], blocks, start)
            torch.testing.assert_close(attended, weights @ v[:, :, :end], rtol=0, atol=1e-12)


def test_causality_is_exact(make_model, tokens) -> None:
    """Changing token 30 leaves every earlier output bit for bit (chunks and blocks of 4)."""
    model = make_model("path")
    model.encoding.block = 4
    model.bias_budget_bytes = 1
    ids = tokens(48)
    changed = ids.clone()
    changed[:, 30] = (changed[:, 30] + 1) % 50
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            a, b = model(ids), model(changed)
        assert torch.equal(a[:, :30], b[:, :30])
        assert not torch.allclose(a[:, 30:], b[:, 30:])


def test_each_transform_is_symmetric_with_eigenvalues_one_and_one_minus_beta(make_model) -> None:
    """Not orthogonal in general: HᵀH - I = -β(2 - β) w wᵀ, of norm β(2 - β) > 0 for β in
    (0, 2); every product of transforms has singular values <= 1 (it never grows a vector)."""
    model = make_model("path").double()
    spread_betas(model)
    proj, E = model.encoding.transforms[0], model.encoding.head_dim
    x = torch.randn(2, 12, 32, dtype=F64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        h, beta, _ = transforms(proj, x, model.encoding.n_heads)
    assert torch.equal(h, h.mT)
    assert ((beta > 0) & (beta < 2)).all() and beta.min() < 0.5 and beta.max() > 1.5
    ones = torch.ones(*beta.shape, E - 1, dtype=F64)
    want = torch.cat([ones, (1 - beta)[..., None]], dim=-1).sort(dim=-1).values
    torch.testing.assert_close(torch.linalg.eigvalsh(h), want, rtol=0, atol=1e-12)
    gap = torch.linalg.matrix_norm(h.mT @ h - torch.eye(E, dtype=F64), ord=2)
    torch.testing.assert_close(gap, beta * (2 - beta), rtol=0, atol=1e-12)
    product = torch.eye(E, dtype=F64)
    for t in range(h.shape[2]):
        product = h[:, :, t] @ product
    assert torch.linalg.svdvals(product).max() <= 1 + 1e-12


@pytest.mark.parametrize(("bias", "beta", "det"), [(50.0, 2.0, -1.0), (-800.0, 0.0, 1.0)])
def test_a_transform_is_orthogonal_where_beta_is_two_or_zero(
    make_model, bias: float, beta: float, det: float
) -> None:
    """β = 2: a true Householder reflection (det -1); β = 0: the identity."""
    model = make_model("path").double()
    proj = model.encoding.transforms[0]
    with torch.no_grad():
        proj.beta.bias.fill_(bias)
    x = torch.randn(1, 6, 32, dtype=F64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        h, betas, _ = transforms(proj, x, model.encoding.n_heads)
    assert (betas == beta).all()
    eye = torch.eye(model.encoding.head_dim, dtype=F64)
    torch.testing.assert_close(h.mT @ h, eye.expand_as(h), rtol=0, atol=1e-14)
    torch.testing.assert_close(torch.linalg.det(h), torch.full(h.shape[:3], det, dtype=F64))


@pytest.mark.parametrize("removed", ["vectors", "beta"])
def test_without_transforms_path_is_none(make_model, tokens, removed: str) -> None:
    """w = 0 (the projection zeroed) or β = 0 (σ underflows): every H_t = I."""
    none, path = make_model("none").double(), make_model("path").double()
    missing, unexpected = path.load_state_dict(none.state_dict(), strict=False)
    assert not unexpected and all(n.startswith("encoding.") for n in missing)
    path.encoding.block = 8
    with torch.no_grad():
        for proj in path.encoding.transforms:
            if removed == "vectors":
                proj.up.weight.zero_()
            else:
                proj.beta.bias.fill_(-800.0)
    ids = tokens(40)
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            torch.testing.assert_close(path(ids), none(ids), rtol=0, atol=1e-12)


def test_key_blocks_of_a_forward_serve_only_the_keys_they_came_from(make_model) -> None:
    """Other keys of the same shape in the same forward (`posenc inspect`'s probe recomputes
    them) are never answered from the first keys' blocks; a prefix of the same keys is; only
    the latest layer's blocks are kept."""
    enc = make_model("path").double().encoding
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(1, 20, 32, dtype=F64, generator=gen)
    q, k1, k2 = (torch.randn(1, 4, 20, 8, dtype=F64, generator=gen) for _ in range(3))
    span = Span(0, 20, CPU)
    shared = ForwardCache(span)

    def bias(keys: torch.Tensor, cache: ForwardCache, end: int = 20) -> torch.Tensor:
        site = BiasSite(span.part(0, end), span.part(0, end), 0, cache, x[:, :end])
        return enc.content_bias(q[:, :, :end], keys[:, :, :end], site)

    first = bias(k1, shared)
    assert torch.equal(bias(k2, shared), bias(k2, ForwardCache(span)))
    assert not torch.equal(first, bias(k2, ForwardCache(span)))
    bias(k1, shared)
    entry = shared.tables[0]
    prefix = bias(k1, shared, 11)
    assert shared.tables[0] is entry
    torch.testing.assert_close(prefix, bias(k1, ForwardCache(span), 11), rtol=0, atol=1e-14)
    enc.content_bias(q, k1, BiasSite(span, span, 1, shared, x))
    assert list(shared.tables) == [1]


def test_a_head_of_one_dimension_is_refused_in_one_line(repo) -> None:
    """In one dimension w = ±1 and H_t = 1 - β_t, a signed decay with no direction to turn."""
    cfg = OmegaConf.load(repo / "configs" / "encoding" / "path.yaml")
    with pytest.raises(PosencError) as refused:
        build_encoding(cfg, 4, 4, 2)
    assert refused.value.what == (
        "path needs the head dimension model.d_model / model.n_heads to be an integer >= 2, got 1"
    )
    assert "\n" not in str(refused.value)
    assert build_encoding(cfg, 8, 4, 2).head_dim == 2


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("w_rank", 0, "an integer >= 1 or null"),
        ("w_rank", 2.5, "an integer >= 1 or null"),
        ("conv_width", -1, "an integer >= 0"),
        ("conv_width", None, "an integer >= 0"),
        ("forget_gate", "yes", "a bool"),
    ],
)
def test_bad_parameter_values_are_refused_in_one_line(repo, key: str, value, words: str) -> None:
    cfg = OmegaConf.load(repo / "configs" / "encoding" / "path.yaml")
    cfg[key] = value
    with pytest.raises(PosencError) as refused:
        build_encoding(cfg, 32, 4, 2)
    shown = "null" if value is None else str(value)
    assert refused.value.what == f"encoding.{key}={shown} is not {words}"
    assert refused.value.fix.startswith(f"set encoding.{key} to")
    assert "\n" not in str(refused.value)


def test_log_n_scaling_is_refused_as_it_would_scale_part_of_the_logit() -> None:
    with pytest.raises(PosencError, match=r"^model\.logn_scaling would scale only the q·k part"):
        check_encoding(compose(["encoding=path", "model.logn_scaling=true"]))
    check_encoding(compose(["encoding=fox", "model.logn_scaling=true"]))
