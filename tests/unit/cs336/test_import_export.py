"""Importing a CS336 model and tokenizer, and exporting a posenc run back."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.cs336.bpe_files import build_tokenizer, read_merges, read_vocab
from posenc_cli.cs336.gpt2_bytes import to_token
from posenc_cli.engine import checkpoint
from posenc_cli.engine.build import build_model
from tests.helpers.locks import locked_elsewhere

TEXT = (
    "the cat sat on the mat. the dog sat on the log!<|endoftext|>A cat, a dog and 42 mats "
    "met at the mat's edge.<|endoftext|>"
) * 3
REQUIRED = ["model.n_heads=4", "encoding.theta=10000", "train.context_length=16"]


def write_tokenizer(tmp: Path, cs336: dict[str, Any], form: str) -> tuple[Path, Path]:
    vocab, merges = cs336["train_bpe"](TEXT, 30)
    vocab = {**vocab, **{i: bytes([65 + i % 26]) * (2 + i) for i in range(len(vocab), 300)}}
    if form == "pickle":
        (tmp / "vocab.pkl").write_bytes(pickle.dumps(vocab))
        (tmp / "merges.pkl").write_bytes(pickle.dumps(merges))
        return tmp / "vocab.pkl", tmp / "merges.pkl"
    (tmp / "vocab.json").write_text(json.dumps({to_token(b): i for i, b in vocab.items()}))
    (tmp / "merges.txt").write_text(
        "#version: 0.2\n" + "".join(f"{to_token(a)} {to_token(b)}\n" for a, b in merges)
    )
    return tmp / "vocab.json", tmp / "merges.txt"


def save_checkpoint(tmp: Path, state: dict[str, torch.Tensor], form: str) -> Path:
    path = tmp / f"{form}.pt"
    if form == "bare":
        torch.save(state, path)
    elif form == "compiled":
        torch.save(
            {
                "model": {f"_orig_mod.{k}": v for k, v in state.items()},
                "optimizer": {},
                "iteration": 7,
            },
            path,
        )
    else:
        torch.save({"model": state, "optimizer": {"state": {}}, "iteration": 7}, path)
    return path


def invoke(args: list[str], tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp)
    monkeypatch.setenv("POSENC_CACHE", str(tmp / "cache"))
    return CliRunner().invoke(app, args)


def import_cs336(
    files: tuple[Path, Path, Path],
    run: str,
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str] = REQUIRED,
) -> Any:
    """`posenc import-cs336` of (checkpoint, vocab, merges) into the run directory ``run``."""
    ckpt, vocab, merges = files
    command = ["import-cs336", str(ckpt), "--vocab", str(vocab), "--merges", str(merges)]
    return invoke([*command, *args, f"hydra.run.dir={run}"], tmp, monkeypatch)


@pytest.mark.parametrize("ckpt_form", ["bare", "save_checkpoint", "compiled"])
@pytest.mark.parametrize("tok_form", ["gpt2", "pickle"])
def test_imported_model_gives_the_plain_models_logits(
    ckpt_form: str,
    tok_form: str,
    tmp_path: Path,
    cs336: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = cs336["random_state"]()
    ckpt = save_checkpoint(tmp_path, state, ckpt_form)
    vocab, merges = write_tokenizer(tmp_path, cs336, tok_form)
    res = import_cs336((ckpt, vocab, merges), "run", tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["encoding"] == "rope" and metrics["imported"]["from"] == "cs336"
    assert len(metrics["imported"]["checkpoint_sha256"]) == 64
    from posenc_cli.config.run_config import typed
    from posenc_cli.config.rundir import load_run_config

    model = build_model(typed(load_run_config(run)), 300)
    model.load_state_dict(checkpoint.load(run / "checkpoints" / "last.pt")["model"])
    ids = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(1))
    exact = cs336["logits"]({k: v.double() for k, v in state.items()}, ids)
    plain_fp32_error = (cs336["logits"](state, ids).double() - exact).abs().max()
    with torch.no_grad():
        error = (model(ids).double() - exact).abs().max()
    # float32 cannot do 1e-6 on logits of size ~5: a plain float32 CS336 forward is itself
    # ~2.4e-6 from the float64 value; posenc must be as close as that.
    assert error < 1e-5 and error <= 1.5 * plain_fp32_error + 1e-7, (error, plain_fp32_error)


def test_the_tokenizer_gives_the_students_ids_and_round_trips(
    tmp_path: Path, cs336: dict[str, Any]
) -> None:
    vocab_path, merges_path = write_tokenizer(tmp_path, cs336, "gpt2")
    tok = build_tokenizer(read_vocab(vocab_path), read_merges(merges_path), ["<|endoftext|>"])
    vocab, merges = cs336["train_bpe"](TEXT, 30)
    for text in [TEXT, "the mat's 42 cats!<|endoftext|>  sat  on\ton the log.\n", "zebra"]:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert ids == cs336["encode"](text, vocab, merges)
        assert tok.decode(ids, skip_special_tokens=False) == text


def test_export_then_import_gives_identical_weights(
    tmp_path: Path, cs336: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = cs336["random_state"]()
    vocab, merges = write_tokenizer(tmp_path, cs336, "gpt2")
    first = import_cs336(
        (save_checkpoint(tmp_path, state, "bare"), vocab, merges),
        "a",
        tmp_path,
        monkeypatch,
    )
    assert first.exit_code == 0, first.output
    res = invoke(["export-cs336", "a", "out"], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    out = tmp_path / "out"
    exported = torch.load(out / "checkpoint.pt", weights_only=True)
    assert exported["model"].keys() == state.keys()
    assert json.loads((out / "model_config.json").read_text())["num_heads"] == 4
    assert pickle.loads((out / "merges.pkl").read_bytes()) == cs336["train_bpe"](TEXT, 30)[1]
    again = import_cs336(
        (out / "checkpoint.pt", out / "vocab.pkl", out / "merges.pkl"),
        "b",
        tmp_path,
        monkeypatch,
    )
    assert again.exit_code == 0, again.output
    b = checkpoint.load(tmp_path / "b" / "checkpoints" / "last.pt")["model"]
    assert all(torch.equal(b[k], v) for k, v in state.items())
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (
        tmp_path / "b" / "tokenizer.json"
    ).read_bytes()


def test_an_imported_run_is_released_digested_and_exported_only_when_free(
    tmp_path: Path, cs336: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What every bridge shares (interchange/): the imported run is free at once, its
    checkpoints carry their weights' digest, and an export of a run another process holds
    is refused unless asked for, then names its step."""
    vocab, merges = write_tokenizer(tmp_path, cs336, "gpt2")
    ck = save_checkpoint(tmp_path, cs336["random_state"](), "bare")
    assert import_cs336((ck, vocab, merges), "a", tmp_path, monkeypatch).exit_code == 0
    run = tmp_path / "a"
    assert "weights_sha256" in checkpoint.load(run / "checkpoints" / "best.pt")
    with locked_elsewhere(run):  # the import released it: another process can take it
        refused = invoke(["export-cs336", "a", "out"], tmp_path, monkeypatch)
        assert refused.exit_code == 2 and "is in use by another posenc process" in refused.output
        assert not (tmp_path / "out").exists()
        asked = invoke(["export-cs336", "a", "out", "--in-use"], tmp_path, monkeypatch)
        assert asked.exit_code == 0 and "exporting its step" in asked.output, asked.output


def _drop_n_heads(args: list[str]) -> list[str]:
    return [a for a in args if not a.startswith("model.n_heads")]


BAD = {
    "missing n_heads": (lambda s: s, _drop_n_heads, "needs model.n_heads"),
    "wrong shapes": (
        lambda s: {**s, "layers.1.ffn.w2.weight": torch.zeros(D_WRONG)},
        lambda a: a,
        "mis-shaped: layers.1.ffn.w2.weight",
    ),
    "unknown key": (
        lambda s: {**s, "layers.0.attn.bias": torch.zeros(3)},
        lambda a: a,
        "unexpected: layers.0.attn.bias",
    ),
    "heads do not divide": (
        lambda s: s,
        lambda a: [*_drop_n_heads(a), "model.n_heads=5"],
        "not divisible by model.n_heads=5",
    ),
    "embedding too small": (
        lambda s: {
            k: (v[:200] if k in ("token_embeddings.weight", "lm_head.weight") else v)
            for k, v in s.items()
        },
        lambda a: a,
        "the tokenizer has 300 tokens but the embedding only 200 rows",
    ),
}
D_WRONG = (32, 63)


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_and_leaves_no_run_directory(
    case: str, tmp_path: Path, cs336: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    change_state, change_args, expected = BAD[case]
    ckpt = save_checkpoint(tmp_path, change_state(cs336["random_state"]()), "bare")
    vocab, merges = write_tokenizer(tmp_path, cs336, "gpt2")
    res = import_cs336((ckpt, vocab, merges), "run", tmp_path, monkeypatch, change_args(REQUIRED))
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error: ") and expected in lines[0]
    assert not (tmp_path / "run").exists() and not (tmp_path / "outputs").exists()


def test_a_pickle_that_would_run_code_is_refused(tmp_path: Path) -> None:
    import os

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    (tmp_path / "vocab.pkl").write_bytes(pickle.dumps(Payload()))
    from posenc_cli.common.errors import PosencError

    with pytest.raises(PosencError, match="refusing to load"):
        read_vocab(tmp_path / "vocab.pkl")
    assert not (tmp_path / "ran").exists()


def test_a_posenc_checkpoint_of_another_encoding_is_refused(
    tmp_path: Path, cs336: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "alibi.pt"
    torch.save(
        {"model": cs336["random_state"](), "step": 3, "config": {"encoding": {"name": "alibi"}}},
        path,
    )
    vocab, merges = write_tokenizer(tmp_path, cs336, "gpt2")
    res = import_cs336((path, vocab, merges), "run", tmp_path, monkeypatch)
    assert res.exit_code == 2 and "posenc checkpoint of encoding 'alibi'" in res.stderr
    assert not (tmp_path / "run").exists()


def test_an_import_stopped_midway_leaves_no_run_directory(
    tmp_path: Path, cs336: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM after the config and tokenizer are written, at the first checkpoint: one line,
    exit 143, and the half-made run directory is gone (it would look like a run in training)."""
    import signal

    ckpt = save_checkpoint(tmp_path, cs336["random_state"](), "bare")
    vocab, merges = write_tokenizer(tmp_path, cs336, "gpt2")
    monkeypatch.setattr(
        "posenc_cli.interchange.imported_run.save_atomic",
        lambda *a, **k: signal.raise_signal(signal.SIGTERM),
    )
    res = import_cs336((ckpt, vocab, merges), "run", tmp_path, monkeypatch)
    assert res.exit_code == 143 and res.stderr == "posenc: stopped by SIGTERM\n"
    assert not (tmp_path / "run").exists()
    assert {p.name for p in tmp_path.iterdir()} == {"bare.pt", "vocab.json", "merges.txt"}


def test_a_run_with_nope_layers_is_not_exported_as_cs336(
    tmp_path: Path, cs336: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """CS336's model rotates in every layer, so a run with model.layers has no CS336 form
    (its weights are those of a plain RoPE model: only the saved config says which layers
    rotate, and the export must not drop that)."""
    vocab, merges = write_tokenizer(tmp_path, cs336, "gpt2")
    ckpt = save_checkpoint(tmp_path, cs336["random_state"](), "bare")
    assert import_cs336((ckpt, vocab, merges), "a", tmp_path, monkeypatch).exit_code == 0
    saved = tmp_path / "a" / ".hydra" / "config.yaml"
    text = saved.read_text()
    assert "  layers: null\n" in text
    saved.write_text(text.replace("  layers: null\n", "  layers: [encoding, none]\n"))
    res = invoke(["export-cs336", "a", "out"], tmp_path, monkeypatch)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "NoPE or another encoding (model.layers)" in lines[0]
    assert not (tmp_path / "out").exists()
