"""TransformerLM: shapes, CS336 module names, causality, RoPE, and training reduces loss."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from posenc_cli.encodings import build_encoding
from posenc_cli.encodings.rope import RotaryEncoding
from posenc_cli.model.transformer import TransformerLM


@pytest.fixture(scope="module")
def tiny(repo):
    """tiny(name="rope", vocab=50): a 2-layer, 32-wide model seeded with 0."""

    def make(name: str = "rope", vocab: int = 50) -> TransformerLM:
        torch.manual_seed(0)
        enc = build_encoding(
            OmegaConf.load(repo / "configs" / "encoding" / f"{name}.yaml"), 32, 4, 2
        )
        return TransformerLM(vocab, 32, 2, 4, None, enc)

    return make


def test_module_names_follow_cs336(tiny) -> None:
    names = set(tiny().state_dict())
    for expected in (
        "token_embeddings.weight",
        "layers.0.attn.q_proj.weight",
        "layers.1.attn.output_proj.weight",
        "layers.0.ln1.weight",
        "layers.0.ln2.weight",
        "layers.0.ffn.w1.weight",
        "layers.0.ffn.w2.weight",
        "layers.0.ffn.w3.weight",
        "ln_final.weight",
        "lm_head.weight",
    ):
        assert expected in names
    assert tiny().layers[0].attn.q_proj.weight.shape == (32, 32)


@pytest.mark.parametrize("name", ["none", "rope"])
def test_causal_changing_a_later_token_leaves_earlier_logits(name: str, tiny) -> None:
    model = tiny(name)
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(1))
    out = model(ids)
    assert out.shape == (2, 12, 50)
    t = 6
    changed = ids.clone()
    changed[:, t + 1] = (changed[:, t + 1] + 1) % 50
    out2 = model(changed)
    torch.testing.assert_close(out2[:, : t + 1], out[:, : t + 1], rtol=0, atol=0)
    assert (out2[:, t + 1] - out[:, t + 1]).abs().max() > 1e-4


def test_rope_rotates_interleaved_pairs_by_position_times_theta() -> None:
    rope = RotaryEncoding(
        d_model=8,
        n_heads=1,
        head_dim=8,
        n_layers=1,
        theta=1e4,
        rotary_fraction=1.0,
        p=1.0,
        yarn_ramp="hf",
    )
    x = torch.randn(1, 1, 5, 8)
    pos = torch.arange(5)
    out = rope.rotate(x, pos)
    for m in range(5):
        for k in range(4):
            angle = m * 10000.0 ** (-2 * k / 8)
            c = math.cos(angle)
            s = math.sin(angle)
            x0 = x[0, 0, m, 2 * k]
            x1 = x[0, 0, m, 2 * k + 1]
            torch.testing.assert_close(out[0, 0, m, 2 * k], x0 * c - x1 * s)
            torch.testing.assert_close(out[0, 0, m, 2 * k + 1], x0 * s + x1 * c)
    torch.testing.assert_close(out[..., 0, :], x[..., 0, :])


def test_a_few_steps_of_adamw_reduce_the_loss(tiny) -> None:
    model = tiny()
    gen = torch.Generator().manual_seed(0)
    data = torch.randint(0, 10, (4, 17), generator=gen)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        logits = model(data[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), data[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 1.0
