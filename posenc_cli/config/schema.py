"""The typed schema of the composed config: every key's type and valid range live here.

The YAML files in configs/ hold the values, each written once; these dataclasses say which
keys exist, what type each has and which values make sense (a ``Rule`` in each field's
metadata), and hold no value of their own (OmegaConf's MISSING). config.validate checks the
config as composed against both, so a key that is missing, of the wrong type or out of range
is one line before anything is created. `encoding` and `task` are free-form here because every
encoding and task has its own parameters (an encoding's constructor types them, a task's
class does). A run directory saved before a key existed gets that key's YAML value when it is
loaded (config/rundir.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from posenc_cli.common.rules import key
from posenc_cli.common.sizes import MAX_CONTEXT
from posenc_cli.data.config import DataConfig
from posenc_cli.encodings.names import ROPE_SCALING_METHODS as ROPE_SCALING

#: Sections composed only for their own command (`posenc bench` adds +bench=default), so a
#: training run's saved config holds none of them; checked whenever they are present.
COMMAND_SECTIONS = ("bench",)


@dataclass
class ModelConfig:
    d_model: int = key(lo=1)
    n_layers: int = key(lo=1)
    n_heads: int = key(lo=1)
    d_ff: int | None = key(lo=1)
    logn_scaling: bool = MISSING
    n_kv_heads: int | None = key(lo=1)
    rms_norm_eps: float = key(lo=0, lo_open=True)
    tie_embeddings: bool = MISSING
    qk_norm: bool = MISSING
    layers: list[str] | None = MISSING
    layer_encodings: dict[str, Any] = MISSING
    windows: list[int | None] | None = MISSING
    chunks: list[int | None] | None = MISSING


@dataclass
class TrainConfig:
    steps: int = key(lo=1)
    batch_size: int = key(lo=1)
    context_length: int = key(lo=2, hi=MAX_CONTEXT, low="is too short")
    lr: float = key(lo=0, lo_open=True)
    min_lr: float = key(lo=0)
    warmup_steps: int = key(lo=0)
    weight_decay: float = key(lo=0)
    beta1: float = key(lo=0, hi=1, hi_open=True)
    beta2: float = key(lo=0, hi=1, hi_open=True)
    grad_clip: float = key(lo=0, lo_open=True)
    eval_every: int = key(lo=1)
    eval_batches: int = key(lo=1)
    checkpoint_every: int = key(lo=1)
    log_every: int = key(lo=1)
    precision: str = key(choices=("auto", "fp32", "bf16"))
    compile: bool = MISSING
    attention: str = key(choices=("auto", "sdpa", "flex"))
    threads: int | None = key(lo=1)
    nproc: int = key(lo=1)
    deterministic: bool = MISSING
    position_range: int | None = key(lo=2, hi=2**31 - 1)


def rescale_factors() -> Any:
    """A set of LongRoPE rescale factors: each one divides a rotary pair's frequency."""
    return key(lo=0, lo_open=True, nonempty=True, fix="give one number > 0 per rotated pair")


@dataclass
class ExtrapolationConfig:
    """eval.extrapolation.*: the extrapolation task's settings (configs/eval/tasks/)."""

    factors: list[int] = key(lo=1, nonempty=True)
    tokens: int = key(lo=1)
    mode: str = key(choices=("nonoverlapping", "sliding"))
    stride: int | None = key(lo=1)
    position_buckets: int = key(lo=1)
    rope_scaling: str = key(choices=ROPE_SCALING)
    rope_factor: float | None = key(lo=1)
    rope_long_factor: list[float] | None = rescale_factors()
    rope_short_factor: list[float] | None = rescale_factors()
    unit_tokens: int | None = key(lo=1)
    tail_targets: int = key(lo=0)


def older_name(name: str) -> Any:
    """The flat eval.<name> of eval.extrapolation.<name> (the keys were flat before tasks had
    sections): it reads the section's value and takes the same values; one given replaces
    the section's (config/eval_sections.py), so saved runs and older commands keep working."""
    target = ExtrapolationConfig.__dataclass_fields__[name]
    return field(default=f"${{.extrapolation.{name}}}", metadata=target.metadata)


@dataclass
class EvalConfig:
    """The keys of every evaluation, then each task's own section (eval.<task>.*): typed here
    for extrapolation, free-form for the others, whose classes check them."""

    tasks: list[str] = key(name=True, nonempty=True)
    at_end: bool = MISSING
    extrapolation: ExtrapolationConfig = field(default_factory=ExtrapolationConfig)
    factors: list[int] = older_name("factors")
    tokens: int = older_name("tokens")
    mode: str = older_name("mode")
    stride: int | None = older_name("stride")
    position_buckets: int = older_name("position_buckets")
    rope_scaling: str = older_name("rope_scaling")
    rope_factor: float | None = older_name("rope_factor")
    rope_long_factor: list[float] | None = older_name("rope_long_factor")
    rope_short_factor: list[float] | None = older_name("rope_short_factor")


@dataclass
class BenchConfig:
    encodings: Any = MISSING
    model: str = key(name=True)
    context_length: int = key(lo=2)
    batch_size: int = key(lo=1)
    warmup_steps: int = key(lo=1)
    timed_steps: int = key(lo=1)
    eval_factors: list[int] = key(lo=1, nonempty=True)
    eval_steps: int = key(lo=1)
    precision: str = key(choices=("fp32", "bf16"))
    threads: int | None = key(lo=1)
    compile: bool = MISSING
    matmul_size: int = key(lo=16)
    case_timeout_s: float = key(lo=0, lo_open=True)
    repeats: int = key(lo=1)
    device: str = key(choices=("cpu", "cuda"))
    attention: str = key(choices=("auto", "sdpa", "flex"))


@dataclass
class ExtendConfig:
    """extend.*: `posenc extend`'s fine-tuning at S times the parent's length (S = 1: continued
    training at it, extend.method=none only), and the parent it records."""

    method: str = key(choices=ROPE_SCALING)
    factor: float = key(
        lo=1,
        low="would shorten the context",
        fix="use extend.factor >= 1, e.g. extend.factor=4 (1: continued training at the "
        "training length, with extend.method=none)",
    )
    steps: int = key(lo=0)
    lr: float | None = key(lo=0, lo_open=True)
    warmup_steps: int = key(lo=0)
    batch_size: int | None = key(lo=1)
    checkpoint: str = key(choices=("last", "best"))
    long_factor: list[float] | None = rescale_factors()
    short_factor: list[float] | None = rescale_factors()
    passkey_share: float = key(lo=0, hi=1)
    parent: str | None = MISSING
    parent_step: int | None = key(lo=0)
    parent_sha256: str | None = MISSING
    original_length: int | None = key(lo=2)


@dataclass
class RootConfig:
    encoding: dict[str, Any] = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    extend: ExtendConfig = field(default_factory=ExtendConfig)
    #: Free-form like ``encoding``: each synthetic task has its own keys (config/checks.py).
    task: dict[str, Any] = field(default_factory=lambda: {"name": "lm"})
    seed: int = key(lo=0)
    device: str = key(choices=("auto", "cpu", "cuda", "mps"))
    resume: str | None = MISSING
