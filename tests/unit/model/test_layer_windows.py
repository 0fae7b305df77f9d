"""model.windows: sliding windows per layer, for any encoding. Checked against the definition
of a window (a query of a one-layer windowed model gives what the same model gives it when it
is shown only the last w tokens, at their own positions), for the receptive field of stacked
windows, layer by layer beside model.layers' NoPE layers, and through the config checks and the
exporters."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from posenc_cli.common.errors import PosencError
from posenc_cli.common.layer_pattern import per_layer
from posenc_cli.config.compose import load
from posenc_cli.encodings import PositionalEncoding, Span, build_encoding
from posenc_cli.engine.build import build_model
from posenc_cli.model.context import AttentionContext
from posenc_cli.model.transformer import TransformerLM

D, H, VOCAB, W, T = 32, 4, 50, 5, 20


def test_a_window_pattern_repeats_over_the_layers() -> None:
    assert per_layer([64, 64, 64, None], 6) == [64, 64, 64, None, 64, 64]
    assert per_layer(None, 2) == [None, None]


def _model(
    encoding_config: Callable[[str], Any], name: str, layers: int, windows: list[int | None]
) -> TransformerLM:
    torch.manual_seed(0)
    cfg = encoding_config(name)
    if name == "path":  # its short convolution reads conv_width - 1 tokens before a key's
        cfg.conv_width = 0  # Householder vector, the window's oldest included
    enc = build_encoding(cfg, D, H, layers)
    return TransformerLM(VOCAB, D, layers, H, None, enc, windows=windows).double()


def _shown_only_the_window(model: TransformerLM, ids: Tensor) -> Tensor:
    """Query i's logits from a model without a window shown tokens i - W + 1 … i alone, at
    their own positions: what a window of W means, computed without any window."""
    rows = []
    for i in range(ids.shape[1]):
        start = max(0, i - W + 1)
        rows.append(model(ids[:, start : i + 1], pos_offset=start)[:, -1])
    return torch.stack(rows, dim=1)


@pytest.mark.encodings
def test_a_windowed_query_sees_only_the_last_w_tokens(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor], name: str
) -> None:
    """One layer, window W, every encoding: with autograd, and without it in small query chunks
    (the evaluation path), each query's logits are those of the window shown alone."""
    windowed = _model(encoding_config, name, 1, [W])
    plain = _model(encoding_config, name, 1, [None])
    plain.load_state_dict(windowed.state_dict())
    ids = tokens(T)
    expected = _shown_only_the_window(plain, ids).detach()
    # to float32 precision only: xPos decays in float32 about the middle of the positions it
    # is given (a shorter input rounds its scales differently), and a windowed PaTH layer
    # passes its logits as a float32 content bias instead of attending in its own precision
    tol = 1e-5 if name in ("xpos", "path") else 1e-9
    torch.testing.assert_close(windowed(ids), expected, rtol=tol, atol=tol)
    windowed.bias_budget_bytes = 4 * H * 16 * T  # a few rows per chunk
    with torch.no_grad():
        torch.testing.assert_close(windowed(ids), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["rope", "alibi", "fox", "stick_breaking", "cope", "t5"])
def test_stacked_windows_reach_back_one_window_per_layer(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor], name: str
) -> None:
    """Two windowed layers: the last query depends on tokens back to 2(W - 1), and no further;
    without the windows the earliest token changes it (so the check can fail)."""
    windowed = _model(encoding_config, name, 2, [W, W])
    plain = _model(encoding_config, name, 2, [None, None])
    ids = tokens(T)
    reach = T - 1 - 2 * (W - 1)
    far, near = ids.clone(), ids.clone()
    far[:, :reach] = (far[:, :reach] + 1) % VOCAB
    near[:, reach] = (near[:, reach] + 1) % VOCAB
    with torch.no_grad():
        last = windowed(ids)[:, -1]
        torch.testing.assert_close(windowed(far)[:, -1], last, rtol=1e-12, atol=1e-12)
        assert not torch.allclose(windowed(near)[:, -1], last)
        assert not torch.allclose(plain(far)[:, -1], plain(ids)[:, -1])


def test_windows_and_nope_layers_are_each_layers_own(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor]
) -> None:
    """ALiBi with model.layers=[encoding, none] and model.windows=[W, W, null]: each block runs
    with the context its two patterns give it, built here one by one."""
    torch.manual_seed(0)
    enc = build_encoding(encoding_config("alibi"), D, H, 3)
    encoded, windows = [True, False, True], [W, W, None]
    model = TransformerLM(VOCAB, D, 3, H, None, enc, encoded=encoded, windows=windows)
    nope = build_encoding(encoding_config("none"), D, H, 3)
    ids = tokens(24)
    span = Span(0, 24, ids.device)
    x = model.token_embeddings(ids)
    for block, own, w in zip(model.blocks, encoded, windows, strict=True):
        layer_encoding: PositionalEncoding = enc if own else nope
        x = block(x, AttentionContext(layer_encoding, span, None, 2, None, w))
    expected = model.lm_head(model.ln_final(x))
    assert torch.equal(model(ids), expected)
    with torch.no_grad():
        assert torch.equal(model(ids), expected)


def test_the_config_builds_the_windows_and_adds_no_weights() -> None:
    cfg = load(["model=tiny", "encoding=t5", "model.windows=[8,null]"])
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB)
    assert model.windows == [8, None]
    plain = build_model(load(["model=tiny", "encoding=t5"]), VOCAB)
    assert set(model.state_dict()) == set(plain.state_dict())


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["model.windows=[0]"], "holds 0, not a number of tokens (1 or more) or null"),
        (["model.windows=[null]"], "gives none of the 2 layers a window"),
        (["model.windows=[null,null,4]"], "gives none of the 2 layers a window"),
        (["model.windows=[8,null,4]"], "has 3 entries for 2 layers: 4 reaches no layer — use"),
        (["model.windows=[]"], "model.windows=[] gives no layer a window"),
        (["model.windows=[16777217]"], "above posenc's longest context (16,777,216)"),
        (["model.windows=[abc]"], "wrong type for 'model.windows[0]'"),
        (["model.windows=[4,None]"], "write null for no value (None is a string here)"),
        (["model.windows=4"], "it takes a list — write it in brackets, e.g. model.windows=[...]"),
        (["encoding=rnope_swa", "model.windows=[8]"], "has its own window (encoding.window)"),
    ],
)
def test_windows_that_cannot_mean_what_they_say_are_refused(
    overrides: list[str], says: str
) -> None:
    with pytest.raises(PosencError, match=None) as caught:
        load(["model=tiny", *overrides])
    assert says in str(caught.value)


def test_the_cs336_export_refuses_windows(tmp_path: Path) -> None:
    """CS336's model attends globally (export-hf writes windows as SmolLM3: tests/unit/hf)."""
    from posenc_cli.cs336.exporter import _check_rope

    with pytest.raises(PosencError, match=r"model\.windows"):
        _check_rope(load(["model=tiny", "encoding=rope", "model.windows=[8,null]"]), tmp_path)


@pytest.mark.parametrize("name", ["alibi", "deberta", "fox"])
def test_inspect_weighs_within_the_window_and_draws_the_encodings_bias(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor], name: str
) -> None:
    """The windowed layer's attention stays inside its window (no weight beyond the training
    length L = 16 > W), the global layer's does not; the bias by distance is the encoding's,
    finite at every distance, not the window's -inf."""
    from posenc_cli.inspection.attention_stats import collect

    model = _model(encoding_config, name, 2, [W, None]).float().eval()
    stats = collect(model, tokens(48), 16)
    assert stats.beyond is not None
    assert (stats.mean_distance[0] <= W - 1 + 1e-6).all()
    assert (stats.beyond[0] == 0).all() and (stats.beyond[1] > 0).all()
    if stats.bias_by_distance is not None:
        assert torch.isfinite(torch.from_numpy(stats.bias_by_distance)).all()


def test_a_sweep_keeps_a_pattern_with_null_as_written() -> None:
    """Each job gets 'model.windows=[4,null]' itself, not Python's '[4, None]' (a string)."""
    from posenc_cli.config.overrides import expand_sweep

    jobs = expand_sweep(["model=tiny", "model.windows=[4,null]", "encoding=rope,alibi"])
    assert [job[1] for job in jobs] == ["model.windows=[4,null]"] * 2
    assert all(list(load(job).model.windows) == [4, None] for job in jobs)


@pytest.mark.parametrize("key", ["model.windows=[4]", "model.layers=[encoding,none]"])
def test_an_imported_cs336_model_keeps_its_global_rope_layers(key: str, tmp_path: Path) -> None:
    from posenc_cli.cs336.importer import import_cs336

    required = ["model.n_heads=2", "encoding.theta=10000", "train.context_length=16"]
    missing = tmp_path / "none.pt"
    with pytest.raises(PosencError, match="cannot set model.* on an imported CS336 model"):
        import_cs336(missing, missing, missing, [], [*required, key])
