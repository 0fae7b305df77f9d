"""`posenc eval RUN eval=NAME` builds the eval section itself: it must equal what Hydra composes
for `posenc train eval=NAME`, including an option that lists another beneath it (quick over
default)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from posenc_cli.config.compose import compose
from posenc_cli.config.eval_sections import eval_option
from posenc_cli.config.groups import group_options


@pytest.mark.parametrize("name", group_options("eval"))
def test_an_eval_option_is_what_hydra_composes(name: str) -> None:
    composed = OmegaConf.to_container(compose([f"eval={name}"]).eval, resolve=True)
    built = OmegaConf.to_container(eval_option(name), resolve=True)
    assert built == composed


def test_quick_keeps_the_defaults_tasks_and_samples_less() -> None:
    quick, default = eval_option("quick"), eval_option("default")
    assert list(quick.tasks) == list(default.tasks)
    assert quick.extrapolation.tokens == 32768 < (default.extrapolation.tokens or 10**9)
