"""A data source defined only here (its class below, its YAML written by the test) trains end
to end through the public plug-in interface: a DataSource subclass with its kind, found by
posenc without a list, and a data config naming that kind."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.config.groups import add_option, config_dir, remove_option
from posenc_cli.config.run_config import typed
from posenc_cli.data.config import DataConfig
from posenc_cli.data.sources import DataSource, open_corpus, source_classes
from posenc_cli.workflows.jobs import run_training
from tests.helpers.configs import FOUR_STEPS


class CountingSource(DataSource):
    """Documents of number words counting up from a random start: text with an order to learn,
    made on the fly, no file read."""

    kind = "toy_counting"
    describes = "generated counting text"

    def __init__(self, n_docs: int) -> None:
        rng = random.Random(0)
        words = "zero one two three four five six seven eight nine".split()
        self.docs = [
            " ".join(words[(start + i) % 10] for i in range(300))
            for start in (rng.randrange(10) for _ in range(n_docs))
        ]

    @classmethod
    def from_config(cls, data_cfg: DataConfig) -> CountingSource:
        return cls(n_docs=4 * data_cfg.val_every_nth)

    def train_segments(self) -> Iterator[str]:
        return (d for i, d in enumerate(self.docs) if i % 4)

    def tokenizer_segments(self) -> Iterator[str]:
        return self.train_segments()

    def val_segments(self) -> Iterator[str]:
        return (d for i, d in enumerate(self.docs) if i % 4 == 0)

    def documents(self) -> Iterator[str]:
        return iter(self.docs)

    def fingerprint(self, cache_dir: Path) -> str:
        return hashlib.blake2b("".join(self.docs).encode(), digest_size=16).hexdigest()


@pytest.fixture
def toy_option(tmp_path: Path) -> Iterator[None]:
    """data=toy: the shipped text YAML with the toy's kind, as a new source's YAML would be."""
    values: Any = OmegaConf.load(config_dir() / "data" / "text.yaml")
    values.name, values.kind, values.path = "toy", "toy_counting", None
    path = tmp_path / "toy.yaml"
    OmegaConf.save(values, path)
    add_option("data", "toy", path)  # posenc's option list, then Hydra's config store
    ConfigStore.instance().store(group="data", name="toy", node=values)
    yield
    remove_option("data", "toy")


def test_the_toy_source_is_found_and_trains(toy_option: None, tmp_path: Path) -> None:
    assert source_classes()["toy_counting"] is CountingSource
    cfg = compose([*FOUR_STEPS, "data=toy", "data.vocab_size=280", "eval.at_end=false"])
    assert isinstance(open_corpus(typed(cfg).data), CountingSource)
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")
    run_training(typed(cfg), run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 4 and metrics["final_val_loss"] > 0


def test_a_key_the_source_does_not_read_is_refused(toy_option: None, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("some text")
    with pytest.raises(PosencError) as caught:
        compose([*FOUR_STEPS, "data=toy", f"data.path={tmp_path / 'a.txt'}"])
    assert "data.path is set but data=toy reads generated counting text, not a file" in str(
        caught.value
    )
    assert "add data=text to use it" in str(caught.value)


def test_an_unknown_kind_is_one_line() -> None:
    with pytest.raises(PosencError, match="data.kind 'nosuch' is not a data source of posenc"):
        compose(["data.kind=nosuch"])
