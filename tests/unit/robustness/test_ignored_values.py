"""Class 9, values that used to be silently ignored or mislabelled: each is now one line before
anything is created when it cannot take effect, or honoured and recorded as what was used. (A
hand-edited perplexity in metrics.json is not an error but a run `posenc compare` skips with a
note: tests/unit/report/test_tampered_metrics.py. A bench whose cases all failed exits 1:
test_exports.py. A cache entry with changed meta is rebuilt: test_caches.py.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose

#: A run that would take seconds, were it not refused.
TINY = ["model=tiny", "train.steps=4", "train.warmup_steps=1", "device=cpu"]

#: (overrides, what the line says).
CASES = [
    (["data.path=a.txt"], "data.path is set but data=sotu reads its built-in corpus"),
    (["data.val_path=a.txt"], "data.val_path is set but data=sotu reads"),
    (
        ["eval.mode=sliding", "eval.stride=3000"],
        "eval.stride=3000 is longer than the longest evaluated length 2048",
    ),
    (
        ["eval.extrapolation.mode=sliding", "eval.extrapolation.stride=3000"],
        "eval.stride=3000 is longer than the longest evaluated length 2048",
    ),
    (
        ["eval.factors=[2,4]", "eval.mode=sliding", "eval.stride=513"],
        "longest evaluated length 512",
    ),
    (["eval.stride=16"], "eval.stride=16 has no effect with eval.mode=nonoverlapping"),
    (["eval.extrapolation.stride=16"], "eval.stride=16 has no effect"),
    (
        ["eval.tokens=1"],
        "eval.tokens=1 is less than one window of the shortest evaluated length 128",
    ),
    (["eval.extrapolation.tokens=127"], "eval.tokens=127 is less than one window"),
    (["eval.factors=[2,4]", "eval.tokens=255"], "shortest evaluated length 256"),
    (["train.warmup_steps=5"], "train.warmup_steps=5 is longer than the run (train.steps=4)"),
]


@pytest.mark.parametrize(("args", "expected"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_train_refuses_a_value_that_would_not_take_effect(
    args: list[str], expected: str, refused: Callable[..., str]
) -> None:
    assert expected in refused(["train", *TINY, *args])


def test_values_that_take_effect_or_harmless_defaults_still_compose() -> None:
    """A stride up to the longest length slides where it can (capped below it, each length's
    stride recorded); a budget above the shortest length scores it (longer lengths are skipped
    with the reason); a default warmup longer than a short run is honoured as configured."""
    for stride in (128, 1000, 2048):
        ex = compose(["eval.mode=sliding", f"eval.stride={stride}"]).eval.extrapolation
        assert (ex.mode, ex.stride) == ("sliding", stride)
    assert compose(["eval.tokens=128"]).eval.extrapolation.tokens == 128
    assert compose(["train.steps=100", "train.warmup_steps=100"]).train.warmup_steps == 100
    assert compose(["train.steps=4"]).train.warmup_steps == 100


def test_a_stride_a_saved_config_keeps_is_recorded_as_unused_outside_sliding() -> None:
    """`posenc eval RUN eval.mode=nonoverlapping` of a run evaluated with a sliding stride:
    the saved stride is not an error, and the result says no stride was used."""
    from posenc_cli.evals.extrapolation_result import length_record
    from posenc_cli.evals.run import apply_overrides

    saved = compose(["model=tiny", "eval.mode=sliding", "eval.stride=64"])
    cfg = apply_overrides(saved, ["eval.mode=nonoverlapping"])
    ex = cfg.eval.extrapolation
    assert (ex.mode, ex.stride) == ("nonoverlapping", 64)
    lengths = [128 * int(f) for f in ex.factors]
    assert length_record(ex, 128, lengths, {})["stride"] is None
    assert length_record(saved.eval.extrapolation, 128, lengths, {})["stride"] == 64
    with pytest.raises(PosencError, match="eval.stride=8 has no effect with eval.mode=nonover"):
        apply_overrides(saved, ["eval.mode=nonoverlapping", "eval.stride=8"])
