"""Evaluation by intent: the default runs what the README promises, eval=quick is the same
evaluation on a smaller sample, and the other tasks run when asked."""

from __future__ import annotations

from omegaconf import OmegaConf

from posenc_cli.config.compose import compose


def test_the_default_evaluation_is_extrapolation_only() -> None:
    assert list(compose([]).eval.tasks) == ["extrapolation"]
    asked = compose(["eval.tasks=[extrapolation,retrieval]"])
    assert list(asked.eval.tasks) == ["extrapolation", "retrieval"]


def test_quick_differs_from_the_default_only_in_its_sample() -> None:
    default = OmegaConf.to_container(compose([]).eval, resolve=True)
    quick = OmegaConf.to_container(compose(["eval=quick"]).eval, resolve=True)
    assert quick["extrapolation"]["tokens"] == 32768 < default["extrapolation"]["tokens"]
    assert quick["extrapolation"]["tail_targets"] == 1024 < default["extrapolation"]["tail_targets"]
    for cfg in (default, quick):
        del cfg["extrapolation"]["tokens"], cfg["extrapolation"]["tail_targets"], cfg["tokens"]
    assert quick == default


def test_quick_takes_further_overrides() -> None:
    cfg = compose(["eval=quick", "eval.extrapolation.factors=[1,4]"])
    assert list(cfg.eval.extrapolation.factors) == [1, 4]
    assert cfg.eval.extrapolation.tokens == 32768
