"""Class 2, tokenizer files: the foreign tokenizer files and checkpoint given to
`posenc import-cs336` are validated as strictly as checkpoints; each inconsistency is one line
naming the file and its first offending entry, exit code 2, and no run directory. (Class 3's
infinite `iteration` arrives this way too, so it is a row here.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.rundir import unlock_run_dir
from posenc_cli.cs336.gpt2_bytes import to_token

TEXT = "the cat sat on the mat. the dog sat on the log!<|endoftext|>A cat met 42 mats." * 3
REQUIRED = ["model.n_heads=4", "encoding.theta=10000", "train.context_length=16"]
Files = dict[str, Any]


def files(cs336: dict[str, Any]) -> Files:
    """The vocab (token -> id), merges and checkpoint of one consistent CS336 model."""
    vocab, merges = cs336["train_bpe"](TEXT, 20)
    return {
        "vocab": {to_token(b): i for i, b in vocab.items()},
        "merges": [(to_token(a), to_token(b)) for a, b in merges],
        "state": cs336["random_state"](),
        "iteration": 7,
        "vocab_text": None,
    }


def share_id(f: Files) -> None:
    f["vocab"]["the"] = f["vocab"]["at"] if "at" in f["vocab"] else 0


def twice(f: Files) -> None:
    body = json.dumps(f["vocab"])
    f["vocab_text"] = body[:-1] + ', "Ġ": 9999}'


def nan_weight(f: Files) -> None:
    f["state"]["layers.1.ffn.w2.weight"][0, 0] = float("nan")


def beyond(f: Files) -> None:
    f["vocab"] = {**f["vocab"], **{f"X{i}": i for i in range(len(f["vocab"]), 301)}}


CASES: dict[str, tuple[Callable[[Files], None], str]] = {
    "two tokens share an id": (share_id, "share the id"),
    "an id written as true": (lambda f: f["vocab"].update({"!": True}), "not an integer"),
    "ids with a gap": (lambda f: f["vocab"].update({"!": 5000}), "not contiguous from 0"),
    "a token given twice": (twice, "appears twice"),
    "an id beyond the embedding": (beyond, "300 rows"),
    "no merges": (lambda f: f.update(merges=[]), "there are no merges"),
    "a merge of unknown parts": (
        lambda f: f["merges"].append(("zz", "q")),
        "uses 'zz', which is not in the vocabulary",
    ),
    "the special token missing": (
        lambda f: f["vocab"].update({"<|x|>": f["vocab"].pop("<|endoftext|>")}),
        "special token '<|endoftext|>' is not in the vocabulary",
    ),
    "NaN weights": (nan_weight, "layers.1.ffn.w2.weight hold NaN"),
    "a negative iteration": (lambda f: f.update(iteration=-3), "iteration -3"),
    "an infinite iteration": (lambda f: f.update(iteration=float("inf")), "iteration inf"),
}


def write(f: Files, tmp: Path) -> list[str]:
    (tmp / "vocab.json").write_text(f["vocab_text"] or json.dumps(f["vocab"]))
    (tmp / "merges.txt").write_text("".join(f"{a} {b}\n" for a, b in f["merges"]))
    torch.save({"model": f["state"], "iteration": f["iteration"]}, tmp / "model.pt")
    return [
        "import-cs336",
        str(tmp / "model.pt"),
        "--vocab",
        str(tmp / "vocab.json"),
        "--merges",
        str(tmp / "merges.txt"),
        *REQUIRED,
        "hydra.run.dir=run",
    ]


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_inconsistent_foreign_file_is_one_line_naming_it(
    case: str, workdir: Path, refused: Callable[..., str], cs336: dict[str, Any]
) -> None:
    change, expected = CASES[case]
    f = files(cs336)
    change(f)
    inputs = workdir / "in"
    inputs.mkdir()
    assert expected in refused(write(f, inputs))


def test_the_consistent_files_import(
    tmp_path: Path, cs336: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, write(files(cs336), tmp_path))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "run" / "checkpoints" / "last.pt").is_file()


def test_an_imported_model_is_never_evaluated_at_byte_level(
    workdir: Path, refused: Callable[..., str], cs336: dict[str, Any]
) -> None:
    """The import refuses an empty merges file; a tokenizer.json whose merges were removed
    afterwards is refused by the evaluation, which would otherwise score bytes."""
    inputs = workdir / "in"
    inputs.mkdir()
    res = CliRunner().invoke(app, write(files(cs336), inputs))
    assert res.exit_code == 0, res.output
    unlock_run_dir(workdir / "run")  # held for the life of a process: this test is one process
    saved = workdir / "run" / "tokenizer.json"
    tokenizer = json.loads(saved.read_text())
    tokenizer["model"]["merges"] = []
    saved.write_text(json.dumps(tokenizer))
    args = ["eval", "run", "data=text", "data.path=a.txt", "eval.tokens=64"]
    assert "beyond the bytes but no merges" in refused(args)
