"""What a run trains on: windows of a tokenized corpus, or instances of a synthetic task.

The trainer asks a stream for the batch of a step and for its validation loss and knows
nothing else about the data: language modelling scores every next token, a synthetic task
only its answer tokens (their targets; the others carry IGNORE).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn

from posenc_cli.common.errors import PosencError
from posenc_cli.config.run_config import RunConfig
from posenc_cli.data.batches import get_batch
from posenc_cli.data.cache import TokenData
from posenc_cli.data.passkey_windows import check_count, passkey_batch, passkey_text
from posenc_cli.engine.runtime import Runtime
from posenc_cli.engine.validation import validation_loss
from posenc_cli.synthetic.base import SyntheticTask, build_task
from posenc_cli.synthetic.batches import training_batch, validation_set
from posenc_cli.synthetic.scoring import answer_loss


class BatchStream(Protocol):
    vocab_size: int

    def batch(
        self,
        step: int,
        generator: torch.Generator,
        device: torch.device,
        rank: int = 0,
        world_size: int = 1,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's slice of the step's global batch (world_size x train.batch_size)."""
        ...

    def validation_loss(self, model: nn.Module, rt: Runtime) -> float: ...

    def describe(self) -> dict[str, Any]: ...


class CorpusStream:
    """Random windows of the training ids (CS336 get_batch) from the run's generator; with
    extend.passkey_share > 0, that share of each step's windows are passkey windows
    (data/passkey_windows.py), drawn after the ordinary ones from the same generator."""

    def __init__(self, data: TokenData, cfg: RunConfig) -> None:
        self.data = data
        self.cfg = cfg
        self.vocab_size = int(data.meta["vocab_size"])
        t = cfg.train
        self.passkeys = check_count(cfg.extend.passkey_share, t.batch_size)
        self.passkey_text = (
            passkey_text(data.tokenizer, str(data.tokenizer_path), t.context_length)
            if self.passkeys
            else None
        )

    def batch(
        self,
        step: int,
        generator: torch.Generator,
        device: torch.device,
        rank: int = 0,
        world_size: int = 1,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.cfg.train
        ids, L = self.data.train, t.context_length
        plain = t.batch_size - self.passkeys
        parts = []
        if plain:  # share 0: exactly the windows (and draws) of a run without passkeys
            parts.append(get_batch(ids, plain, L, generator, device, rank, world_size))
        if self.passkey_text is not None:
            parts.append(
                passkey_batch(
                    ids, self.passkey_text, self.passkeys, L, generator, device, rank, world_size
                )
            )
        if len(parts) == 1:
            return parts[0]
        return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])

    def validation_loss(self, model: nn.Module, rt: Runtime) -> float:
        return validation_loss(model, self.data, self.cfg.train, rt)

    def describe(self) -> dict[str, Any]:
        t = self.cfg.train
        return {
            "data": self.cfg.data.name,
            "vocab_size": self.vocab_size,
            "tokenizer": str(self.data.tokenizer_path),
            "val_targets": int(t.eval_batches * t.batch_size * t.context_length),
            # only where there are any, so other runs keep their shape
            **(
                {"passkey_share": self.cfg.extend.passkey_share, "passkey_windows": self.passkeys}
                if self.passkeys
                else {}
            ),
        }


class TaskStream:
    """Instances of sizes in task.train_lengths, drawn as a function of (seed, step)."""

    def __init__(self, task: SyntheticTask, cfg: RunConfig) -> None:
        self.task = task
        self.cfg = cfg
        self.vocab_size = task.vocab_size
        lo, hi = cfg.task.train_lengths
        self.sizes = (lo, hi)
        t = cfg.train
        self.validation = validation_set(task, self.sizes, t.eval_batches * t.batch_size)

    def batch(
        self,
        step: int,
        generator: torch.Generator,
        device: torch.device,
        rank: int = 0,
        world_size: int = 1,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return training_batch(
            self.task,
            self.sizes,
            self.cfg.train.batch_size,
            self.cfg.seed,
            step,
            rank,
            world_size,
            device,
        )

    def validation_loss(self, model: nn.Module, rt: Runtime) -> float:
        was_training = model.training
        model.eval()
        try:
            return answer_loss(model, self.validation, rt.device, rt.autocast)
        finally:
            model.train(was_training)

    def describe(self) -> dict[str, Any]:
        return {
            "data": f"task:{self.task.name}",
            "task": self.task.name,
            "vocab_size": self.vocab_size,
            "tokenizer": None,
            "task_train_lengths": list(self.sizes),
        }


def make_stream(cfg: RunConfig, data: TokenData | None) -> BatchStream:
    """The corpus stream of ``data`` for task=lm, else the configured task's (which has no
    text to hide a passkey in)."""
    if data is not None:
        return CorpusStream(data, cfg)
    if cfg.extend.passkey_share > 0:
        raise PosencError(
            f"extend.passkey_share={cfg.extend.passkey_share:g} with task={cfg.task.name}: "
            "passkey windows are drawn from a corpus",
            "use extend.passkey_share=0 (task=passkey trains the synthetic passkey task)",
        )
    return TaskStream(build_task(cfg.task), cfg)
