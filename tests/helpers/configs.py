"""Overrides and expected outputs the tests share."""

from __future__ import annotations

from pathlib import Path

#: What makes `posenc train` take seconds: a tiny model, 20 steps of 4 x 16.
TINY = [
    "model=tiny",
    "train.steps=20",
    "train.batch_size=4",
    "train.context_length=16",
    "train.eval_every=10",
    "train.eval_batches=2",
    "train.checkpoint_every=10",
    "train.log_every=5",
    "train.warmup_steps=2",
    "data.vocab_size=300",
    "eval.tokens=256",
    "eval.factors=[1,2]",
]


def sweep_job(corpus: Path) -> list[str]:
    """What each job of a sweep test adds to TINY: four steps on ``corpus``, no evaluation."""
    return ["train.steps=4", "eval.at_end=false", "data=text", f"data.path={corpus}"]


#: Four steps of the tiny model on a corpus file, trained in-process (Trainer, run_training).
FOUR_STEPS = [
    "model=tiny",
    "data=text",
    "data.vocab_size=300",
    "train.context_length=16",
    "train.steps=4",
    "train.eval_every=4",
    "train.eval_batches=1",
    "train.checkpoint_every=4",
    "train.log_every=2",
]

#: What a complete `posenc export-cs336` folder holds, written out independently of the exporter.
CS336_EXPORT_FILES = sorted(
    [
        "checkpoint.pt",
        "vocab.json",
        "merges.txt",
        "vocab.pkl",
        "merges.pkl",
        "model_config.json",
    ]
)
