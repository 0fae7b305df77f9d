"""An encoding defined only here (its class below, its YAML in toy/) trains and evaluates end
to end through the test-only door, config/added_encodings.register_encoding, which only code
can open: a config naming a class outside posenc_cli/encodings/ is still refused."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
import torch
from omegaconf import OmegaConf
from torch import Tensor

from posenc_cli.common.errors import PosencError
from posenc_cli.config.added_encodings import register_encoding, unregister_encoding
from posenc_cli.config.compose import compose
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import load_run_config
from posenc_cli.encodings import PositionalEncoding, Span
from posenc_cli.encodings.parameters import POSITIVE
from posenc_cli.encodings.registry import encoding_class
from posenc_cli.engine.build import build_model
from posenc_cli.model.context import AttentionContext
from posenc_cli.workflows.jobs import run_training
from tests.helpers.configs import FOUR_STEPS

YAML = Path(__file__).parent / "toy" / "toy_decay.yaml"


class ToyDecay(PositionalEncoding):
    """ALiBi with one slope for every head: the bias -slope·(i - j)."""

    relative = True

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        n_layers: int,
        slope: Annotated[float, POSITIVE],
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, n_layers)
        self.slope = float(slope)

    def distance_bias(self, distance: Tensor) -> Tensor:
        return (-self.slope * distance.float()).expand(self.n_heads, -1)


@pytest.fixture(scope="module")
def trained(
    tmp_path_factory: pytest.TempPathFactory, corpus: Path, cache_dir: Path
) -> Iterator[Any]:
    """A tiny toy_decay run, trained and evaluated in this process as `posenc train` does."""
    assert register_encoding(ToyDecay, YAML) == "toy_decay"
    cfg = compose(
        [
            "encoding=toy_decay",
            "encoding.slope=0.25",
            *FOUR_STEPS,
            f"data.path={corpus}",
            "eval.tasks=[extrapolation]",
            "eval.factors=[1,2]",
            "eval.tokens=64",
        ]
    )
    run_dir = tmp_path_factory.mktemp("toy-run")
    (run_dir / ".hydra").mkdir()
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")  # what Hydra's runner writes
    run_training(typed(cfg), run_dir)
    yield cfg, run_dir
    unregister_encoding("toy_decay")


def test_the_toy_trains_and_evaluates_end_to_end(trained: Any) -> None:
    cfg, run_dir = trained
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["encoding"] == "toy_decay" and metrics["steps"] == 4
    ppl = metrics["extrapolation"]["ppl"]
    assert set(ppl) == {"16", "32"} and all(math.isfinite(v) and v > 1 for v in ppl.values())
    again = load_run_config(run_dir)  # a saved run is mapped by name, as a shipped one is
    assert again.encoding.slope == 0.25 and again.encoding.name == "toy_decay"


def test_its_attention_is_softmax_with_its_bias_by_hand(trained: Any) -> None:
    cfg, _ = trained
    torch.manual_seed(0)
    model = build_model(typed(cfg), 300)
    assert isinstance(model.encoding, ToyDecay) and model.encoding.slope == 0.25
    attn = model.layers[0].attn
    n = 12
    x = torch.randn(1, n, cfg.model.d_model, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        fast = attn(x, AttentionContext(model.encoding, Span(0, n, torch.device("cpu"))))
        q, k, v = (attn._heads(p(x)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
        i = torch.arange(n)
        bias = -0.25 * (i[:, None] - i[None, :]).float()
        logits = q @ k.transpose(-1, -2) * attn.head_dim**-0.5 + bias
        logits = logits.masked_fill(i[None, :] > i[:, None], -math.inf)
        naive = attn.output_proj((logits.softmax(-1) @ v).transpose(1, 2).flatten(2))
    torch.testing.assert_close(fast, naive, rtol=1e-5, atol=1e-5)


def test_its_typed_parameter_is_checked_like_a_shipped_one(trained: Any) -> None:
    """The constructor's Rule refuses a slope <= 0 before anything is built."""
    with pytest.raises(PosencError, match="encoding.slope=-1 is not a number > 0"):
        compose(["encoding=toy_decay", "encoding.slope=-1"])


def test_a_config_alone_cannot_name_a_class_outside_posenc(trained: Any) -> None:
    with pytest.raises(PosencError, match="not one of posenc's encodings"):
        encoding_class("toy.Unregistered")
    assert encoding_class("toy.ToyDecay") is ToyDecay


def test_closing_the_door_refuses_the_toy_again(trained: Any) -> None:
    unregister_encoding("toy_decay")
    try:
        with pytest.raises(PosencError, match="toy_decay"):
            compose(["encoding=toy_decay"])
        with pytest.raises(PosencError, match="not one of posenc's encodings"):
            encoding_class("toy.ToyDecay")
    finally:
        register_encoding(ToyDecay, YAML)
