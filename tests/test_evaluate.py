"""Length-extrapolation evaluation: the same tokens at every length, both modes, and `posenc eval`.

Most properties need no training: a tiny randomly initialised model on random ids is enough.
"""

from __future__ import annotations

import functools
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from posenc_cli.config import compose
from posenc_cli.data.dataset import TokenData
from posenc_cli.errors import PosencError
from posenc_cli.eval_run import apply_overrides, result_key
from posenc_cli.evaluate import (
    Window,
    evaluate_model,
    extrapolation,
    plan_windows,
    score_length,
    score_lengths,
    scored_targets,
)
from posenc_cli.model import TransformerLM, build_model
from posenc_cli.runtime import Runtime

VOCAB, TRAIN_LEN = 300, 16
RT = Runtime(torch.device("cpu"), "fp32")
BASE = ("model=tiny", f"train.context_length={TRAIN_LEN}", "eval.tokens=512", "device=cpu")


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Tiny matmuls: a second thread only adds contention on a shared 2-core machine."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@functools.cache
def config(*overrides: str) -> DictConfig:
    return compose([*BASE, *overrides])


def model_for(cfg: DictConfig, seed: int = 0) -> TransformerLM:
    torch.manual_seed(seed)
    return build_model(cfg, VOCAB).eval()


def val_ids(n: int = 3000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, n).astype(np.uint16)


def token_data(n: int = 3000) -> TokenData:
    ids = val_ids(n)
    return TokenData(ids, ids, Path("unused-tokenizer.json"), {"vocab_size": VOCAB})


def run(cfg: DictConfig, ids: np.ndarray | None = None, seed: int = 0) -> dict:
    ids = val_ids() if ids is None else ids
    return extrapolation(model_for(cfg, seed), ids, TRAIN_LEN, cfg.eval, RT)


def test_ppl_at_1x_is_exp_of_the_mean_loss_on_the_same_tokens() -> None:
    cfg = config()
    result = run(cfg)
    ids = torch.from_numpy(val_ids().astype(np.int64))
    n = result["tokens"]
    assert n == 512
    x = ids[:n].view(-1, TRAIN_LEN)
    y = ids[1:n + 1].view(-1, TRAIN_LEN)
    with torch.no_grad():
        logits = model_for(cfg)(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
    assert result["ppl"][str(TRAIN_LEN)] == pytest.approx(np.exp(loss), rel=1e-5)
    assert result["loss"][str(TRAIN_LEN)] == pytest.approx(loss, rel=1e-5)


@pytest.mark.parametrize("mode", ["nonoverlapping", "sliding"])
def test_every_length_scores_exactly_the_same_targets(mode: str) -> None:
    cfg = config(f"eval.mode={mode}", "eval.stride=5", "eval.factors=[1,3,4,16]")
    n, results, skipped, _ = score_lengths(model_for(cfg), val_ids(), TRAIN_LEN, cfg.eval, RT)
    assert not skipped and n == 512 and sorted(results) == [16, 48, 64, 256]
    for r in results.values():
        assert np.array_equal(r.targets, np.arange(n))


def test_window_plans_cover_each_target_once() -> None:
    for n in range(1, 30):
        for length in range(1, n + 1):
            for stride in range(1, length + 1):
                got = scored_targets(plan_windows(length, n, stride), length)
                assert np.array_equal(np.sort(got), np.arange(n)) and len(got) == n


def test_sliding_with_stride_equal_to_length_is_nonoverlapping() -> None:
    plain = run(config())
    # eval.stride is capped at each length, so a huge stride means stride = L at every length.
    sliding = run(config("eval.mode=sliding", "eval.stride=1000000"))
    assert sliding["ppl"] == plain["ppl"] and sliding["loss"] == plain["loss"]
    assert sliding["loss_by_position"] == plain["loss_by_position"]
    assert plan_windows(64, 512, 64) == [Window(s, 0) for s in range(0, 512, 64)]


def test_sliding_with_a_smaller_stride_differs_and_keeps_context() -> None:
    plain = run(config())
    sliding = run(config("eval.mode=sliding", "eval.stride=8"))
    assert sliding["tokens"] == plain["tokens"]
    assert sliding["ppl"][str(TRAIN_LEN)] != plain["ppl"][str(TRAIN_LEN)]
    for length in (16, 64, 256):
        plan = plan_windows(length, 512, 8)
        assert plan[0].first == 0
        assert all(w.first >= length - 8 for w in plan[1:])  # context = first + 1 tokens


def test_default_sliding_stride_is_half_the_length() -> None:
    result = run(config("eval.mode=sliding"))
    assert result["strides"] == {str(L): L // 2 for L in result["lengths"]}


def test_loss_by_position_has_the_requested_buckets() -> None:
    result = run(config("eval.position_buckets=8"))
    curve = result["loss_by_position"]
    assert curve["length"] == 256 and len(curve["loss"]) == 8
    assert curve["bucket_edges"] == list(range(0, 257, 32))
    assert np.mean(curve["loss"]) == pytest.approx(result["loss"]["256"], rel=1e-9)
    sliding = run(config("eval.position_buckets=8", "eval.mode=sliding", "eval.stride=8"))
    assert sliding["loss_by_position"] == curve


def test_learned_beyond_max_len_is_not_applicable() -> None:
    cfg = config("encoding=learned", "encoding.max_len=32")
    result = run(cfg)
    assert result["ppl"]["32"] is not None and result["ppl"]["64"] is None
    assert result["ppl"]["256"] is None and "beyond encoding.max_len" in result["skipped"]["256"]
    assert result["tokens"] == 512 and result["loss_by_position"]["length"] == 32


def test_short_held_out_data_is_reported_not_fatal() -> None:
    result = run(config("eval.tokens=4096"), ids=val_ids(200))
    assert result["tokens"] == 128 and result["ppl"]["256"] is None
    assert "held-out data has only 200 tokens" in result["skipped"]["256"]
    assert result["notes"] and result["ppl"]["128"] is not None


def test_evaluation_is_deterministic() -> None:
    cfg = config("eval.mode=sliding", "eval.stride=8")
    first, second = run(cfg), run(cfg)
    first.pop("seconds"), second.pop("seconds")
    assert first == second
    model = model_for(cfg)
    a = score_length(model, val_ids(), 64, 512, 8, RT)
    b = score_length(model, val_ids(), 64, 512, 8, RT)
    assert np.array_equal(a.losses, b.losses)


def test_tensorboard_tags_and_hparams_in_the_run_directory(tmp_path: Path) -> None:
    cfg = config()
    model = model_for(cfg).train()
    with SummaryWriter(str(tmp_path)) as writer:
        out = evaluate_model(model, token_data(), cfg, RT, writer)
    assert model.training and set(out) == {"extrapolation"}
    assert not [p for p in tmp_path.iterdir() if p.is_dir()], "add_hparams-style sub-run made"
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    steps = [e.step for e in acc.Scalars("extrapolation/ppl")]
    assert steps == [16, 32, 64, 128, 256]
    tags = acc.Tags()
    assert {"hparams/ppl_x1", "hparams/ppl_x16", "extrapolation/loss_by_position"} <= set(
        tags["scalars"])
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(
        acc.PluginTagToContent("hparams"))


def test_eval_overrides_are_restricted() -> None:
    saved = config()
    with pytest.raises(PosencError, match="cannot change 'model.d_model'"):
        apply_overrides(saved, ["model.d_model=64"])
    cfg = apply_overrides(saved, ["eval.mode=sliding", "eval.stride=8", "device=cpu"])
    assert cfg.eval.mode == "sliding" and cfg.model.d_model == saved.model.d_model
    assert result_key(None, cfg.eval, saved.eval) == "extrapolation_sliding8"
    assert result_key("text_other", saved.eval, saved.eval) == "extrapolation_text_other"
    assert result_key(None, saved.eval, saved.eval) == "extrapolation"
    quick = apply_overrides(saved, ["eval.factors=[16,1]", "eval.tokens=1024"])
    assert result_key(None, quick.eval, saved.eval) == "extrapolation_t1024_x1-16"


def write_text(path: Path, n_docs: int, seed: int) -> Path:
    rng = random.Random(seed)
    words = [rng.choice("abcdefghij") * rng.randint(1, 4) + rng.choice("klmnopq")
             for _ in range(200)]
    docs = [" ".join(rng.choices(words, weights=range(200, 0, -1), k=500)) for _ in range(n_docs)]
    path.write_text("\n<|endoftext|>\n".join(docs))
    return path


def posenc(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "POSENC_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "posenc_cli.cli", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_cli_train_then_eval_sliding_and_other_text(tmp_path: Path) -> None:
    corpus = write_text(tmp_path / "corpus.txt", 40, seed=0)
    other = write_text(tmp_path / "other.txt", 6, seed=1)
    run_dir = tmp_path / "run"
    posenc(tmp_path, "train", "model=tiny", "train.steps=20", "train.context_length=16",
           "data.vocab_size=300", "eval.tokens=512", f"hydra.run.dir={run_dir}", "data=text",
           f"data.path={corpus}", "device=cpu", "train.threads=1")
    first = json.loads((run_dir / "metrics.json").read_text())
    assert first["extrapolation"]["tokens"] == 512 and (run_dir / "tokenizer.json").is_file()
    proc = posenc(tmp_path, "eval", str(run_dir), "eval.mode=sliding", "eval.stride=8")
    assert "extrapolation_sliding8" in proc.stdout
    posenc(tmp_path, "eval", str(run_dir), "data=text", f"data.path={other}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["extrapolation"] == first["extrapolation"]
    sliding = metrics["extrapolation_sliding8"]
    assert sliding["mode"] == "sliding" and sliding["tokens"] == 512
    assert sliding["strides"] == {"16": 8, "32": 8, "64": 8, "128": 8, "256": 8}
    ood = metrics["extrapolation_text_other"]
    assert ood["data"] == "text_other" and all(v is not None for v in ood["ppl"].values())
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"extrapolation/ppl", "extrapolation_sliding8/ppl",
            "extrapolation_text_other/ppl", "val/loss"} <= tags


def test_eval_uses_the_precision_the_run_used_unless_told_otherwise() -> None:
    """`auto` means bf16 on one machine and fp32 on another: re-evaluation pins what the run
    recorded in metrics.json, so it reproduces the run's numbers; train.precision=... wins."""
    from posenc_cli.eval_run import pin_precision

    saved = config()
    saved.train.precision = "auto"
    cfg = apply_overrides(saved, [])
    pin_precision(cfg, {"precision": "fp32"}, [])
    assert cfg.train.precision == "fp32"
    cfg = apply_overrides(saved, ["train.precision=bf16"])
    pin_precision(cfg, {"precision": "fp32"}, ["train.precision=bf16"])
    assert cfg.train.precision == "bf16"
    cfg = apply_overrides(saved, [])
    pin_precision(cfg, {}, [])  # nothing recorded: auto stays auto
    assert cfg.train.precision == "auto"
    with pytest.raises(PosencError, match="cannot change 'train.steps'"):
        apply_overrides(saved, ["train.steps=5"])
