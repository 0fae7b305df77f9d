"""An encoding with per-layer weights (DeBERTa's projections, Transformer-XL's, FoX's gates,
PaTH's transforms, CoPE's tables) holds them only for the layers that use it (model.layers):
the others would never train, yet would count in the model's size and its checkpoints.
Checkpoints saved with every layer's weights still load."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from posenc_cli.encodings import PositionalEncoding, build_encoding
from posenc_cli.encodings.per_layer import PerLayer
from posenc_cli.model.transformer import TransformerLM

D, H, L, VOCAB = 32, 4, 3, 50
USES = [True, False, True]  # layer 1 attends with no position


def _has_per_layer_weights(enc: PositionalEncoding) -> bool:
    return any(isinstance(module, PerLayer) for module in enc.modules())


def _model(encoding_config: Callable[[str], Any], name: str, seed: int, uses: list[bool]):
    torch.manual_seed(seed)
    enc = build_encoding(encoding_config(name), D, H, L)
    return TransformerLM(VOCAB, D, L, H, None, enc, encoded=uses).double()


def _layer_one(key: str) -> bool:
    """A key of the encoding's weights of layer 1 (``encoding.<name>.1`` or ``.1.<weight>``)."""
    return key.startswith("encoding.") and re.search(r"\.1(\.|$)", key) is not None


@pytest.mark.encodings(select=_has_per_layer_weights)
def test_layers_without_the_encoding_hold_none_of_its_weights(
    encoding_config: Callable[[str], Any], name: str
) -> None:
    """The model is the model of every layer less the encoding's weights of layer 1, exactly;
    the weights of layers 0 and 2 are those the full model draws from the same seed."""
    full = _model(encoding_config, name, 0, [True] * L)
    model = _model(encoding_config, name, 0, USES)
    dropped = {k: v for k, v in full.state_dict().items() if _layer_one(k)}
    assert dropped
    assert model.num_parameters() == full.num_parameters() - sum(
        v.numel() for v in dropped.values()
    )
    kept = model.state_dict()
    assert set(kept) == set(full.state_dict()) - set(dropped)
    for key, value in kept.items():
        torch.testing.assert_close(value, full.state_dict()[key], rtol=0, atol=0)
    assert all(m.layers == [0, 2] for m in model.encoding.modules() if isinstance(m, PerLayer))


@pytest.mark.encodings(select=_has_per_layer_weights)
def test_a_checkpoint_with_every_layers_weights_still_loads(
    encoding_config: Callable[[str], Any], tokens: Callable[..., Tensor], name: str
) -> None:
    """A checkpoint written when the unused layers' weights were kept (another seed's full
    model): it loads strictly, layers 0 and 2 take its weights, and the logits are those of
    a model built with them."""
    saved = _model(encoding_config, name, 1, [True] * L).state_dict()
    model = _model(encoding_config, name, 0, USES)
    model.load_state_dict(saved)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, saved[key], rtol=0, atol=0)
    again = _model(encoding_config, name, 2, USES)
    again.load_state_dict({k: v for k, v in saved.items() if not _layer_one(k)})
    ids = tokens(12)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), again(ids), rtol=0, atol=0)


def test_a_cope_checkpoint_with_one_table_of_every_layer_loads(
    encoding_config: Callable[[str], Any],
) -> None:
    """CoPE's tables were one (L, E, max_position) parameter: read into the layers that use
    CoPE, the table of the NoPE layer dropped."""
    saved = _model(encoding_config, "cope", 1, [True] * L).state_dict()
    tables = [saved.pop(f"encoding.embeddings.{layer}") for layer in range(L)]
    saved["encoding.embeddings"] = torch.stack(tables) + 1
    model = _model(encoding_config, "cope", 0, USES)
    model.load_state_dict(saved)
    for layer in (0, 2):
        torch.testing.assert_close(model.encoding.embeddings[layer], tables[layer] + 1)
    with pytest.raises(AttributeError):
        model.encoding.embeddings[1]


def test_per_layer_keeps_names_and_order() -> None:
    """The names a ModuleList of every layer has; iteration in layer order after ``keep``."""
    torch.manual_seed(0)
    weights = PerLayer(4, lambda: torch.nn.Linear(2, 2))
    assert [k.split(".")[0] for k in weights.state_dict()][::2] == ["0", "1", "2", "3"]
    weights.keep([3, 1])
    assert weights.layers == [1, 3] and len(weights) == 2
    assert [w is weights[n] for w, n in zip(weights, [1, 3], strict=True)] == [True, True]
