"""eval.rope_scaling=longrope: each evaluated length gets the short or the long rescale factors
(the long ones above the training length, as transformers switches them), the result records
both sets and the set each length used, lands under its own key, and leaves the model as
trained."""

from __future__ import annotations

import math

import pytest
import torch

from posenc_cli.evals.context_extension import context_extension
from posenc_cli.evals.extrapolation_result import extrapolation
from posenc_cli.evals.keys import result_key
from posenc_cli.report.extension_rows import variant_label

TRAIN_LEN = 16
#: model=tiny rotates 8 pairs per head.
LONG = [1.0, 1.0, 1.5, 2.0, 3.0, 4.0, 4.0, 5.0]
SHORT = [1.0, 1.0, 1.0, 1.1, 1.2, 1.2, 1.3, 1.3]


def sets(long: list[float] = LONG, short: list[float] = SHORT) -> tuple[str, ...]:
    return (
        "eval.rope_scaling=longrope",
        f"eval.rope_long_factor={long}",
        f"eval.rope_short_factor={short}",
    )


def test_each_length_gets_its_set_and_the_model_is_restored(config, model_for) -> None:
    cfg = config("eval.factors=[1,4]", *sets())
    model = model_for(cfg)
    enc = model.encoding
    trained = enc.inv_freq.clone()
    with context_extension(model, cfg.eval.extrapolation, TRAIN_LEN, 4 * TRAIN_LEN) as prepare:
        for length, rescale in [(TRAIN_LEN, SHORT), (TRAIN_LEN + 1, LONG), (64, LONG)]:
            prepare(length)
            want = trained.double() / torch.tensor(rescale, dtype=torch.float64)
            torch.testing.assert_close(enc.inv_freq.double(), want, rtol=1e-6, atol=0)
            assert enc.attention_factor == pytest.approx(math.sqrt(1 + math.log(4) / math.log(16)))
    assert torch.equal(enc.inv_freq, trained) and enc.attention_factor == 1.0


def test_the_result_records_both_sets_and_which_each_length_used(
    config, model_for, val_ids, rt
) -> None:
    cfg = config("eval.factors=[1,4]", *sets())
    plain_cfg = config("eval.factors=[1,4]")
    model = model_for(cfg)
    plain = extrapolation(model, val_ids(), TRAIN_LEN, plain_cfg.eval.extrapolation, rt)
    result = extrapolation(model, val_ids(), TRAIN_LEN, cfg.eval.extrapolation, rt)
    assert result["rope_scaling"] == "longrope"
    assert result["rope_factors"] == {"16": 4.0, "64": 4.0}
    assert (result["rope_long_factor"], result["rope_short_factor"]) == (LONG, SHORT)
    assert result["rope_rescale"] == {"16": "short", "64": "long"}
    for length in ("16", "64"):
        assert result["ppl"][length] != pytest.approx(plain["ppl"][length], rel=1e-6)


def test_unit_factors_at_s_1_are_plain_rope(config, model_for, val_ids, rt) -> None:
    ones = [1.0] * 8
    cfg = config("eval.factors=[1,2]", *sets(ones, ones), "eval.rope_factor=1")
    model = model_for(cfg)
    result = extrapolation(model, val_ids(), TRAIN_LEN, cfg.eval.extrapolation, rt)
    plain = extrapolation(
        model, val_ids(), TRAIN_LEN, config("eval.factors=[1,2]").eval.extrapolation, rt
    )
    for length in ("16", "32"):
        assert result["ppl"][length] == pytest.approx(plain["ppl"][length], rel=1e-6)


def test_longrope_has_its_own_key_and_label(config) -> None:
    saved = config().eval.extrapolation
    default = config(*sets()).eval.extrapolation
    assert result_key("extrapolation", None, default, saved) == "extrapolation_longrope"
    explicit = config(*sets(), "eval.rope_factor=32").eval.extrapolation
    key = result_key("extrapolation", None, explicit, saved)
    assert key == "extrapolation_longrope32"
    assert variant_label({key: {"rope_scaling": "longrope"}}, key) == "longrope x32"


def test_the_short_names_and_the_section_are_one_key(config) -> None:
    flat = config(*sets()).eval.extrapolation
    section = config(
        "eval.extrapolation.rope_scaling=longrope",
        f"eval.extrapolation.rope_long_factor={LONG}",
        f"eval.extrapolation.rope_short_factor={SHORT}",
    ).eval.extrapolation
    assert flat == section and flat.rope_long_factor == LONG
