"""model.layers naming other encodings: RoPE layers beside ALiBi layers (or any two encodings
that act in attention, and NoPE). Checked layer by layer against the definition (block l run
with the context of its own encoding, built independently), for gradients reaching the other
encoding's weights, for the config (its YAML's parameters, refusals) and the exports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from posenc_cli.common.errors import PosencError
from posenc_cli.common.layer_pattern import layer_kinds
from posenc_cli.config.compose import load
from posenc_cli.encodings import PositionalEncoding, Span, build_encoding
from posenc_cli.engine.build import build_model
from posenc_cli.model.context import AttentionContext
from posenc_cli.model.transformer import TransformerLM

D, H, L, VOCAB = 32, 4, 3, 50
SMALL = ["model=tiny", "model.n_layers=4", "train.context_length=16"]


def _acts_in_every_layer(enc: PositionalEncoding) -> bool:
    """An encoding a pattern may name: it acts in attention and has no pattern of its own."""
    plain = type(enc).embed is PositionalEncoding.embed and enc.config_name != "none"
    return plain and not hasattr(enc, "pattern")


def test_a_pattern_names_each_layers_encoding() -> None:
    kinds = layer_kinds(["rope", "alibi", "none"], 7, "rope")
    assert kinds == ["encoding", "alibi", "none", "encoding", "alibi", "none", "encoding"]
    assert layer_kinds(["encoding", "t5"], 3, "alibi") == ["encoding", "t5", "encoding"]


def _mixed(
    encoding_config: Callable[[str], Any], name: str
) -> tuple[TransformerLM, PositionalEncoding]:
    """Layers [rope, NAME, none]: the run's RoPE, then NAME, then a NoPE layer."""
    torch.manual_seed(0)
    rope = build_encoding(encoding_config("rope"), D, H, L)
    other = build_encoding(encoding_config(name), D, H, L)
    model = TransformerLM(
        VOCAB, D, L, H, None, rope, encoded=[True, False, False], others=[None, other, None]
    ).double()
    return model, other


def _by_definition(model: TransformerLM, other: PositionalEncoding, ids: Tensor) -> Tensor:
    span = Span(0, ids.shape[1], ids.device)
    nope = PositionalEncoding(D, H, D // H, L)
    contexts = [
        AttentionContext(enc, span, model.bias_budget_bytes, ids.shape[0])
        for enc in (model.encoding, other, nope)
    ]
    x = model.token_embeddings(ids)
    for block, ctx in zip(model.blocks, contexts, strict=True):
        x = block(x, ctx)
    return model.lm_head(model.ln_final(x))


@pytest.mark.encodings(select=_acts_in_every_layer)
def test_each_layer_attends_with_its_own_encoding(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor], name: str
) -> None:
    """With autograd and without it in small query chunks, the model's logits are the blocks'
    run one by one with their own encoding's context; the other encoding's weights train."""
    model, other = _mixed(encoding_config, name)
    ids = tokens(24)
    logits = model(ids)
    torch.testing.assert_close(logits, _by_definition(model, other, ids), rtol=0, atol=1e-12)
    logits.square().mean().backward()
    grads = [w.grad for w in other.parameters() if w.grad is not None]
    assert not list(other.parameters()) or any(g.abs().sum() > 0 for g in grads)
    model.bias_budget_bytes = 4 * H * 16 * 24
    with torch.no_grad():
        torch.testing.assert_close(
            model(ids), _by_definition(model, other, ids), rtol=0, atol=1e-12
        )


def test_the_other_encoding_changes_the_model(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor]
) -> None:
    """The same weights with ALiBi's layer given NoPE instead give other logits (the check above
    could not pass by ignoring ``others``)."""
    model, _ = _mixed(encoding_config, "alibi")
    nope_instead = TransformerLM(
        VOCAB, D, L, H, None, model.encoding, encoded=[True, False, False]
    ).double()
    nope_instead.load_state_dict(model.state_dict(), strict=False)
    ids = tokens(24)
    with torch.no_grad():
        assert not torch.allclose(model(ids), nope_instead(ids))


def test_the_config_builds_the_layers_with_the_yaml_parameters() -> None:
    """encoding=rope with [rope, t5, none]: the run's name is the run's encoding, T5 gets its
    YAML's buckets, and its bias table is a weight of the checkpoint, once."""
    cfg = load([*SMALL, "encoding=rope", "model.layers=[rope,t5,none]"])
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB)
    assert model.layer_kinds == ["encoding", "t5", "none", "encoding"]
    t5 = model.layer_encoding("t5")
    assert t5.config_name == "t5" and t5.num_buckets == 32
    extra = set(build_model(cfg, VOCAB).state_dict()) - set(
        build_model(load([*SMALL, "encoding=rope"]), VOCAB).state_dict()
    )
    assert extra and all(key.startswith("other_encodings.t5.") for key in extra)


def test_cope_in_a_pattern_reads_the_runs_length() -> None:
    """CoPE's YAML sets its largest position from train.context_length: resolved for the run."""
    model = build_model(load([*SMALL, "encoding=alibi", "model.layers=[encoding,cope]"]), VOCAB)
    assert model.layer_encoding("cope").max_position == 17


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.layers=[encoding,alibii]"], "names 'alibii', which is not 'encoding', 'none'"),
        (["model.layers=[encoding,learned]"], "names learned, which acts once, at the input"),
        (["model.layers=[encoding,hybrid]"], "names hybrid, which has a layer pattern of its own"),
        (["model.layers=[encoding,encoding,encoding,encoding,alibi]"], "every one of the 4"),
        (["model.layers=[alibi,t5]"], "gives none of the 4 layers the run's encoding (rope)"),
        (["model.layers={a:1}"], "got a mapping, or the reverse: write a list in brackets"),
        (["model.layers=[none,alibi]"], "gives none of the 4 layers the run's encoding (rope)"),
        (
            ["encoding=alibi", "model.layers=[encoding,alibi]"],
            "makes every one of the 4 layers 'encoding' — put 'none' or another encoding",
        ),
        (["model.layers=[rope,rope,alibi]", "model.n_layers=2"], "use model.n_layers=3 or more"),
        (
            ["encoding=hybrid", "encoding.pattern=[none,rope]", "model.layers=[encoding,t5]"],
            "encoding=hybrid with model.layers=[encoding, t5] leaves no layer rotating",
        ),
        (
            ["model.layers=[encoding,none,t5]", "model.n_layers=2"],
            "has 3 entries for 2 layers: t5 reaches no layer — use model.n_layers=3 or more",
        ),
        (
            [
                "encoding=alibi",
                "model.n_heads=4",
                "model.d_model=4",
                "model.layers=[encoding,path]",
            ],
            "path needs the head dimension",
        ),
    ],
)
def test_a_pattern_with_an_encoding_that_cannot_serve_is_refused(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(PosencError) as caught:
        load([*SMALL, *overrides])  # encoding=rope, the default, unless one is given
    assert message in str(caught.value)


def test_the_exporters_refuse_other_encodings(tmp_path: Path) -> None:
    from posenc_cli.cs336.exporter import _check_rope
    from posenc_cli.hf.export_checks import check_exportable

    cfg = load([*SMALL, "encoding=rope", "model.layers=[encoding,alibi]"])
    with pytest.raises(PosencError, match="another encoding"):
        check_exportable(cfg, tmp_path)
    with pytest.raises(PosencError, match=r"model\.layers"):
        _check_rope(cfg, tmp_path)


def test_inspect_draws_each_layers_own_bias(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor]
) -> None:
    """A RoPE run (no bias of its own) with an ALiBi layer: inspect records the biases, ALiBi's
    −m·d in layer 2 and 0 in the RoPE and NoPE layers."""
    from posenc_cli.inspection.attention_stats import collect, model_has_bias

    model, alibi = _mixed(encoding_config, "alibi")
    model = model.float().eval()
    assert model_has_bias(model) and not model.encoding.has_bias
    stats = collect(model, tokens(24), 16)
    assert stats.bias_by_distance is not None
    distance = torch.arange(24, dtype=torch.float64)
    expected = (-alibi.slopes.double()[:, None] * distance[None, :]).numpy()
    assert stats.bias_by_distance[1] == pytest.approx(expected, abs=1e-5)
    assert (stats.bias_by_distance[0] == 0).all() and (stats.bias_by_distance[2] == 0).all()


def test_compare_and_sweep_lines_show_a_pattern_of_names(tmp_path: Path) -> None:
    """rich reads [rope, alibi] as markup and drops it: the terminal table's title keeps it."""
    from rich.console import Console

    from posenc_cli.report.table import rich_table

    console = Console(record=True, width=200)
    console.print(rich_table("ppl — layers=[rope, alibi]", ["encoding"], [[("rope", False)]]))
    text = console.export_text()
    assert "[rope" in text and "alibi]" in text


def test_inspects_summary_says_what_each_layer_does() -> None:
    from posenc_cli.inspection.summary import _layout_lines

    cfg = load([*SMALL, "model.layers=[rope,alibi]", "model.chunks=[8,null]"])
    assert _layout_lines(cfg.model) == [
        "Layers: model.layers=[rope, alibi]; model.chunks=[8, null] (each repeated over the "
        "layers).",
        "",
    ]
    assert _layout_lines(load(SMALL).model) == []
    cfg = load([*SMALL, "model.layers=[rope,t5]", "+model.layer_encodings.t5.num_buckets=8"])
    assert _layout_lines(cfg.model)[2] == "Their parameters: t5: num_buckets=8, max_distance=128."
