"""Which metrics.json key (and TensorBoard tag prefix) an evaluation's result goes under.

``<task>`` alone is the run's own data scored with its own eval settings (what training wrote;
re-running it reproduces it). Anything else gets a suffix per difference, in this order:
``_<data label>`` for other text, ``_<protocol>`` (``sliding8``, ``sliding``, ``nonoverlapping``)
for another mode or stride, ``_t<tokens>`` for another eval.tokens, ``_x<f1-f2-..>`` for other
eval.factors, ``_<rope scaling>`` (``_yarn``; ``_yarn4`` with eval.rope_factor=4; ``_longrope``,
whose rescale factors the result records rather than the key) — e.g.
``extrapolation_sliding8``, ``extrapolation_text_other_x1-16``, ``extrapolation_pi`` — so other
evaluations never overwrite the main curve (eval.position_buckets changes only the curve's
resolution and adds no suffix), then ``_<precision>`` and ``_<device>`` where they differ from
the run's own. The data label is data.name, plus the file's stem when the name is the generic
``text`` or the run's own data name, plus 8 hex digits of the text's content hash (two files
of the same name never share a key); set data.name=NAME to choose the name.
"""

from __future__ import annotations

import re
from pathlib import Path

from posenc_cli.config.run_config import RunConfig
from posenc_cli.config.schema import ExtrapolationConfig


def data_label(cfg: RunConfig, saved: RunConfig, digest: str) -> str:
    """data.name (plus the file's stem for the generic names) and a short content hash, so
    two files of the same name never share a key."""
    name = cfg.data.name
    source = cfg.data.val_path or cfg.data.path
    if name in ("text", saved.data.name) and source:
        name = f"{name}_{Path(source).stem}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{name}_{digest}")


#: The name of the protocol free of the early-token effect (evals/scoring.py), scored beside
#: eval.mode by every extrapolation evaluation.
TAIL = "tail"


def protocol(ev: ExtrapolationConfig) -> str:
    """The name of eval.mode's protocol: nonoverlapping, sliding or sliding<stride>."""
    if ev.mode != "sliding":
        return ev.mode
    return "sliding" if ev.stride is None else f"sliding{ev.stride}"


def result_key(
    task: str,
    label: str | None,
    ev: ExtrapolationConfig,
    saved_ev: ExtrapolationConfig,
    identity: list[str] | None = None,
) -> str:
    """``task``, plus the data label, every scoring setting that differs from the run's, and
    the precision or device where they differ from the run's (``identity``)."""
    parts = [task] if label is None else [task, label]
    if protocol(ev) != protocol(saved_ev):
        parts.append(protocol(ev))
    if ev.tokens != saved_ev.tokens:
        parts.append(f"t{ev.tokens}")
    factors = sorted(set(ev.factors))
    if factors != sorted(set(saved_ev.factors)):
        parts.append("x" + "-".join(map(str, factors)))
    method = ev.rope_scaling
    if method != "none":  # a factor equal to the default (the largest eval factor) adds nothing
        factor = ev.rope_factor
        usual = 1.0 if method == "dynamic_ntk" else float(max(factors))
        default = factor is None or factor == usual
        parts.append(method if default else f"{method}{factor:g}")
    return "_".join([*parts, *(identity or [])])
