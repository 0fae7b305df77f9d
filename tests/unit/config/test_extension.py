"""`posenc extend`'s new run: the parent's config at S times its length, a constant rate, the
parent recorded; its model carries the method's frequencies; evaluation keeps the parent's
lengths."""

from __future__ import annotations

import copy
import functools
import math
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose, validate
from posenc_cli.config.extension import check_extension_eval, check_factor, child_config
from posenc_cli.config.run_config import typed
from posenc_cli.encodings.names import ROPE_SCALING_METHODS
from posenc_cli.encodings.rope_scaling import scaled_frequencies
from posenc_cli.engine.build import build_model

TINY = ["model=tiny", "train.context_length=16", "train.batch_size=4", "train.min_lr=1e-4"]
PARENT = Path("runs/parent")


@functools.cache
def composed(*overrides: str) -> DictConfig:
    return compose(list(overrides))


def child(*extend: str, parent: list[str] | None = None) -> DictConfig:
    """The new run of a TINY parent with these extend.* options (composed once each)."""
    base = copy.deepcopy(composed(*TINY, *(parent or [])))
    ext = composed(*TINY, *(f"extend.{o}" for o in extend)).extend
    return child_config(base, ext, PARENT, 20, "ab" * 32)


def test_the_new_run_trains_longer_at_a_constant_rate_and_records_its_parent() -> None:
    cfg = child("method=yarn", "factor=4", "steps=7", "warmup_steps=3")
    t = cfg.train
    assert (t.context_length, t.steps, t.warmup_steps) == (64, 7, 3)
    assert t.lr == t.min_lr == pytest.approx(1e-4)  # the parent's min_lr
    assert t.batch_size == 1  # 4 windows of 16 -> 1 window of 64: the same tokens per step
    ext = cfg.extend
    assert (ext.parent, ext.parent_step, ext.original_length) == (str(PARENT), 20, 16)
    assert typed(cfg).base_length() == 16 and typed(composed(*TINY)).base_length() == 16
    validate(cfg)


def test_explicit_rate_and_batch_are_kept() -> None:
    cfg = child("factor=2", "lr=5e-5", "batch_size=3")
    assert (cfg.train.lr, cfg.train.batch_size, cfg.train.context_length) == (5e-5, 3, 32)


def test_a_fractional_length_and_a_zero_rate_are_refused() -> None:
    with pytest.raises(PosencError, match=r"is 20.8 tokens"):
        child("factor=1.3")
    with pytest.raises(PosencError, match="extend.lr has no default"):
        child("factor=2", parent=["train.min_lr=0"])


def test_factor_1_is_continued_training_at_the_parents_length_and_batch() -> None:
    cfg = child("factor=1", "steps=7", "warmup_steps=3", "passkey_share=0.5")
    assert (cfg.train.context_length, cfg.train.batch_size) == (16, 4)
    ext = cfg.extend
    assert (ext.factor, ext.original_length, ext.passkey_share) == (1.0, 16, 0.5)
    assert typed(cfg).base_length() == 16
    validate(cfg)


@pytest.mark.parametrize("method", [m for m in ROPE_SCALING_METHODS if m != "none"])
def test_every_scaling_method_is_refused_at_factor_1(method: str) -> None:
    with pytest.raises(PosencError, match=f"extend.method={method} has nothing to extend"):
        check_factor(method, 1.0)
    check_factor(method, 1.5)
    check_factor("none", 1.0)


def test_dynamic_ntk_is_rescaled_by_each_evaluated_length() -> None:
    assert child("method=dynamic_ntk").eval.extrapolation.rope_scaling == "dynamic_ntk"
    assert child("method=yarn").eval.extrapolation.rope_scaling == "none"


def test_another_scaling_of_a_fine_tuned_run_is_refused() -> None:
    cfg = child("method=pi")
    cfg.eval.rope_scaling = "yarn"
    with pytest.raises(PosencError, match="fine-tuned with extend.method=pi"):
        check_extension_eval(cfg)
    cfg.eval.rope_scaling = "none"
    check_extension_eval(cfg)


@pytest.mark.parametrize("method", ["pi", "ntk", "dynamic_ntk", "yarn", "llama3"])
def test_the_model_is_built_with_the_methods_frequencies(method: str) -> None:
    enc = build_model(typed(child(f"method={method}", "factor=4")), 50).encoding
    want, attention = scaled_frequencies(
        method, enc.trained_inv_freq, enc.theta, enc.rotary_dims, 4.0, 16
    )
    torch.testing.assert_close(enc.inv_freq.double(), want.float().double())
    assert enc.attention_factor == pytest.approx(attention)
    assert attention == pytest.approx(1.0 if method != "yarn" else 0.1 * math.log(4) + 1)
    enc.extend_context("pi", 2.0, 16)
    enc.extend_context("none", 1.0, 16)  # what an evaluation restores: the fine-tuned ones
    torch.testing.assert_close(enc.inv_freq.double(), want.float().double())


def test_pi_divides_every_trained_frequency_by_the_factor() -> None:
    enc = build_model(typed(child("method=pi", "factor=4")), 50).encoding
    torch.testing.assert_close(enc.inv_freq, (enc.trained_inv_freq / 4).float())


def test_none_and_plain_runs_keep_the_trained_frequencies() -> None:
    for cfg in (child("method=none"), composed(*TINY)):
        enc = build_model(typed(cfg), 50).encoding
        torch.testing.assert_close(enc.inv_freq, enc.trained_inv_freq.float())


def test_the_encodings_of_layers_keep_the_parents_sizes() -> None:
    """CoPE named in model.layers has L + 1 positions by its YAML (a value that reads
    train.context_length): the child keeps the parent's 17 at twice the length and takes the
    parent's weights; ALiBi, with nothing derived from the length, extends and builds too."""
    parent = ["model.layers=[encoding,cope]"]
    cfg = child("method=pi", "factor=2", parent=parent)
    assert cfg.train.context_length == 32 and cfg.model.layer_encodings.cope.max_position == 17
    validate(cfg)
    parent_state = build_model(typed(composed(*TINY, *parent)), 50).state_dict()
    build_model(typed(cfg), 50).load_state_dict(parent_state)
    cfg = child("method=pi", "factor=2", parent=["model.layers=[encoding,alibi]"])
    assert list(cfg.model.layers) == ["encoding", "alibi"] and cfg.train.context_length == 32
    parent_state = build_model(typed(composed(*TINY, "model.layers=[encoding,alibi]")), 50)
    build_model(typed(cfg), 50).load_state_dict(parent_state.state_dict())
