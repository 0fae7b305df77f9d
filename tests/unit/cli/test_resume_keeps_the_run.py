"""`posenc resume` keeps the run's own settings and its own tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose


def test_resume_changes_only_the_keys_it_is_given(tmp_path: Path) -> None:
    from posenc_cli.engine.resume import resume_config

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    saved = compose(["model=tiny", "train.threads=1"])
    OmegaConf.save(saved, run / ".hydra" / "config.yaml")
    cfg = resume_config(run, compose(["device=cpu"]), ["device=cpu"])
    assert cfg.device == "cpu" and cfg.train.threads == 1  # not reset to the default (null)


def test_a_resumed_run_must_see_its_own_tokenizer(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from posenc_cli.workflows.jobs import _keep_tokenizer

    cached = tmp_path / "cached.json"
    cached.write_text('{"model": 1}')
    run = tmp_path / "run"
    data = SimpleNamespace(tokenizer_path=cached)
    _keep_tokenizer(run, data, True)  # a new run keeps a copy
    assert (run / "tokenizer.json").read_text() == '{"model": 1}'
    _keep_tokenizer(run, data, True)  # the same one again: fine, untouched
    cached.write_text('{"model": 2}')
    with pytest.raises(PosencError, match="tokenizer differs"):
        _keep_tokenizer(run, data, True)
    assert (run / "tokenizer.json").read_text() == '{"model": 1}'


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.windows=[4,null]", "model.windows is null in the checkpoint's config but [4,null]"),
        ("model.layers=[encoding,none]", "but [encoding,none] was asked"),
        ("model.windows=null", None),
    ],
)
def test_a_refused_change_is_written_as_an_override_writes_it(
    tmp_path: Path, override: str, message: str | None
) -> None:
    """Python's None or ['a'] could not be typed back: the message writes null and [a,b]."""
    from posenc_cli.engine.resume import resume_config

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(compose(["model=tiny"]), run / ".hydra" / "config.yaml")
    if message is None:  # the same value as the run's: nothing to refuse
        resume_config(run, compose(["model=tiny", override]), [override])
        return
    with pytest.raises(PosencError) as err:
        resume_config(run, compose(["model=tiny", override]), [override])
    assert message in err.value.what
    assert "None" not in err.value.what and "['" not in err.value.what
