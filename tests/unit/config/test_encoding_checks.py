"""The composed config's encoding is checked against its class (config/encoding_checks.py):
what an experiment file or a hand-edited config can do that an override cannot."""

from __future__ import annotations

import pytest
from omegaconf import open_dict

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.config.encoding_checks import check_encoding


def test_a_parameter_the_encoding_does_not_have_is_refused() -> None:
    cfg = compose(["encoding=rope"])
    with open_dict(cfg):
        cfg.encoding.gamma = 0.4  # xpos's, not rope's
    with pytest.raises(PosencError, match="encoding 'rope' has no parameter 'gamma'"):
        check_encoding(cfg)


def test_a_renamed_encoding_keeps_its_rules_and_must_name_a_posenc_class() -> None:
    cfg = compose(["encoding=rope"])
    cfg.encoding.name = "my_rope"
    check_encoding(cfg)
    cfg.encoding.theta = -1.0
    with pytest.raises(PosencError, match="encoding.theta=-1.0 is not a number > 0"):
        check_encoding(cfg)
    cfg.encoding._target_ = "os.system"
    with pytest.raises(PosencError, match="'os.system' is not one of posenc's encodings"):
        check_encoding(cfg)


def test_the_class_not_the_config_holds_the_rules() -> None:
    """A ``checks`` section (what configs carried before the rules moved to the class) is
    ignored: no config can loosen a rule."""
    cfg = compose(["encoding=rope"])
    with open_dict(cfg):
        cfg.encoding.checks = {"theta": "number < 0"}
    cfg.encoding.theta = -1.0
    with pytest.raises(PosencError, match="is not a number > 0"):
        check_encoding(cfg)
