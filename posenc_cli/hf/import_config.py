"""A Hugging Face config.json read as posenc settings, refusing what posenc's model lacks.

posenc's RoPE model is a Llama decoder (RMSNorm, SwiGLU, rotary attention without biases), so
a llama checkpoint maps one to one, and mistral or qwen2 ones do when they use nothing Llama
lacks (sliding-window attention, projection biases). Both spellings of the rotary settings are
read: ``rope_parameters`` (transformers 5) and ``rope_theta`` with ``rope_scaling`` (earlier).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from posenc_cli.common.errors import PosencError

#: model_type values whose decoder is Llama's.
FAMILIES = ("llama", "mistral", "qwen2")
REFUSED = "posenc's model is a Llama decoder without it"


def read_config(folder: Path) -> dict[str, Any]:
    """config.json of a model folder as a dictionary, a damaged file as one line."""
    path = folder / "config.json"
    if not path.is_file():
        raise PosencError(
            f"{folder} has no config.json", "point at a Hugging Face model folder or hub id"
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PosencError(
            f"{path} cannot be read ({exc})", "restore the model's config.json"
        ) from None
    if not isinstance(config, dict):
        raise PosencError(f"{path} is not a JSON object", "restore the model's config.json")
    return config


def settings(config: dict[str, Any], where: Path) -> dict[str, Any]:
    """posenc config keys and values for the checkpoint ``config`` describes."""
    _check_family(config, where)
    d_model = _positive(config, "hidden_size")
    heads = _positive(config, "num_attention_heads")
    if d_model % heads or config.get("head_dim") not in (None, d_model // heads):
        raise PosencError(
            f"{where}: head_dim={config.get('head_dim')} is not hidden_size/num_attention_heads",
            REFUSED,
        )
    vocab = _positive(config, "vocab_size")
    return {
        "encoding.theta": rope_theta(config, where),
        "model.d_model": d_model,
        "model.n_layers": _positive(config, "num_hidden_layers"),
        "model.n_heads": heads,
        "model.n_kv_heads": int(config.get("num_key_value_heads") or heads),
        "model.d_ff": _positive(config, "intermediate_size"),
        "model.rms_norm_eps": float(config.get("rms_norm_eps", 1e-6)),
        "model.tie_embeddings": bool(config.get("tie_word_embeddings", False)),
        "train.context_length": _positive(config, "max_position_embeddings"),
        "data.vocab_size": max(vocab, 257),
    }


def rope_theta(config: dict[str, Any], where: Path) -> float:
    """The base θ of plain RoPE; a checkpoint trained with scaled or partial rotary is refused
    (posenc evaluates the extension methods itself, on the plain frequencies)."""
    rope = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    kind = rope.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise PosencError(
            f"{where} was trained with rope_type '{kind}'",
            "import a checkpoint with plain RoPE (rope_type default); posenc applies "
            "scaling at evaluation: eval.rope_scaling=…",
        )
    fraction = rope.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
    if float(fraction) != 1.0:
        raise PosencError(
            f"{where} rotates part of each head (partial_rotary_factor={fraction})",
            "import a Llama checkpoint that rotates every dimension",
        )
    return float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))


def _check_family(config: dict[str, Any], where: Path) -> None:
    kind = config.get("model_type")
    if kind not in FAMILIES:
        raise PosencError(
            f"{where} is a '{kind}' model, not a Llama-family one",
            "import a checkpoint of model_type " + ", ".join(FAMILIES),
        )
    lacking = {
        "hidden_act": config.get("hidden_act", "silu") != "silu",
        "attention_bias": bool(config.get("attention_bias", False)),
        "mlp_bias": bool(config.get("mlp_bias", False)),
        "sliding_window": bool(config.get("use_sliding_window", kind == "mistral"))
        and config.get("sliding_window") is not None,
    }
    for key, differs in lacking.items():
        if differs:
            raise PosencError(f"{where} uses {key}={config.get(key)}", REFUSED)


def _positive(config: dict[str, Any], key: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PosencError(
            f"config.json's {key}={value!r} is not a positive integer",
            "restore the model's config.json",
        )
    return value
