"""The checks of a composed config that the schema's types alone cannot express."""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.encoding_checks import check_encoding
from posenc_cli.config.extension import check_extension_eval
from posenc_cli.config.rescale_checks import check_extend_sets
from posenc_cli.config.schema import COMMAND_SECTIONS, RootConfig

#: Sections whose keys depend on the chosen option (an encoding's or a task's own parameters).
FREE_FORM = ("encoding", "task")
#: The largest seed every generator the run seeds accepts (torch: a signed 64-bit integer).
MAX_SEED = 2**63 - 1
SECTIONS = {
    f.name: f.default_factory()
    for f in dataclasses.fields(RootConfig)
    if f.default_factory is not dataclasses.MISSING and f.name not in FREE_FORM
}


def schema_keys() -> list[tuple[str, dataclasses.Field[Any]]]:
    """Every checked key as ('section.key', field) (eval.extrapolation.factors for a section
    within a section), root keys as ('key', field)."""
    keys = [k for s, obj in SECTIONS.items() for k in _fields(s, obj)]
    keys += [
        (f.name, f)
        for f in dataclasses.fields(RootConfig)
        if f.name not in SECTIONS and f.name not in FREE_FORM
    ]
    return keys


def _fields(prefix: str, obj: Any) -> list[tuple[str, dataclasses.Field[Any]]]:
    out: list[tuple[str, dataclasses.Field[Any]]] = []
    for f in dataclasses.fields(obj):
        inner = getattr(obj, f.name)
        nested = dataclasses.is_dataclass(inner)
        out += _fields(f"{prefix}.{f.name}", inner) if nested else [(f"{prefix}.{f.name}", f)]
    return out


def check_keys_present(plain: DictConfig) -> None:
    """A key deleted with ~KEY is refused, not filled in from elsewhere."""
    for name, _ in schema_keys():
        section, _, leaf = name.rpartition(".")
        node = OmegaConf.select(plain, section) if section else plain
        if node is None and section in COMMAND_SECTIONS:
            continue
        if isinstance(node, DictConfig) and leaf not in node.keys():
            raise PosencError(
                f"{name} is missing from the config",
                "set it instead of deleting it (configs/"
                f"{section.split('.')[0] + '/' if section else 'config.yaml'} has its default)",
            )
        if node is None:
            raise PosencError(
                f"{section} is missing from the config",
                f"keep the {section} group, e.g. {section}=<option>",
            )


def check_rules(cfg: DictConfig) -> None:
    """Every key in its range (schema Rules), then the rules that relate keys."""
    for name, f in schema_keys():
        rule = f.metadata.get("rule")
        section, _, leaf = name.rpartition(".")
        node = OmegaConf.select(cfg, section) if section else cfg
        if OmegaConf.is_missing(node, leaf):
            continue  # a command's section not composed, or a ??? that validate names itself
        value = node[leaf]
        if rule is not None and (problem := rule.problem(name, value)) is not None:
            raise PosencError(problem, rule.advice(name, value))
    _check_relations(cfg)
    _require(
        int(cfg.seed) <= MAX_SEED,
        f"seed={cfg.seed} is too large for torch's generators",
        f"use 0 <= seed <= {MAX_SEED}",
    )


def _require(ok: bool, what: str, fix: str) -> None:
    if not ok:
        raise PosencError(what, fix)


def _check_relations(cfg: DictConfig) -> None:
    m = cfg.model
    t = cfg.train
    _require(
        m.d_model % m.n_heads == 0,
        f"model.d_model={m.d_model} is not divisible by model.n_heads={m.n_heads}",
        "pick n_heads that divides d_model, e.g. model.n_heads=4",
    )
    kv = m.n_kv_heads or m.n_heads
    _require(
        m.n_heads % kv == 0,
        f"model.n_kv_heads={kv} does not divide model.n_heads={m.n_heads}",
        "pick n_kv_heads that divides n_heads (null means n_heads)",
    )
    _require(
        t.min_lr <= t.lr,
        f"train.min_lr={t.min_lr} is above train.lr={t.lr}",
        "use 0 <= train.min_lr <= train.lr",
    )
    K = t.position_range
    _require(
        K is None or K >= t.context_length,
        f"train.position_range={K} is shorter than train.context_length={t.context_length}",
        f"use train.position_range >= {t.context_length} (e.g. 16x it), or leave it unset",
    )
    _require(
        t.nproc == 1 or cfg.device != "mps",
        f"train.nproc={t.nproc} with device=mps: torch.distributed has no MPS backend",
        "use train.nproc=1 on Apple GPUs, or device=cpu",
    )
    check_extension_eval(cfg)
    check_extend_sets(cfg.extend)
    check_encoding(cfg)
