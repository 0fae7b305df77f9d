"""import-hf reads someone else's files: every malformed field, dtype, shard path, special
file and oversized model is one line naming the file and the field, and nothing is created."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.unit.hf.test_import import invoke, save_model

pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")


def with_config(**changes: object) -> Callable[[Path], None]:
    """Damage: config.json with ``changes`` merged in."""

    def damage(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **changes}))

    return damage


def deep_brackets(folder: Path) -> None:
    (folder / "config.json").write_text("[" * 200_000)


def integer_weights(folder: Path) -> None:
    path = folder / "model.safetensors"
    state = safetensors_torch.load_file(str(path))
    state["model.norm.weight"] = state["model.norm.weight"].to(torch.int64)
    safetensors_torch.save_file(state, str(path), metadata={"format": "pt"})


def index_naming(name: object) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        index = {"metadata": {}, "weight_map": {"lm_head.weight": name}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))

    return damage


def fifo_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")


def far_token_id(folder: Path) -> None:
    """One token's id moved to 100,000: still 300 tokens, but an id no embedding row holds."""
    tok = json.loads((folder / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    vocab[next(t for t, i in vocab.items() if i == 100)] = 100_000
    (folder / "tokenizer.json").write_text(json.dumps(tok))


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (with_config(tie_word_embeddings="false"), "tie_word_embeddings is 'false', not true or"),
        (with_config(num_key_value_heads="2"), "num_key_value_heads is '2', not an integer"),
        (with_config(num_key_value_heads=3), "not a divisor of num_attention_heads=4"),
        (with_config(rms_norm_eps="x"), "rms_norm_eps is 'x', not a number"),
        (with_config(rms_norm_eps=-1.0), "rms_norm_eps is -1.0, not a finite number > 0"),
        (with_config(rms_norm_eps=None), "rms_norm_eps is None, not a finite number > 0"),
        (
            with_config(max_position_embeddings=10**30),
            "train.context_length=1000000000000000000000000000000 is too large",
        ),
        (with_config(partial_rotary_factor="abc"), "partial_rotary_factor is 'abc', not a number"),
        (with_config(rope_parameters="default"), "rope_parameters is 'default', not an object"),
        (with_config(rope_parameters=["x"]), "rope_parameters is ['x'], not an object"),
        (with_config(rope_scaling="yarn"), "rope_scaling is 'yarn', not an object"),
        (with_config(hidden_size=True), "hidden_size is True, not an integer >= 1"),
        (with_config(model_type=7), "model_type is 7, not a string"),
        (deep_brackets, "nests deeper than any model config"),
        (with_config(num_hidden_layers=1_000_000), "importing it needs about"),
        (integer_weights, "model.norm.weight is stored as I64, not floating point"),
        (index_naming("../elsewhere.safetensors"), "not a file of the model folder"),
        (index_naming("/etc/passwd"), "not a file of the model folder"),
        (index_naming(5), "weight_map names 5, not a file of the model folder"),
        (fifo_weights, "model.safetensors is not a regular file"),
        (far_token_id, "up to id 100000, but the model's embedding has 320 rows"),
    ],
    ids=lambda v: v if isinstance(v, str) else getattr(v, "__name__", "damage"),
)
def test_a_malformed_foreign_file_is_one_line_and_creates_nothing(
    damage: Callable[[Path], None], says: str, tmp_path: Path, text: str
) -> None:
    folder = save_model("llama", tmp_path / "llama", text)
    damage(folder)
    before = sorted(p.name for p in folder.iterdir())
    code, out = invoke("import-hf", str(folder), f"hydra.run.dir={tmp_path / 'run'}")
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1, out
    assert lines[0].startswith("posenc: error:") and says in lines[0], lines[0]
    assert " — " in lines[0]
    assert not (tmp_path / "run").exists()
    assert sorted(p.name for p in folder.iterdir()) == before
