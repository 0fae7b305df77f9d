"""Length generalization of a synthetic-task run: exact match and per-token accuracy at each
of task.test_lengths, on fixed seeded test sets (the same instances for every run).

A length whose instances need more positions than the encoding has (a learned table) is
reported as not applicable, with the reason, rather than failing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rich.markup import escape
from rich.table import Table

from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.run_config import RunConfig
from posenc_cli.evals.base import RECORDS, EvalTask, by_length, log_hparams, model_hparams
from posenc_cli.evals.instances import INSTANCES_FILE, instances_csv, instances_digest
from posenc_cli.synthetic.base import build_task

if TYPE_CHECKING:
    from torch import nn
    from torch.utils.tensorboard import SummaryWriter

    from posenc_cli.data.cache import TokenData
    from posenc_cli.engine.runtime import Runtime
    from posenc_cli.model import TransformerLM

#: TensorBoard tag prefix of the run's own result (other keys use their key).
TAG = "task"


class LengthGeneralization(EvalTask):
    name = "length_generalization"
    for_synthetic_tasks = True
    compare_view = "synthetic"

    def run(
        self, model: nn.Module, data: TokenData | None, cfg: RunConfig, rt: Runtime
    ) -> dict[str, Any]:
        """The test set is the synthetic task's (task.test_lengths, task.test_instances)."""
        task = build_task(cfg.task)
        lengths = sorted(set(cfg.task.test_lengths))
        count = cfg.task.test_instances
        exact: dict[str, float | None] = {}
        accuracy: dict[str, float | None] = {}
        skipped: dict[str, str] = {}
        by_instance: dict[int, tuple[bool, ...]] = {}
        digests: dict[str, str] = {}
        limit = cast("TransformerLM", model).encoding.max_len  # the model a task run trains
        for n in lengths:
            need = task.sequence_length(n) - 1
            if limit is not None and need > limit:
                exact[str(n)] = accuracy[str(n)] = None
                skipped[str(n)] = (
                    f"needs {need} positions; encoding '{cfg.encoding.name}' "
                    f"has {limit} (encoding.max_len)"
                )
                continue
            score, digests[str(n)] = _score(model, task, n, count, rt)
            by_instance[n] = score.exact_by_instance
            exact[str(n)] = score.exact_match
            accuracy[str(n)] = score.token_accuracy
        lo, hi = cfg.task.train_lengths
        return {
            "task": task.name,
            "size_unit": task.size_unit,
            "train_lengths": [lo, hi],
            "lengths": lengths,
            "instances": count,
            "exact_match": exact,
            "token_accuracy": accuracy,
            "skipped": skipped,
            "sequence_tokens": {str(n): task.sequence_length(n) for n in lengths},
            "instances_sha256": digests,
            RECORDS: {INSTANCES_FILE: instances_csv(by_instance)},
        }

    def log(self, writer: SummaryWriter, key: str, result: dict[str, Any], cfg: RunConfig) -> None:
        """Exact match and token accuracy with global_step = length, so runs overlay."""
        prefix = TAG if key == self.name else key
        for n in result["lengths"]:
            if result["exact_match"][str(n)] is not None:
                writer.add_scalar(f"{prefix}/exact_match", result["exact_match"][str(n)], n)
                writer.add_scalar(f"{prefix}/token_accuracy", result["token_accuracy"][str(n)], n)

    def log_summary(self, writer: SummaryWriter, result: dict[str, Any], cfg: RunConfig) -> None:
        """An HParams entry with exact match at each test length (in the run's own folder)."""
        hp = {
            "task": cfg.task.name,
            **model_hparams(cfg),
            "steps": cfg.train.steps,
        }
        log_hparams(
            writer,
            hp,
            {f"hparams/exact_match_{n}": v for n, v in result["exact_match"].items()},
            cfg.train.steps,
        )

    def summary(self, result: dict[str, Any]) -> list[tuple[str, str]]:
        if not result.get("exact_match"):
            return []
        lo, hi = result["train_lengths"]
        return [
            (
                f"exact match by {result['size_unit']} (trained {lo}–{hi})",
                by_length(result["exact_match"], 2),
            )
        ]

    def render(self, run_dir: Path, cfg: RunConfig, key: str, result: dict[str, Any]) -> list[Any]:
        """Exact match and token accuracy by size, and where they went."""
        lo, hi = result["train_lengths"]
        table = Table(
            title=f"{key}: {cfg.encoding.name} (seed {cfg.seed}) on task "
            f"{result['task']}, {result['instances']} instances per size, "
            f"trained on {lo}–{hi} {result['size_unit']}"
        )
        for col in ("size", "tokens", "exact match", "token accuracy", "note"):
            table.add_column(col, justify="left" if col == "note" else "right")
        for n in result["lengths"]:
            k = str(n)
            em = result["exact_match"][k]
            acc = result["token_accuracy"][k]
            table.add_row(
                k + ("*" if lo <= n <= hi else ""),
                str(result["sequence_tokens"][k]),
                "n/a" if em is None else f"{em:.3f}",
                "n/a" if acc is None else f"{acc:.3f}",
                escape(result["skipped"].get(k, "")),
            )
        prefix = TAG if key == self.name else key
        return [
            table,
            f'written to {RunDir(run_dir).metrics_file} under "{key}" and TensorBoard '
            f"({prefix}/exact_match, step = size)",
        ]


def _score(model: nn.Module, task: Any, size: int, count: int, rt: Runtime) -> tuple[Any, str]:
    """The answers' score on the test set of ``size`` and the digest of its instances."""
    # deferred: torch only when the task runs; compare finds it without
    from posenc_cli.synthetic.batches import evaluation_set
    from posenc_cli.synthetic.scoring import score_answers

    test_set = evaluation_set(task, size, count)
    score = score_answers(model, test_set, rt.device, rt.autocast)
    return score, instances_digest([i.tokens for i in test_set])
