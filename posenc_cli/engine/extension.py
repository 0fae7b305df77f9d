"""`posenc extend`'s parent: the checkpoint a new run starts from, checked before anything is
created, loaded into the new model when training begins (the same weights, by SHA-256), and
recorded in the new run's metrics.json for `posenc compare`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from posenc_cli.common.errors import PosencError
from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.run_config import RunConfig
from posenc_cli.engine import checkpoint
from posenc_cli.engine.build import build_model
from posenc_cli.engine.metrics import read_metrics
from posenc_cli.engine.saved_config import check_saved_config

#: What to do about a parent whose checkpoint cannot be used.
ANOTHER = "extend another run, or restore the parent's checkpoints and .hydra/config.yaml"


def parent_checkpoint(run_dir: Path, cfg: RunConfig, which: str) -> tuple[int, str]:
    """The step and weights' SHA-256 of the parent's checkpoint ``which`` (last | best)."""
    if cfg.task.synthetic:
        raise PosencError(
            f"{run_dir} is a synthetic-task run ({cfg.task.name})",
            "extend a language-model run (task=lm)",
        )
    if cfg.extend.parent is not None:
        raise PosencError(
            f"{run_dir} is itself an extension of {cfg.extend.parent}",
            f"extend its parent {cfg.extend.parent} with the factor you want",
        )
    path = RunDir(run_dir).checkpoint(which)
    if not path.is_file():
        raise PosencError(
            f"{run_dir} has no checkpoints/{which}.pt",
            "extend a run that has trained until its first checkpoint"
            + (", or use extend.checkpoint=last" if which == "best" else ""),
        )
    ck = checkpoint.load(path, ANOTHER)  # its step is a whole number, checked there
    _check_fits(path, ck["model"], cfg)
    check_saved_config(ck, cfg, path)
    return int(ck.get("step", 0)), checkpoint.state_digest(ck["model"])


def _check_fits(path: Path, state: dict[str, Any], cfg: RunConfig) -> None:
    """The weights are the model the parent's config builds: checked (the file is untrusted)
    before the new run exists, not when its training starts."""
    try:
        build_model(cfg, int(state["lm_head.weight"].shape[0])).load_state_dict(state)
    except (RuntimeError, KeyError, AttributeError, IndexError, TypeError) as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        why = (lines[1] if len(lines) > 1 else lines[0] if lines else type(exc).__name__)[:160]
        raise PosencError(
            f"checkpoint '{path}' does not fit the parent's config ({why})", ANOTHER
        ) from None


def parent_weights(cfg: RunConfig) -> dict[str, Any]:
    """The parent's weights a new run starts from (its model state), checked by SHA-256 to be
    the ones the run was made from."""
    ext = cfg.extend
    assert ext.parent is not None  # a run made by `posenc extend`
    path = RunDir(Path(ext.parent)).checkpoint(ext.checkpoint)
    ck = checkpoint.load(path)
    if checkpoint.state_digest(ck["model"]) != ext.parent_sha256:
        raise PosencError(
            f"{path} changed since this run was made from it",
            "extend the parent again (`posenc extend PARENT ...`) into a new run",
        )
    state: dict[str, Any] = ck["model"]
    return state


def start_from_parent(model: nn.Module, cfg: RunConfig) -> None:
    """Load the parent's weights (only: the optimizer starts afresh) into a new run's model."""
    model.load_state_dict(parent_weights(cfg))


def extension_metrics(cfg: RunConfig, model: nn.Module) -> dict[str, Any]:
    """metrics.json's ``extend`` record (nothing for other runs, so they keep their shape):
    the method and its parameters, and what the parent trained, so `posenc compare` puts the
    run in the parent's table with a row of its own."""
    ext = cfg.extend
    if ext.parent is None:
        return {}
    enc = getattr(model, "encoding", None)
    parent = read_metrics(Path(ext.parent))
    return {
        "extend": {
            "method": ext.method,
            "factor": ext.factor,
            "steps": cfg.train.steps,
            "train_length": cfg.train.context_length,
            "original_length": ext.original_length,
            "lr": cfg.train.lr,
            "attention_factor": float(getattr(enc, "attention_factor", 1.0)),
            "passkey_share": ext.passkey_share,
            "parent": {
                "path": ext.parent,
                "step": ext.parent_step,
                "sha256": ext.parent_sha256,
                **{k: parent.get(k) for k in ("train_length", "steps", "train_tokens")},
            },
        }
    }


def same_tokenizer(tokenizer: Path, cfg: RunConfig) -> None:
    """The new run's tokenizer (the data cache's ``tokenizer``) is the parent's, so token ids
    mean the same thing; checked before the run directory is made, and again by each run."""
    if cfg.extend.parent is None:
        return
    parent = RunDir(Path(cfg.extend.parent)).tokenizer_file
    if parent.is_file() and tokenizer.is_file() and tokenizer.read_bytes() != parent.read_bytes():
        raise PosencError(
            f"the data cache's tokenizer differs from {parent}, so the token ids would differ "
            "from the parent's",
            "extend with the cache the parent was trained with ($POSENC_CACHE)",
        )
