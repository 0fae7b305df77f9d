"""Typed schema of the composed config: a wrong type or unknown key fails before a run starts.

The YAML files in configs/ hold the values; these dataclasses only say which keys exist and
what type each has. `encoding` is free-form because every encoding has its own parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class ModelConfig:
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    d_ff: Optional[int] = None


@dataclass
class DataConfig:
    name: str = "sotu"
    kind: str = "sotu"
    path: Optional[str] = None
    val_path: Optional[str] = None
    vocab_size: int = 4096
    val_every_nth: int = 20
    cache_dir: str = "~/.cache/posenc"


@dataclass
class TrainConfig:
    steps: int = 2000
    batch_size: int = 8
    context_length: int = 128
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_every: int = 250
    eval_batches: int = 16
    checkpoint_every: int = 500
    log_every: int = 10
    precision: str = "auto"
    compile: bool = False
    threads: Optional[int] = None


@dataclass
class EvalConfig:
    factors: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    tokens: int = 32768
    mode: str = "nonoverlapping"
    stride: Optional[int] = None
    position_buckets: int = 32
    at_end: bool = True


@dataclass
class BenchConfig:
    encodings: Any = "all"
    model: str = "base"
    context_length: int = 256
    batch_size: int = 16
    warmup_steps: int = 3
    timed_steps: int = 10
    eval_factors: list[int] = field(default_factory=lambda: [1, 4, 16])
    eval_steps: int = 3
    precision: str = "fp32"
    threads: Optional[int] = 2
    compile: bool = False
    matmul_size: int = 4096
    case_timeout_s: float = 1200.0
    repeats: int = 1


@dataclass
class RootConfig:
    encoding: dict[str, Any] = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    seed: int = 0
    device: str = "auto"
    resume: Optional[str] = None
