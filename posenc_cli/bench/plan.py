"""The cases `posenc bench` runs: which encodings, and one spec per (encoding, mode, length)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.errors import PosencError
from posenc_cli.config.groups import config_dir, group_options
from posenc_cli.config.run_config import RunConfig
from posenc_cli.config.schema import BenchConfig, TrainConfig
from posenc_cli.engine.memory import (
    YARDSTICK,
    available_bytes,
    check_fits,
    gpu_available_bytes,
    training_needs,
)

#: The prefix of the one line a case process prints its result on (bench/case.py), read by
#: the parent (bench/suite.py); here so that the parent need not import torch to know it.
MARKER = "RESULT "


#: What `posenc bench` reads besides bench.*: the model, the vocabulary and the optimizer.
BENCH_READS = ("model", "data.vocab_size", "train.lr", "train.beta1", "train.beta2")
BENCH_READS_ALSO = ("train.weight_decay", "hydra.run.dir")


def check_bench_overrides(keys: list[str]) -> None:
    """Every override is one bench reads: an encoding, a train.* or eval.* key that a training
    run would take is refused, never silently ignored."""
    reads = (*BENCH_READS, *BENCH_READS_ALSO)
    for key in keys:
        if key == "bench" or key.startswith(("bench.", "model.")) or key in reads:
            continue
        raise PosencError(
            f"posenc bench does not use '{key}'",
            "choose what it measures with bench.* (bench.encodings, bench.precision, "
            "bench.threads, bench.context_length), model=NAME or model.*, data.vocab_size "
            "and train.lr/beta1/beta2/weight_decay",
        )


#: The fixes of a bench case too large for this machine, by the key the estimate names.
BENCH_FIXES = {
    "bench.batch_size": "lower bench.batch_size or bench.context_length until it fits",
    **{key: f"lower {key} (or bench another model=)" for key in YARDSTICK},
}


def check_bench_memory(cfg: RunConfig) -> None:
    """Its largest training case (the model with gradients and optimizer state, a batch of
    bench.batch_size x bench.context_length) fits in memory: refused before any case runs."""
    b = cfg.bench
    assert b is not None  # compose_bench composes the bench section
    train = dataclasses.replace(cfg.train, batch_size=b.batch_size, context_length=b.context_length)
    needs = training_needs(dataclasses.replace(cfg, train=train), cfg.data.vocab_size)
    kept = [
        dataclasses.replace(n, key="bench.batch_size") if n.key == "train.batch_size" else n
        for n in needs
        if n.key not in ("train.eval_batches", "eval.factors")
    ]
    cuda = b.device == "cuda"
    free = gpu_available_bytes() if cuda else available_bytes()
    check_fits(kept, free, "GPU memory" if cuda else "memory", instead=BENCH_FIXES)


def check_bench(cfg: DictConfig) -> None:
    """bench.encodings is "all", a name or a non-empty list of known encodings (the schema
    checks every other bench key)."""
    if cfg.bench.device == "cuda":
        check_cuda_present()
    elif cfg.bench.attention == "flex":
        raise PosencError(
            "bench.attention=flex on bench.device=cpu: torch's FlexAttention trains on CUDA only",
            "use bench.device=cuda, or time FlexAttention evaluations on CPU with "
            "python -m posenc_cli.bench.ab --eval N",
        )
    chosen = cfg.bench.encodings
    if not (
        isinstance(chosen, str)
        or (
            OmegaConf.is_list(chosen)
            and len(chosen) > 0
            and all(isinstance(n, str) for n in chosen)
        )
    ):
        raise PosencError(
            f"bench.encodings is {chosen!r}",
            "give all, one name or a list of names, e.g. bench.encodings=[none,rope]",
        )
    known = group_options("encoding")
    for name in encodings(chosen):
        if name not in known:
            raise PosencError(
                f"unknown encoding '{name}' in bench.encodings",
                f"choose from: {', '.join(known)} (or bench.encodings=all)",
            )


def check_cuda_present() -> None:
    """bench.device=cuda on a machine where torch sees no CUDA device: one line, not a case
    error per encoding."""
    import torch  # deferred: bench's other checks need no torch

    if not torch.cuda.is_available():
        raise PosencError(
            "bench.device=cuda, but torch sees no CUDA device here",
            "use bench.device=cpu, or run on a machine with a GPU and a CUDA build of torch",
        )


def encodings(chosen: Any) -> list[str]:
    """bench.encodings: "all" (every configs/encoding/*.yaml, `none` first), a name or a list
    of names (check_bench checked which)."""
    names = (
        group_options("encoding")
        if chosen == "all"
        else [chosen]
        if isinstance(chosen, str)
        else [str(n) for n in chosen]
    )
    return sorted(names, key=lambda n: (n != "none", names.index(n)))


def cases(cfg: RunConfig, b: BenchConfig) -> list[dict[str, Any]]:
    """One spec per (encoding, mode, length); the first one describes the matmul peak."""
    common = {
        "threads": b.threads or os.cpu_count() or 1,
        "precision": b.precision,
        "compile": b.compile,
        "vocab_size": cfg.data.vocab_size,
        "model": dataclasses.asdict(cfg.model),
        "train_length": b.context_length,  # what another encoding of model.layers reads
        "warmup": b.warmup_steps,
        "device": b.device,
        "attention": b.attention,
        "none_encoding": _resolved("none", b)["encoding"],
    }
    specs: list[dict[str, Any]] = [{**common, "kind": "matmul", "size": b.matmul_size}]
    for name in encodings(b.encodings):
        specs += encoding_cases(cfg.train, b, name, common)
    return specs


def _resolved(name: str, b: BenchConfig) -> dict[str, Any]:
    """An encoding's YAML with its ${train.…} references resolved at the bench length."""
    own = {
        "train": {"context_length": b.context_length},  # what ${train.…} reads
        "encoding": OmegaConf.load(config_dir() / "encoding" / f"{name}.yaml"),
    }
    return cast(dict[str, Any], OmegaConf.to_container(OmegaConf.create(own), resolve=True))


def encoding_cases(
    t: TrainConfig, b: BenchConfig, name: str, common: dict[str, Any]
) -> list[dict[str, Any]]:
    """One encoding's training case and its evaluation case per factor of bench.eval_factors
    (`none`'s own cases are not timed against themselves)."""
    base = {**common, "encoding": _resolved(name, b)["encoding"], "name": name}
    if name == "none":
        base["none_encoding"] = None
    train = {
        **base,
        "kind": "train",
        "length": b.context_length,
        "batch": b.batch_size,
        "timed": b.timed_steps,
        "optimizer": {k: getattr(t, k) for k in ("lr", "beta1", "beta2", "weight_decay")},
    }
    evals = [
        {
            **base,
            "kind": "eval",
            "length": f * b.context_length,
            "batch": 1,
            "timed": b.eval_steps,
            "warmup": 1,
        }
        for f in b.eval_factors
    ]
    return [train, *evals]
