"""import-cs336 refuses what it cannot import faithfully: a setting it would save unread
(train.threads would later keep `posenc eval` from running the model) and weights that are not
floating point (cast to float32 they would be another model) — one line, nothing created."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.unit.cs336.test_import_export import (
    REQUIRED,
    import_cs336,
    save_checkpoint,
    write_tokenizer,
)

SETTABLE = (
    "set only model.n_heads, encoding.theta, train.context_length, eval.*, data.*, seed, "
    "hydra.run.dir"
)
State = dict[str, torch.Tensor]


def as_dtype(name: str, dtype: torch.dtype) -> Callable[[State], State]:
    return lambda s: {**s, name: s[name].to(dtype)}


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


CASES: dict[str, tuple[Callable[[State], State], list[str], str]] = {
    "threads": (lambda s: s, ["train.threads=1000"], "does not take 'train.threads'"),
    "nproc": (lambda s: s, ["train.nproc=2"], "does not take 'train.nproc'"),
    "device": (lambda s: s, ["device=cpu"], "does not take 'device'"),
    "model group": (lambda s: s, ["model=tiny"], "does not take 'model' (the checkpoint fixes"),
    "kv heads": (lambda s: s, ["model.n_kv_heads=2"], "does not take 'model.n_kv_heads'"),
    "int64 embedding": (
        as_dtype("token_embeddings.weight", torch.int64),
        [],
        "token_embeddings.weight is stored as torch.int64, not floating point",
    ),
    "bool gain": (
        as_dtype("layers.1.ln2.weight", torch.bool),
        [],
        "layers.1.ln2.weight is stored as torch.bool, not floating point",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_cannot_be_imported_faithfully_is_one_line_and_creates_nothing(
    case: str, tmp_path: Path, cs336: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    change, extra, says = CASES[case]
    ckpt = save_checkpoint(tmp_path, change(cs336["random_state"]()), "save_checkpoint")
    files = (ckpt, *write_tokenizer(tmp_path, cs336, "gpt2"))
    before = tree(tmp_path)
    res = import_cs336(files, "run", tmp_path, monkeypatch, [*REQUIRED, *extra])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error: "), lines
    assert says in lines[0] and " — " in lines[0], lines[0]
    assert res.stdout == "" and tree(tmp_path) == before
    if extra:  # the accepted keys the line lists are the ones taken
        assert lines[0].endswith(SETTABLE), lines[0]


def test_the_keys_the_refusal_lists_are_taken(
    tmp_path: Path, cs336: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = save_checkpoint(tmp_path, cs336["random_state"](), "bare")
    files = (ckpt, *write_tokenizer(tmp_path, cs336, "gpt2"))
    taken = ["eval=default", "eval.tokens=128", "data.val_every_nth=10", "seed=3"]
    res = import_cs336(files, "run", tmp_path, monkeypatch, [*REQUIRED, *taken])
    assert res.exit_code == 0, res.output
    from posenc_cli.config.rundir import load_run_config

    cfg = load_run_config(tmp_path / "run")
    assert (cfg.eval.tokens, cfg.data.val_every_nth, cfg.seed) == (128, 10, 3)
