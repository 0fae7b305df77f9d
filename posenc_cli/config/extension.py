"""A run made by `posenc extend`: a parent's model fine-tuned at S times its training length L
with a context-extension method (S = 1: continued training at L, method none only), a share
of its windows passkey windows if extend.passkey_share says so. extend.* holds the options
and, in the new run, the parent (its directory, checkpoint step and weights' SHA-256) and L,
so training, evaluation, `posenc inspect` and `posenc export-hf` all rebuild the same model.

Evaluation keeps the parent's lengths (eval.factors x L, not x S·L) and tokens, so the rows
of the new run line up with the parent's and with its evaluation-only scaling rows.
"""

from __future__ import annotations

import copy
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.common.sizes import MAX_CONTEXT


def is_extension(cfg: DictConfig) -> bool:
    """The run was made by `posenc extend` (its config names a parent)."""
    ext = cfg.get("extend")
    return ext is not None and ext.get("parent") is not None


def extended_length(length: int, factor: float) -> int:
    """S·L, refused when it is not a whole number of tokens or longer than any length a
    config may train at (train.context_length's bound)."""
    longer = length * factor
    if abs(longer - round(longer)) > 1e-9:
        raise PosencError(
            f"extend.factor={factor!r} times the training length {length} is {longer!r} tokens",
            "choose a factor that gives a whole number of tokens, e.g. extend.factor=4",
        )
    if longer > MAX_CONTEXT:
        raise PosencError(
            f"extend.factor={factor:g} times the training length {length} is {longer:g} "
            f"tokens, above the longest context posenc runs ({MAX_CONTEXT})",
            f"choose extend.factor <= {MAX_CONTEXT // length}",
        )
    return round(longer)


def check_factor(method: str, factor: float) -> None:
    """S = 1 keeps the training length: continued training (extend.method=none, the control of
    a context-extension study). A RoPE scaling method at S = 1 has no longer context to adapt
    the model to, and pi, ntk, yarn and llama3 would rescale nothing."""
    if method != "none" and factor == 1:
        raise PosencError(
            f"extend.factor=1 keeps the training length, so extend.method={method} has nothing "
            "to extend",
            f"use extend.method=none for continued training at the training length, or "
            f"extend.factor > 1 with {method}, e.g. extend.factor=4",
        )


def child_config(
    parent: DictConfig, ext: DictConfig, parent_dir: Path, step: int, sha256: str
) -> DictConfig:
    """The new run's config: the parent's, trained at S·L for extend.steps at a constant
    rate after warmup, recording its parent (longrope's factor sets as given; missing ones
    are searched before the run is created, workflows/extend_search.py)."""
    cfg = copy.deepcopy(parent)
    # the encodings model.layers names keep the parent's sizes (CoPE's positions follow
    # train.context_length in its YAML), so the child takes the parent's weights
    cfg.model.layer_encodings = OmegaConf.to_container(parent.model.layer_encodings, resolve=True)
    L = int(parent.train.context_length)
    S = float(ext.factor)
    lr = float(parent.train.min_lr) if ext.lr is None else float(ext.lr)
    if lr <= 0:
        raise PosencError(
            f"the parent's train.min_lr is {lr:g}, so extend.lr has no default",
            "give the fine-tuning rate, e.g. extend.lr=3e-4",
        )
    batch = ext.batch_size or max(1, int(parent.train.batch_size / S))
    cfg.train.update(
        context_length=extended_length(L, S),
        steps=int(ext.steps),
        lr=lr,
        min_lr=lr,
        warmup_steps=int(ext.warmup_steps),
        batch_size=int(batch),
    )
    cfg.extend = copy.deepcopy(ext)
    cfg.extend.update(
        parent=str(parent_dir), parent_step=step, parent_sha256=sha256, original_length=L
    )
    if ext.method == "dynamic_ntk":  # rescaled by each evaluated length, as transformers does
        cfg.eval.extrapolation.rope_scaling = "dynamic_ntk"
    return cfg


def check_extension_eval(cfg: DictConfig) -> None:
    """An extension is evaluated with the method it was fine-tuned with, not another one."""
    if not is_extension(cfg):
        return
    own = "dynamic_ntk" if cfg.extend.method == "dynamic_ntk" else "none"
    asked = str(cfg.eval.get("rope_scaling", "none"))
    if asked not in ("none", own):
        raise PosencError(
            f"eval.rope_scaling={asked} on a run fine-tuned with extend.method={cfg.extend.method}",
            f"evaluate it as it was trained (drop eval.rope_scaling), or evaluate its parent "
            f"{cfg.extend.parent} with eval.rope_scaling={asked}",
        )
