"""A Hugging Face config.json read as posenc settings, refusing what posenc's model lacks.

posenc's RoPE model is a Llama decoder (RMSNorm, SwiGLU, rotary attention without biases), so
a llama checkpoint maps one to one, and mistral, qwen2 or smollm3 ones do when they use nothing
Llama lacks (sliding-window attention, projection biases); SmolLM3's layers without RoPE make
the run ``encoding=hybrid``. Both spellings of the rotary settings are
read: ``rope_parameters`` (transformers 5) and ``rope_theta`` with ``rope_scaling`` (earlier);
hf/import_rope.py reads them, LongRoPE included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from posenc_cli.common.errors import PosencError
from posenc_cli.hf.fields import Fields
from posenc_cli.hf.import_rope import rope_settings

#: model_type values whose decoder is Llama's.
FAMILIES = ("llama", "mistral", "qwen2", "smollm3")
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
    except RecursionError:  # thousands of nested brackets: no config.json nests that deep
        raise PosencError(
            f"{path} nests deeper than any model config", "restore the model's config.json"
        ) from None
    if not isinstance(config, dict):
        raise PosencError(f"{path} is not a JSON object", "restore the model's config.json")
    return config


def settings(config: dict[str, Any], where: Path) -> dict[str, Any]:
    """posenc config keys and values for the checkpoint ``config`` describes, every field
    read with its type and range (hf/fields.py)."""
    f = Fields(config, where / "config.json", "restore the model's config.json")
    _check_family(f, where)
    d_model = f.integer("hidden_size")
    heads = f.integer("num_attention_heads")
    head_dim = f.optional_integer("head_dim")
    if d_model % heads or head_dim not in (None, d_model // heads):
        raise PosencError(
            f"{where}: head_dim={head_dim} is not hidden_size/num_attention_heads", REFUSED
        )
    kv_heads = (
        f.integer("num_key_value_heads", heads) if f.data.get("num_key_value_heads") else heads
    )
    if heads % kv_heads:
        raise f.refuse("num_key_value_heads", kv_heads, f"a divisor of num_attention_heads={heads}")
    return {
        **rope_settings(f, where, d_model // heads),
        **layer_settings(f, f.integer("num_hidden_layers")),
        **window_settings(f, f.integer("num_hidden_layers")),
        "model.d_model": d_model,
        "model.n_layers": f.integer("num_hidden_layers"),
        "model.n_heads": heads,
        "model.n_kv_heads": kv_heads,
        "model.d_ff": f.integer("intermediate_size"),
        "model.rms_norm_eps": f.number("rms_norm_eps", 1e-6, positive=True, null_ok=False),
        "model.tie_embeddings": f.flag("tie_word_embeddings", False),
        "data.vocab_size": max(f.integer("vocab_size"), 257),
    }


def layer_settings(f: Fields, n_layers: int) -> dict[str, Any]:
    """SmolLM3's layers without RoPE as ``encoding=hybrid`` with that pattern (one entry per
    layer); no such layer (every other family) leaves plain ``rope``. ``no_rope_layers`` holds
    1 for a RoPE layer and 0 for a NoPE one; absent, transformers derives it from
    ``no_rope_layer_interval`` (NoPE where (layer + 1) % interval == 0)."""
    if f.text("model_type") != "smollm3":
        return {}
    flags = f.data.get("no_rope_layers")
    if flags is None:
        interval = f.integer("no_rope_layer_interval", 4)
        flags = [int((layer + 1) % interval != 0) for layer in range(n_layers)]
    if not isinstance(flags, list) or len(flags) != n_layers or any(x not in (0, 1) for x in flags):
        raise f.refuse("no_rope_layers", flags, f"a list of {n_layers} entries, each 0 or 1")
    if all(flags):
        return {}
    pattern = ",".join("rope" if x else "none" for x in flags)
    return {"encoding": "hybrid", "encoding.pattern": f"[{pattern}]"}


def _check_family(f: Fields, where: Path) -> None:
    kind = f.text("model_type")
    if kind not in FAMILIES:
        raise PosencError(
            f"{where} is a '{kind}' model, not a Llama-family one",
            "import a checkpoint of model_type " + ", ".join(FAMILIES),
        )
    window = f.data.get("sliding_window")
    lacking = {
        "hidden_act": f.text("hidden_act", "silu") != "silu",
        "attention_bias": f.flag("attention_bias", False),
        "mlp_bias": f.flag("mlp_bias", False),
        # Qwen2's windows follow max_window_layers; Mistral's and SmolLM3's are model.windows
        "sliding_window": kind == "qwen2"
        and f.flag("use_sliding_window", False)
        and window is not None,
    }
    for key, differs in lacking.items():
        if differs:
            raise PosencError(f"{where} uses {key}={f.data.get(key)}", REFUSED)


def window_settings(f: Fields, n_layers: int) -> dict[str, Any]:
    """Sliding windows as ``model.windows``, where transformers applies them (5.x): Mistral's
    sliding_window in every layer whenever it is set, SmolLM3's in the layers its
    ``layer_types`` mark "sliding_attention" (both whatever use_sliding_window says: their
    masks follow these fields); absent layer_types, SmolLM3 derives them, sliding on its NoPE
    layers when use_sliding_window is on. Query i sees keys i - j < sliding_window, as in
    posenc."""
    kind = f.text("model_type")
    window = f.optional_integer("sliding_window") if kind in ("mistral", "smollm3") else None
    if window is None:
        return {}
    if kind == "mistral":
        return {"model.windows": f"[{window}]"}
    kinds = ("sliding_attention", "full_attention")
    types = f.data.get("layer_types")
    if types is None:
        pattern = layer_settings(f, n_layers).get("encoding.pattern")
        words = pattern.strip("[]").split(",") if pattern else ["rope"] * n_layers
        on = f.flag("use_sliding_window", False)
        types = [kinds[0] if on and word == "none" else kinds[1] for word in words]
    if not isinstance(types, list) or len(types) != n_layers or any(t not in kinds for t in types):
        raise f.refuse("layer_types", types, f"a list of {n_layers} entries, each of {kinds}")
    windows = ",".join(str(window) if t == kinds[0] else "null" for t in types)
    return {"model.windows": f"[{windows}]"} if kinds[0] in types else {}
