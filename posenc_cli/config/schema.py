"""The typed schema of the composed config: every key's type and valid range live here.

The YAML files in configs/ hold the values; these dataclasses say which keys exist, what type
each has and which values make sense (``Rule`` in each field's metadata). config.validate
checks the config as composed against both, so a key that is missing, of the wrong type or
out of range is one line before anything is created. `encoding` and `task` are free-form
because every encoding and task has its own parameters (an encoding's YAML ``checks`` them,
a task's class does).

A field's default restates its YAML value, because a run directory saved before a key existed
is completed from here (config/rundir.py) without composing; the YAML stays the one users read
and change, and tests/unit/config/test_one_value_per_key.py fails on any key whose two
values differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posenc_cli.common.rules import key
from posenc_cli.data.config import DataConfig
from posenc_cli.encodings.names import ROPE_SCALING_METHODS as ROPE_SCALING

#: Sections composed only for their own command (`posenc bench` adds +bench=default), so a
#: training run's saved config holds none of them; checked whenever they are present.
COMMAND_SECTIONS = ("bench",)


@dataclass
class ModelConfig:
    d_model: int = key(128, lo=1)
    n_layers: int = key(4, lo=1)
    n_heads: int = key(4, lo=1)
    d_ff: int | None = key(None, lo=1)
    logn_scaling: bool = False
    n_kv_heads: int | None = key(None, lo=1)
    rms_norm_eps: float = key(1e-5, lo=0, lo_open=True)
    tie_embeddings: bool = False


@dataclass
class TrainConfig:
    steps: int = key(2000, lo=1)
    batch_size: int = key(8, lo=1)
    context_length: int = key(128, lo=2, low="is too short")
    lr: float = key(3e-3, lo=0, lo_open=True)
    min_lr: float = key(3e-4, lo=0)
    warmup_steps: int = key(100, lo=0)
    weight_decay: float = key(0.1, lo=0)
    beta1: float = key(0.9, lo=0, hi=1, hi_open=True)
    beta2: float = key(0.95, lo=0, hi=1, hi_open=True)
    grad_clip: float = key(1.0, lo=0, lo_open=True)
    eval_every: int = key(250, lo=1)
    eval_batches: int = key(16, lo=1)
    checkpoint_every: int = key(500, lo=1)
    log_every: int = key(10, lo=1)
    precision: str = key("auto", choices=("auto", "fp32", "bf16"))
    compile: bool = False
    threads: int | None = key(None, lo=1)
    nproc: int = key(1, lo=1)
    deterministic: bool = False
    position_range: int | None = key(None, lo=2, hi=2**31 - 1)


@dataclass
class ExtrapolationConfig:
    """eval.extrapolation.*: the extrapolation task's settings (configs/eval/tasks/)."""

    factors: list[int] = key(factory=lambda: [1, 2, 4, 8, 16], lo=1, nonempty=True)
    tokens: int = key(262144, lo=1)
    mode: str = key("nonoverlapping", choices=("nonoverlapping", "sliding"))
    stride: int | None = key(None, lo=1)
    position_buckets: int = key(32, lo=1)
    rope_scaling: str = key("none", choices=ROPE_SCALING)
    rope_factor: float | None = key(None, lo=1)
    unit_tokens: int | None = key(None, lo=1)
    tail_targets: int = key(8192, lo=0)


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

    tasks: list[str] = key(factory=lambda: ["extrapolation"], name=True, nonempty=True)
    at_end: bool = True
    extrapolation: ExtrapolationConfig = field(default_factory=ExtrapolationConfig)
    factors: list[int] = older_name("factors")
    tokens: int = older_name("tokens")
    mode: str = older_name("mode")
    stride: int | None = older_name("stride")
    position_buckets: int = older_name("position_buckets")
    rope_scaling: str = older_name("rope_scaling")
    rope_factor: float | None = older_name("rope_factor")


@dataclass
class BenchConfig:
    encodings: Any = "all"
    model: str = key("base", name=True)
    context_length: int = key(256, lo=2)
    batch_size: int = key(16, lo=1)
    warmup_steps: int = key(3, lo=1)
    timed_steps: int = key(10, lo=1)
    eval_factors: list[int] = key(factory=lambda: [1, 4, 16], lo=1, nonempty=True)
    eval_steps: int = key(3, lo=1)
    precision: str = key("fp32", choices=("fp32", "bf16"))
    threads: int | None = key(2, lo=1)
    compile: bool = False
    matmul_size: int = key(4096, lo=16)
    case_timeout_s: float = key(1200.0, lo=0, lo_open=True)
    repeats: int = key(1, lo=1)


@dataclass
class ExtendConfig:
    """extend.*: `posenc extend`'s fine-tuning at a longer length, and the parent it records."""

    method: str = key("none", choices=ROPE_SCALING)
    factor: float = key(
        4.0, lo=1, lo_open=True, low="does not extend the context", fix="use e.g. extend.factor=4"
    )
    steps: int = key(400, lo=0)
    lr: float | None = key(None, lo=0, lo_open=True)
    warmup_steps: int = key(20, lo=0)
    batch_size: int | None = key(None, lo=1)
    checkpoint: str = key("last", choices=("last", "best"))
    parent: str | None = None
    parent_step: int | None = key(None, lo=0)
    parent_sha256: str | None = None
    original_length: int | None = key(None, lo=2)


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
    seed: int = key(0, lo=0)
    device: str = key("auto", choices=("auto", "cpu", "cuda", "mps"))
    resume: str | None = None
