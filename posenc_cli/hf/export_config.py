"""config.json of an exported run: LlamaConfig, Phi3Config when only part of each head
rotates (transformers' Llama rotates every dimension; Phi-3 is the same decoder with fused
projections and a ``partial_rotary_factor``), or SmolLM3Config for a hybrid or windowed run
(Llama's decoder with some layers unrotated, or attending within one sliding window).

A context-extension method becomes transformers' ``rope_scaling``: pi is ``linear``, llama3,
yarn and longrope keep their names (longrope with both sets of rescale factors), dynamic_ntk
is ``dynamic``, and static NTK-aware scaling is the plain
RoPE of base b·S^(E/(E-2)). Every method is the one posenc's `eval.rope_scaling` computes
(encodings/rope_scaling.py follows transformers' formulas; YaRN's paper ramp,
`encoding.yarn_ramp=paper`, has no transformers equivalent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posenc_cli.common.errors import PosencError
from posenc_cli.common.sizes import MAX_CONTEXT
from posenc_cli.encodings.rope_regions import LLAMA3_HIGH, LLAMA3_LOW, YARN_ALPHA, YARN_BETA

#: --rope-scaling values.
METHODS = ("none", "pi", "ntk", "dynamic_ntk", "yarn", "llama3", "longrope")
#: LongRoPE's rescale factors: (long set, short set), one factor per rotated pair each.
Rescale = tuple[list[float], list[float]]


@dataclass(frozen=True)
class Shape:
    """What config.json says about the model, read from the run."""

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    head_dim: int
    rotary_dims: int
    theta: float
    train_length: int
    rms_norm_eps: float
    eot: int
    #: SmolLM3's no_rope_layers of a hybrid run (1: the layer rotates, 0: no position); None
    #: when every layer rotates (Llama, Phi-3).
    no_rope_layers: tuple[int, ...] | None = None
    #: Each layer's sliding window (model.windows, rnope_swa's RoPE layers), one size or None;
    #: None when every layer is global.
    windows: tuple[int | None, ...] | None = None


def rope_settings(
    method: str, factor: float, shape: Shape, rescale: Rescale | None = None
) -> tuple[float, dict | None, int]:
    """rope_theta, rope_scaling and max_position_embeddings for ``method`` at ``factor``
    (``rescale``: longrope's factor sets)."""
    if method not in METHODS:
        raise PosencError(
            f"unknown --rope-scaling '{method}'", "choose one of: " + ", ".join(METHODS)
        )
    L = shape.train_length
    E = shape.rotary_dims
    if method == "none":
        return shape.theta, None, L
    if factor < 1 or (factor == 1 and method != "dynamic_ntk"):  # dynamic: L'/L past L
        raise PosencError(
            f"--factor {factor} does not extend the context",
            "give a factor above 1, e.g. --factor 4",
        )
    longer = _extended(L, factor)
    if method == "ntk":
        return shape.theta * factor ** (E / (E - 2)), None, longer
    if shape.rotary_dims < shape.head_dim:
        raise _partial_refusal(method)
    if method == "longrope":
        assert rescale is not None  # export.py reads the run's sets first
        long, short = rescale
        scaling: dict[str, Any] = {"rope_type": "longrope", "long_factor": long}
        scaling.update(short_factor=short, factor=factor, original_max_position_embeddings=L)
        return shape.theta, scaling, longer
    return shape.theta, scaling_entry(method, factor, L), L if method == "dynamic_ntk" else longer


def _extended(train_length: int, factor: float) -> int:
    """S·L, refused above the longest context posenc runs (as extend.factor is): no model
    evaluates there, and config.json would promise it."""
    longer = train_length * factor
    if longer > MAX_CONTEXT:
        raise PosencError(
            f"--factor {factor:.12g} times the run's training length {train_length} is "
            f"{longer:.12g} tokens, above the longest context posenc runs ({MAX_CONTEXT})",
            f"give --factor <= {MAX_CONTEXT // train_length}",
        )
    return round(longer)


def _partial_refusal(method: str) -> PosencError:
    """Why a method that rescales with partial rotary has no transformers equivalent."""
    if method == "longrope":
        return PosencError(
            "--rope-scaling longrope with partial rotary: transformers' Phi-3 applies "
            "LongRoPE's attention factor to the rotated dimensions only, posenc to whole heads",
            "export a run that rotates every dimension, or use --rope-scaling ntk",
        )
    return PosencError(
        f"--rope-scaling {method} with partial rotary has no transformers equivalent "
        "(Phi-3's rotary only knows longrope)",
        "use --rope-scaling ntk, or export without scaling",
    )


def scaling_entry(method: str, factor: float, train_length: int) -> dict[str, Any]:
    """config.json's rope_scaling for a method transformers names differently."""
    L = train_length
    return {
        "pi": {"rope_type": "linear", "factor": factor},
        "dynamic_ntk": {"rope_type": "dynamic", "factor": factor},
        "yarn": {
            "rope_type": "yarn",
            "factor": factor,
            "beta_fast": YARN_BETA,
            "beta_slow": YARN_ALPHA,
            "original_max_position_embeddings": L,
        },
        "llama3": {
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": LLAMA3_LOW,
            "high_freq_factor": LLAMA3_HIGH,
            "original_max_position_embeddings": L,
        },
    }[method]


def hf_config(
    shape: Shape, method: str, factor: float, sets: Rescale | None = None
) -> dict[str, Any]:
    """The config.json dictionary (``sets``: longrope's factor sets)."""
    theta, scaling, max_positions = rope_settings(method, factor, shape, sets)
    partial = shape.rotary_dims < shape.head_dim
    config: dict[str, Any] = {
        "architectures": ["Phi3ForCausalLM" if partial else "LlamaForCausalLM"],
        "model_type": "phi3" if partial else "llama",
        "vocab_size": shape.vocab_size,
        "hidden_size": shape.d_model,
        "intermediate_size": shape.d_ff,
        "num_hidden_layers": shape.n_layers,
        "num_attention_heads": shape.n_heads,
        "num_key_value_heads": shape.n_kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": max_positions,
        "rms_norm_eps": shape.rms_norm_eps,
        "rope_theta": theta,
        "rope_scaling": scaling,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": shape.eot,
        "eos_token_id": shape.eot,
        "pad_token_id": shape.eot,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": "float32",
    }
    if shape.no_rope_layers is not None or shape.windows is not None:
        rotates = shape.no_rope_layers or (1,) * shape.n_layers
        return {**config, **smollm3_fields(rotates, shape.windows)}
    return {**config, **_phi3_fields(shape)} if partial else config


def _phi3_fields(shape: Shape) -> dict[str, Any]:
    """What Phi-3's config adds: the rotated fraction of each head and its original length."""
    return {
        "partial_rotary_factor": shape.rotary_dims / shape.head_dim,
        "original_max_position_embeddings": shape.train_length,
        "sliding_window": None,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
    }


def smollm3_fields(
    no_rope_layers: tuple[int, ...], windows: tuple[int | None, ...] | None = None
) -> dict[str, Any]:
    """SmolLM3's entries for a hybrid or windowed run: Llama's decoder and weights, with the
    layers that do not rotate listed (transformers reads no_rope_layers per layer, 0 for NoPE)
    and each layer's attention type, "sliding_attention" with the one sliding_window (query i
    sees keys i - j < sliding_window, posenc's rule) or "full_attention"."""
    sizes = {w for w in windows or () if w is not None}
    return {
        "architectures": ["SmolLM3ForCausalLM"],
        "model_type": "smollm3",
        "no_rope_layers": list(no_rope_layers),
        "use_sliding_window": bool(sizes),
        "sliding_window": sizes.pop() if sizes else None,
        "layer_types": [
            "sliding_attention" if windows and windows[i] is not None else "full_attention"
            for i in range(len(no_rope_layers))
        ],
    }
