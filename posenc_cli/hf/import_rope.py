"""The rotary settings of a received config.json: plain RoPE, or LongRoPE (Ding et al. 2024,
Phi-3's context extension), as posenc settings.

A LongRoPE checkpoint becomes a RoPE run at its original length L (where transformers switches
from the short to the long rescale factors) whose evaluation is eval.rope_scaling=longrope
with the file's factors and S, so `posenc eval RUN` scores it as transformers runs it. Read as
transformers 5 reads a Llama-family config: L from the rope section (else
max_position_embeddings), S from its ``factor`` (else max_position_embeddings / L).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from posenc_cli.common.errors import PosencError
from posenc_cli.encodings.rope_scaling import longrope_attention
from posenc_cli.hf.fields import Fields

#: The rope types posenc imports: plain RoPE, and LongRoPE as its evaluation.
IMPORTED = ("default", "longrope")


def rope_settings(f: Fields, where: Path, head_dim: int) -> dict[str, Any]:
    """encoding.theta and train.context_length, plus the longrope evaluation for a LongRoPE
    checkpoint; any other scaled or partial rotary is refused."""
    rope = f.section("rope_parameters")
    scaling = f.section("rope_scaling")
    kind = rope.text("rope_type") or scaling.text("rope_type") or scaling.text("type") or "default"
    if kind not in IMPORTED:
        raise PosencError(
            f"{where} was trained with rope_type '{kind}'",
            "import a checkpoint with plain RoPE (rope_type default) or LongRoPE; posenc "
            "applies the other scalings at evaluation: eval.rope_scaling=…",
        )
    fraction = rope.number("partial_rotary_factor", f.number("partial_rotary_factor", 1.0))
    if fraction != 1.0:
        raise PosencError(
            f"{where} rotates part of each head (partial_rotary_factor={fraction})",
            "import a Llama checkpoint that rotates every dimension",
        )
    theta = rope.number("rope_theta", f.number("rope_theta", 10000.0, positive=True), positive=True)
    out: dict[str, Any] = {"encoding.theta": theta}
    longest = f.integer("max_position_embeddings")
    if kind == "default":
        return {**out, "train.context_length": longest}
    section = rope if rope.text("rope_type") else scaling
    return {**out, **longrope_settings(f, section, longest, head_dim // 2)}


def longrope_settings(f: Fields, section: Fields, longest: int, pairs: int) -> dict[str, Any]:
    """The original length L and the longrope evaluation: both factor sets (``pairs`` each),
    S (at least 1: at S <= 1 the attention factor is 1 either way, and the frequencies never
    depend on S)."""
    length = section.integer("original_max_position_embeddings", longest, lo=2)
    outside = f.data.get("original_max_position_embeddings")
    if outside is not None and outside != length:
        raise PosencError(
            f"{f.path}: original_max_position_embeddings={outside!r:.20} outside the rope "
            f"section, which transformers' Llama ignores (it uses {length})",
            "move it into rope_parameters, as transformers 5 saves it",
        )
    factor = section.number("factor", longest / length, positive=True)
    attention = section.number("attention_factor", longrope_attention(factor, length))
    if not math.isclose(attention, longrope_attention(factor, length), rel_tol=1e-9):
        raise PosencError(
            f"{f.path}: attention_factor={attention:g} replaces LongRoPE's "
            f"sqrt(1 + ln S / ln L) = {longrope_attention(factor, length):.6g}",
            "import a checkpoint that leaves attention_factor to LongRoPE's formula",
        )
    return {
        "train.context_length": length,
        "eval.rope_scaling": "longrope",
        "eval.rope_factor": max(factor, 1.0),
        "eval.rope_long_factor": section.factors("long_factor", pairs),
        "eval.rope_short_factor": section.factors("short_factor", pairs),
    }
