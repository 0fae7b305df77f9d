"""Exact match: an oracle scores 1, a constant model about 0; not applicable past a table."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf

from posenc_cli.synthetic.base import build_task
from posenc_cli.synthetic.batches import evaluation_set
from posenc_cli.synthetic.config import task_config
from posenc_cli.synthetic.scoring import answer_loss, score_answers


def task_of(repo: Path, name: str):
    values = OmegaConf.to_container(OmegaConf.load(repo / "configs" / "task" / f"{name}.yaml"))
    return build_task(task_config(values["task"]))


class Oracle(torch.nn.Module):
    """Knows every test instance: logits one-hot on the true next token."""

    def __init__(self, instances, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.next = {tuple(i.tokens[:-1].tolist()): i.tokens[1:].tolist() for i in instances}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(*x.shape, self.vocab)
        for row, ids in enumerate(x.tolist()):
            for t, token in enumerate(self.next[tuple(ids)]):
                out[row, t, token] = 30.0
        return out


def test_an_oracle_scores_one_and_a_constant_model_about_zero(repo: Path) -> None:
    for name in ("copy", "addition", "associative_recall", "passkey"):
        task = task_of(repo, name)
        instances = evaluation_set(task, 12, 50)
        oracle = score_answers(Oracle(instances, task.vocab_size), instances)
        assert oracle.exact_match == 1.0 and oracle.token_accuracy == 1.0
        assert answer_loss(Oracle(instances, task.vocab_size), instances) < 1e-3

        def constant(x: torch.Tensor, vocab: int = task.vocab_size) -> torch.Tensor:
            logits = torch.zeros(*x.shape, vocab)
            logits[..., vocab - 1] = 1.0
            return logits

        score = score_answers(constant, instances)
        assert score.exact_match < 0.05 and score.token_accuracy < 0.3, name


class HalfOracle(Oracle):
    """Right on the instances whose tokens sum to an even number, wrong at every answer
    elsewhere."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        odd = x.sum(-1) % 2 == 1
        out[odd] = out[odd].roll(1, dims=-1)
        return out


def test_exact_match_is_recorded_per_instance_in_order(repo: Path) -> None:
    task = task_of(repo, "copy")
    instances = evaluation_set(task, 6, 40)
    score = score_answers(HalfOracle(instances, task.vocab_size), instances)
    want = tuple(int(i.tokens[:-1].sum()) % 2 == 0 for i in instances)
    assert score.exact_by_instance == want
    assert score.exact == sum(want) and 0 < score.exact < 40
