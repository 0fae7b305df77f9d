"""`posenc export-cs336 RUN_DIR OUT`: a posenc RoPE run in the formats CS336 code reads.

OUT gets checkpoint.pt (save_checkpoint's layout: model, iteration), the tokenizer as GPT-2
text (vocab.json, merges.txt) and as the assignment's pickles (vocab.pkl: dict[int, bytes],
merges.pkl: list[tuple[bytes, bytes]]), and model_config.json with the hyper-parameters the
assignment's TransformerLM takes. The files are written into a hidden sibling folder that is
renamed to OUT once complete, so OUT is either absent or whole, and a failed export can be run
again.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import torch

from posenc_cli.common import faults
from posenc_cli.common.atomic import write_atomic, write_json_atomic, write_text_atomic
from posenc_cli.common.errors import PosencError
from posenc_cli.common.sizes import default_d_ff
from posenc_cli.config.run_config import RunConfig
from posenc_cli.cs336.bpe_files import tokenizer_files
from posenc_cli.cs336.gpt2_bytes import to_bytes, token_bytes
from posenc_cli.interchange.export_source import open_run, write_export

FILES = (
    "checkpoint.pt",
    "vocab.json",
    "merges.txt",
    "vocab.pkl",
    "merges.pkl",
    "model_config.json",
)


def export_cs336(run_dir: Path, out: Path, in_use: bool = False) -> list[Path]:
    """Write FILES into ``out`` (which must be new or empty); returns their paths.
    ``in_use``: export the last checkpoint of a run another process still trains."""
    source = open_run(run_dir, out, in_use, lambda cfg: _check_rope(cfg, run_dir))
    ck = source.checkpoint
    vocab, merges = tokenizer_files(json.loads(source.tokenizer.read_text(encoding="utf-8")))
    model = model_config(source.cfg, ck["model"])
    state = {"model": ck["model"], "iteration": int(ck.get("step", 0))}
    write_export(out, lambda tmp: _write_files(tmp, state, vocab, merges, model))
    return [out / f for f in FILES]


def _check_rope(cfg: RunConfig, run_dir: Path) -> None:
    if cfg.encoding.name != "rope":
        raise PosencError(
            f"{run_dir} uses encoding '{cfg.encoding.name}'; CS336's model is RoPE",
            "export a run trained with encoding=rope",
        )
    if cfg.model.qk_norm:
        raise PosencError(
            f"{run_dir} uses model.qk_norm; CS336's model has no QK-norm weights",
            "export a run trained without QK-norm",
        )
    if cfg.model.layers is not None:
        raise PosencError(
            f"{run_dir} gives some layers NoPE or another encoding (model.layers); CS336's "
            "model rotates in every layer",
            "export a run trained without model.layers (`posenc export-hf` writes RoPE with "
            "NoPE layers as SmolLM3)",
        )
    if cfg.model.windows is not None:
        raise PosencError(
            f"{run_dir} has sliding windows (model.windows); CS336's model attends globally",
            "export a run trained without model.windows",
        )
    if cfg.model.chunks is not None:
        raise PosencError(
            f"{run_dir} has chunked attention (model.chunks); CS336's model attends globally",
            "export a run trained without model.chunks",
        )


def _write_files(
    folder: Path,
    state: dict[str, Any],
    vocab: dict[str, int],
    merges: list[tuple[str, str]],
    model: dict[str, Any],
) -> None:
    """FILES into ``folder`` (the export's temporary sibling)."""
    write_atomic(folder / "checkpoint.pt", lambda fh: torch.save(state, fh))
    faults.pause("in_export", 0, folder)
    write_json_atomic(folder / "vocab.json", vocab)
    write_text_atomic(
        folder / "merges.txt", "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)
    )
    by_id = {i: token_bytes(t) for t, i in vocab.items()}
    write_atomic(folder / "vocab.pkl", lambda fh: pickle.dump(by_id, fh))
    write_atomic(
        folder / "merges.pkl",
        lambda fh: pickle.dump([(to_bytes(a), to_bytes(b)) for a, b in merges], fh),
    )
    write_json_atomic(folder / "model_config.json", model)


def model_config(cfg: RunConfig, model: dict[str, Any]) -> dict[str, Any]:
    """The sizes CS336's TransformerLM constructor takes, as model_config.json holds them."""
    m = cfg.model
    return {
        "vocab_size": int(model["lm_head.weight"].shape[0]),
        "context_length": cfg.train.context_length,
        "d_model": m.d_model,
        "num_layers": m.n_layers,
        "num_heads": m.n_heads,
        "d_ff": m.d_ff or default_d_ff(m.d_model),
        "rope_theta": float(cfg.encoding.params["theta"]),
    }
