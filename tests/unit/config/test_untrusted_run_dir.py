"""A run directory from someone else chooses neither the class that is built nor where files go."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.config.rundir import load_run_config
from posenc_cli.encodings.registry import build_encoding, encoding_class
from posenc_cli.engine import checkpoint


def saved_run(tmp_path: Path, **changes: object) -> Path:
    cfg = OmegaConf.to_container(compose(["model=tiny"]))
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        cfg[section][key] = value
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(cfg), run / ".hydra" / "config.yaml")
    return run


@pytest.mark.parametrize(
    "target",
    [
        "logging.FileHandler",
        "subprocess.Popen",
        "posenc_cli.encodings.rope.torch",
        "posenc_cli.encodings.rope.PosencError",
    ],
)
def test_only_posenc_encoding_classes_can_be_named(target: str) -> None:
    with pytest.raises(PosencError, match="not one of posenc's encodings|does not exist"):
        encoding_class(target)


def test_a_saved_target_is_ignored_and_the_encoding_mapped_by_name(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    run = saved_run(tmp_path, encoding___target_="logging.FileHandler")
    cfg = load_run_config(run)
    assert cfg.encoding._target_ == "posenc_cli.encodings.rope.RotaryEncoding"
    run = saved_run(
        tmp_path / "b", encoding___target_="logging.FileHandler", encoding__filename=str(marker)
    )
    with pytest.raises(PosencError, match="unknown or non-plain parameter 'filename'"):
        load_run_config(run)
    assert not marker.exists()


def test_a_saved_cache_dir_is_replaced_by_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSENC_CACHE", str(tmp_path / "mine"))
    cfg = load_run_config(saved_run(tmp_path, data__cache_dir="/somewhere/else"))
    assert cfg.data.cache_dir == str(tmp_path / "mine")


@pytest.mark.parametrize("override", ["data.name=../../x", "encoding.name=../../x"])
def test_path_components_are_validated(override: str) -> None:
    with pytest.raises(PosencError, match="not a plain name"):
        compose([override])


class _Payload:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {os.environ['POSENC_MARKER']}",))


def test_a_malicious_checkpoint_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran"
    monkeypatch.setenv("POSENC_MARKER", str(marker))
    path = tmp_path / "last.pt"
    torch.save({"model": {}, "payload": _Payload()}, path)
    with pytest.raises(PosencError, match="damaged or unsafe"):
        checkpoint.load(path)
    assert not marker.exists()


def test_the_built_encoding_knows_its_config_name() -> None:
    cfg = compose(["encoding=learned", "encoding.max_len=8", "train.context_length=8"])
    enc = build_encoding(cfg.encoding, 32, 4, 1)
    with pytest.raises(PosencError, match="encoding 'learned' is defined for at most 8"):
        enc.check_length(9)


BOMB = (
    "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
    )
    + "encoding: {name: rope}\ndata: {name: sotu}\n"
)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (BOMB, "72 YAML aliases, more than posenc reads"),
        ("encoding: {name: rope}\n" + "#" * (2 << 20) + "\n", "it is larger than 1,048,576 bytes"),
    ],
    ids=["alias-bomb", "oversized"],
)
def test_a_hostile_saved_config_is_refused_before_it_is_expanded(
    tmp_path: Path, text: str, says: str
) -> None:
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(text)
    with pytest.raises(PosencError, match=f"cannot be read \\({says}") as refused:
        load_run_config(run)
    assert "restore the run's .hydra/config.yaml" in str(refused.value)
