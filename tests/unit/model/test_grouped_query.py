"""Grouped-query attention, tied embeddings and the norm epsilon: a GQA model is the
multi-head model whose key/value heads are copied for their groups; the defaults build exactly
the model posenc built before these keys existed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose, load
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import load_run_config
from posenc_cli.encodings import build_encoding
from posenc_cli.engine.build import build_model
from posenc_cli.model.transformer import TransformerLM

D = 32
H = 4
LAYERS = 2
VOCAB = 50


def model(repo: Path, name: str, seed: int = 0, **kwargs: object) -> TransformerLM:
    torch.manual_seed(seed)
    enc = build_encoding(
        OmegaConf.load(repo / "configs" / "encoding" / f"{name}.yaml"), D, H, LAYERS
    )
    return TransformerLM(VOCAB, D, LAYERS, H, None, enc, **kwargs)


def ids() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("name", ["rope", "alibi", "t5"])
def test_gqa_equals_multi_head_with_each_kv_head_copied_for_its_group(
    repo: Path, name: str
) -> None:
    gqa = model(repo, name, n_kv_heads=2)
    assert gqa.layers[0].attn.k_proj.weight.shape == (2 * D // H, D)
    full = model(repo, name, seed=1)
    state = gqa.state_dict()
    head_dim = D // H
    for key, w in state.items():
        if key.endswith(("k_proj.weight", "v_proj.weight")):
            # kv head g serves query heads 2g and 2g+1: copy its rows by hand
            w = torch.cat([w[g * head_dim : (g + 1) * head_dim] for g in (0, 0, 1, 1)])
        full.state_dict()[key].copy_(w)
    with torch.no_grad():
        torch.testing.assert_close(gqa(ids()), full(ids()), rtol=1e-5, atol=1e-5)


def test_n_kv_heads_equal_to_n_heads_is_the_default_model(repo: Path) -> None:
    default = model(repo, "rope")
    explicit = model(repo, "rope", n_kv_heads=H)
    with torch.no_grad():
        torch.testing.assert_close(default(ids()), explicit(ids()), rtol=0, atol=0)


def test_tied_embeddings_share_one_tensor_and_its_gradient(repo: Path) -> None:
    tied = model(repo, "rope", tie_embeddings=True)
    assert tied.lm_head.weight is tied.token_embeddings.weight
    assert (
        sum(p.numel() for p in tied.parameters())
        == sum(p.numel() for p in model(repo, "rope").parameters()) - VOCAB * D
    )
    tied(ids()).sum().backward()
    assert tied.token_embeddings.weight.grad is not None


def test_rms_norm_eps_reaches_every_norm(repo: Path) -> None:
    m = model(repo, "rope", rms_norm_eps=1e-6)
    norms = [m.ln_final, *(n for b in m.layers for n in (b.ln1, b.ln2))]
    assert [n.eps for n in norms] == [1e-6] * (2 * LAYERS + 1)


def test_a_run_saved_before_these_keys_builds_the_same_model(tmp_path: Path) -> None:
    cfg = OmegaConf.to_container(compose(["model=tiny"]))
    for key in ("n_kv_heads", "rms_norm_eps", "tie_embeddings"):
        del cfg["model"][key]
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(cfg), run / ".hydra" / "config.yaml")
    old = load_run_config(run)
    torch.manual_seed(0)
    built = build_model(typed(old), VOCAB)
    torch.manual_seed(0)
    new = build_model(load(["model=tiny"]), VOCAB)
    assert built.lm_head.weight is not built.token_embeddings.weight
    assert built.ln_final.eps == 1e-5
    assert {k: v.shape for k, v in built.state_dict().items()} == {
        k: v.shape for k, v in new.state_dict().items()
    }


def test_n_kv_heads_must_divide_n_heads() -> None:
    with pytest.raises(PosencError, match="n_kv_heads=3 does not divide"):
        compose(["model=tiny", "model.n_heads=4", "model.n_kv_heads=3"])
