"""eval.rope_scaling: each method evaluates a RoPE model with its own frequencies at every
length, records the factor it used, lands under its own key and leaves the model as trained."""

from __future__ import annotations

import pytest
import torch

from posenc_cli.evals.extrapolation_result import extrapolation
from posenc_cli.evals.keys import result_key

TRAIN_LEN = 16


def test_each_method_scores_differently_and_restores_the_model(
    config, model_for, val_ids, rt
) -> None:
    plain_cfg = config("eval.factors=[1,4]")
    model = model_for(plain_cfg)
    trained = model.encoding.inv_freq.clone()
    plain = extrapolation(model, val_ids(), TRAIN_LEN, plain_cfg.eval.extrapolation, rt)
    assert "rope_scaling" not in plain
    for method in ("pi", "ntk", "dynamic_ntk", "yarn", "llama3"):
        cfg = config("eval.factors=[1,4]", f"eval.rope_scaling={method}")
        result = extrapolation(model, val_ids(), TRAIN_LEN, cfg.eval.extrapolation, rt)
        assert (
            torch.equal(model.encoding.inv_freq, trained) and model.encoding.attention_factor == 1.0
        )
        assert result["rope_scaling"] == method
        if method == "dynamic_ntk":  # S = L'/L per length: nothing changes at 1x
            assert result["rope_factors"] == {"16": 1.0, "64": 4.0}
            assert result["ppl"]["16"] == pytest.approx(plain["ppl"]["16"], rel=1e-6)
        else:  # one S for every length: the longest / the trained length
            assert result["rope_factors"] == {"16": 4.0, "64": 4.0}
            assert result["ppl"]["16"] != pytest.approx(plain["ppl"]["16"], rel=1e-6)
        assert result["ppl"]["64"] != pytest.approx(plain["ppl"]["64"], rel=1e-6)


def test_an_explicit_factor_is_used_and_keyed(config, model_for, val_ids, rt) -> None:
    cfg = config("eval.factors=[1,4]", "eval.rope_scaling=pi", "eval.rope_factor=2")
    result = extrapolation(model_for(cfg), val_ids(), TRAIN_LEN, cfg.eval.extrapolation, rt)
    assert result["rope_factors"] == {"16": 2.0, "64": 2.0}
    saved = config().eval.extrapolation
    assert (
        result_key("extrapolation", None, cfg.eval.extrapolation, saved) == "extrapolation_x1-4_pi2"
    )
    assert (
        result_key(
            "extrapolation", None, config("eval.rope_scaling=yarn").eval.extrapolation, saved
        )
        == "extrapolation_yarn"
    )


def test_a_factor_equal_to_the_default_gets_the_default_key(config) -> None:
    saved = config().eval.extrapolation
    explicit = config("eval.rope_scaling=yarn", "eval.rope_factor=16").eval.extrapolation
    assert result_key("extrapolation", None, explicit, saved) == "extrapolation_yarn"


def test_dynamic_ntk_takes_transformers_factor(config, model_for, val_ids, rt) -> None:
    cfg = config("eval.factors=[1,4]", "eval.rope_scaling=dynamic_ntk", "eval.rope_factor=2")
    result = extrapolation(model_for(cfg), val_ids(), TRAIN_LEN, cfg.eval.extrapolation, rt)
    assert result["rope_factors"] == {"16": 1.0, "64": 7.0}  # 2·64/16 - (2 - 1)
    saved = config().eval.extrapolation
    assert (
        result_key("extrapolation", None, cfg.eval.extrapolation, saved)
        == "extrapolation_x1-4_dynamic_ntk2"
    )
    plain = config("eval.rope_scaling=dynamic_ntk", "eval.rope_factor=1").eval.extrapolation
    assert result_key("extrapolation", None, plain, saved) == "extrapolation_dynamic_ntk"
