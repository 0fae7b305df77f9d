"""`posenc eval`'s rules: which overrides it takes, the result keys, the pinned precision."""

from __future__ import annotations

import pytest

from posenc_cli.common.errors import PosencError
from posenc_cli.config.run_config import typed
from posenc_cli.evals.keys import result_key
from posenc_cli.evals.run import apply_overrides, pin_precision

TASK = "extrapolation"


def test_eval_overrides_are_restricted(composed) -> None:
    saved = composed()
    with pytest.raises(PosencError, match="cannot change 'model.d_model'"):
        apply_overrides(saved, ["model.d_model=64"])
    cfg = typed(apply_overrides(saved, ["eval.mode=sliding", "eval.stride=8", "device=cpu"]))
    ev, own = cfg.eval.extrapolation, typed(saved).eval.extrapolation
    assert ev.mode == "sliding" and cfg.model.d_model == saved.model.d_model
    assert result_key(TASK, None, ev, own) == "extrapolation_sliding8"
    assert result_key(TASK, "text_other", own, own) == "extrapolation_text_other"
    assert result_key(TASK, None, own, own) == "extrapolation"
    assert result_key(TASK, None, own, own, ["fp32"]) == "extrapolation_fp32"
    quick = typed(apply_overrides(saved, ["eval.factors=[16,1]", "eval.tokens=1024"]))
    assert result_key(TASK, None, quick.eval.extrapolation, own) == "extrapolation_t1024_x1-16"


def test_eval_uses_the_precision_the_run_used_unless_told_otherwise(composed) -> None:
    """`auto` means bf16 on one machine and fp32 on another: re-evaluation pins what the run
    recorded in metrics.json, so it reproduces the run's numbers; train.precision=... wins."""
    saved = composed()
    saved.train.precision = "auto"
    cfg = typed(apply_overrides(saved, []))
    pin_precision(cfg, {"precision": "fp32"}, [])
    assert cfg.train.precision == "fp32"
    cfg = typed(apply_overrides(saved, ["train.precision=bf16"]))
    pin_precision(cfg, {"precision": "fp32"}, ["train.precision=bf16"])
    assert cfg.train.precision == "bf16"
    cfg = typed(apply_overrides(saved, []))
    pin_precision(cfg, {}, [])  # nothing recorded: auto stays auto
    assert cfg.train.precision == "auto"
    with pytest.raises(PosencError, match="cannot change 'train.steps'"):
        apply_overrides(saved, ["train.steps=5"])
