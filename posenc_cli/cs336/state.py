"""A CS336 checkpoint's model weights and the dimensions they imply.

Accepted: what the assignment's save_checkpoint writes (a dict holding the model's state dict
beside the optimizer's and the iteration) or a bare state dict; keys saved from a
torch.compile'd model carry an `_orig_mod.` prefix, which is dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from posenc_cli.common.errors import PosencError
from posenc_cli.engine.checkpoint import load_tensors

PREFIX = "_orig_mod."
#: Where a save_checkpoint dict may keep the model's state dict.
MODEL_KEYS = ("model", "model_state_dict", "state_dict", "model_state")


@dataclass
class Weights:
    """The state dict (posenc/CS336 names) and what it says about the model."""

    state: dict[str, Tensor]
    iteration: int | None
    vocab_size: int
    d_model: int
    n_layers: int
    d_ff: int


def load_weights(path: Path) -> Weights:
    if not path.is_file():
        raise PosencError(f"checkpoint '{path}' does not exist", "give the file you saved")
    raw = load_tensors(
        path,
        f"'{path}' cannot be loaded as weights",
        "give a file written by torch.save of tensors (save_checkpoint)",
    )
    state, iteration = _split(raw, path)
    state = {k.removeprefix(PREFIX): v for k, v in state.items()}
    _check_floating(state, path)
    return Weights(state, iteration, *_dimensions(state, path))


def _check_floating(state: dict[str, Tensor], path: Path) -> None:
    """Every weight is floating point: an integer or boolean one is no model's, and casting it
    to float32 would import a different model without a word."""
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            raise PosencError(
                f"'{path}': {name} is stored as {tensor.dtype}, not floating point",
                "save the model's weights as floating-point tensors (float32, bfloat16, …)",
            )


def _split(raw: Any, path: Path) -> tuple[dict[str, Tensor], int | None]:
    encoding = (raw.get("config") or {}).get("encoding") if isinstance(raw, dict) else None
    if isinstance(encoding, dict) and encoding.get("name") not in (None, "rope"):
        raise PosencError(
            f"'{path}' is a posenc checkpoint of encoding '{encoding.get('name')}'",
            "import only RoPE models; a posenc run is evaluated as it is",
        )
    if isinstance(raw, dict) and _is_state(raw):
        return raw, None
    if isinstance(raw, dict):
        for key in MODEL_KEYS:
            if isinstance(raw.get(key), dict) and _is_state(raw[key]):
                return raw[key], _iteration(raw.get("iteration", raw.get("step")), path)
    raise PosencError(
        f"'{path}' holds no model state dict",
        f"save the model's state_dict, alone or under one of: {', '.join(MODEL_KEYS)}",
    )


def _iteration(value: Any, path: Path) -> int | None:
    """The saved iteration: absent, or a non-negative whole number."""
    if value is None:
        return None
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < 0:
        raise PosencError(
            f"'{path}' has iteration {value!r}, not a count of steps",
            "save the iteration as a non-negative integer (or leave it out)",
        )
    return int(value)


def _is_state(d: dict[Any, Any]) -> bool:
    return bool(d) and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in d.items())


def _dimensions(state: dict[str, Tensor], path: Path) -> tuple[int, int, int, int]:
    """vocab size, d_model, number of layers and d_ff, read from the shapes."""
    try:
        vocab_size, d_model = state["token_embeddings.weight"].shape
        d_ff = state["layers.0.ffn.w1.weight"].shape[0]
    except (KeyError, ValueError):
        raise PosencError(
            f"'{path}' is not a CS336 TransformerLM state dict (no "
            "token_embeddings.weight or layers.0.ffn.w1.weight)",
            "export the state dict of your TransformerLM",
        ) from None
    layers = {int(m.group(1)) for k in state if (m := re.match(r"layers\.(\d+)\.", k))}
    return int(vocab_size), int(d_model), max(layers) + 1, int(d_ff)
