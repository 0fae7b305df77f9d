"""The encodings model.layers names besides the run's own: each with its configs/encoding/
defaults, as the run's encoding section would hold them were it that encoding.

A layer's other encoding has no section of its own in the config (its parameters are its
YAML's), so a run's saved config names it only in model.layers; its YAML's ``${…}`` values
(CoPE's ``max_position`` reads train.context_length) are resolved against the run's length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.layer_pattern import LAYER_WORDS
from posenc_cli.config.groups import option_file
from posenc_cli.config.resolvers import register


def other_encodings(pattern: Sequence[str] | None, run_encoding: str) -> list[str]:
    """The encodings ``pattern`` names that are neither the run's nor a layer word, in order."""
    named = [str(word) for word in pattern or ()]
    others = [w for w in named if w not in LAYER_WORDS and w != run_encoding]
    return list(dict.fromkeys(others))


def layer_encoding_config(name: str, train_length: int | None) -> dict[str, Any]:
    """configs/encoding/<name>.yaml, its values resolved for a run of ``train_length`` tokens."""
    register()
    section = cast(DictConfig, OmegaConf.load(option_file("encoding", name)))
    root = OmegaConf.create({"train": {"context_length": train_length}, "encoding": section})
    return cast(dict[str, Any], OmegaConf.to_container(root.encoding, resolve=True))


def reads_run_length(name: str) -> bool:
    """Whether the encoding's YAML derives a value from the run (CoPE's largest position from
    train.context_length): in a run `posenc extend` makes, such a value would follow the longer
    length and no longer fit the parent's weights."""
    return "${" in option_file("encoding", name).read_text(encoding="utf-8")
