"""Every task's generator: deterministic per seed, exactly the requested size, every answer
right by an independent computation (Python's sort, integer addition, a dict lookup)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from posenc_cli.synthetic.base import BOS, FIRST_SYMBOL, QUERY, SEP, build_task, registry
from posenc_cli.synthetic.batches import IGNORE, collate, draw, evaluation_set, training_batch
from posenc_cli.synthetic.config import task_config

SIZES = (1, 2, 7, 16, 33)


def task_names(repo: Path) -> list[str]:
    return sorted(p.stem for p in (repo / "configs" / "task").glob("*.yaml") if p.stem != "lm")


def make(repo: Path, name: str, **params: object):
    values = OmegaConf.to_container(OmegaConf.load(repo / "configs" / "task" / f"{name}.yaml"))
    return build_task(task_config({**values["task"], **params}))


def test_every_task_yaml_has_its_generator(repo: Path) -> None:
    assert set(task_names(repo)) == set(registry())


def test_generators_are_deterministic_and_seeds_differ(repo: Path) -> None:
    for name in task_names(repo):
        task = make(repo, name)
        a = draw(task, (1, 16), 20, (0, 5))
        b = draw(task, (1, 16), 20, (0, 5))
        c = draw(task, (1, 16), 20, (1, 5))
        assert all(
            (x.tokens == y.tokens).all() and (x.answer == y.answer).all()
            for x, y in zip(a, b, strict=True)
        )
        assert any(
            len(x.tokens) != len(z.tokens) or (x.tokens != z.tokens).any()
            for x, z in zip(a, c, strict=True)
        ), name


def symbols(tokens: np.ndarray) -> list[int]:
    return [int(t) - FIRST_SYMBOL for t in tokens]


def test_copy_reverse_and_sort_answers(repo: Path) -> None:
    rng = np.random.default_rng(0)
    for name, want in (("copy", list), ("reverse", lambda s: s[::-1]), ("sort", sorted)):
        task = make(repo, name)
        for n in SIZES:
            inst = task.make(n, rng)
            assert inst.tokens[0] == BOS and inst.tokens[n + 1] == SEP
            items = symbols(inst.tokens[1 : n + 1])
            answer = symbols(inst.tokens[inst.answer])
            assert len(items) == n and answer == want(items)
            assert inst.answer.tolist() == [False] * (n + 2) + [True] * n


@pytest.mark.parametrize("reversed_digits", [True, False])
def test_addition_answers_are_the_integer_sum(repo: Path, reversed_digits: bool) -> None:
    task = make(repo, "addition", reversed=reversed_digits)
    rng = np.random.default_rng(1)
    for n in SIZES:
        inst = task.make(n, rng)
        digits = symbols(inst.tokens)
        a = digits[1 : n + 1]
        b = digits[n + 2 : 2 * n + 2]  # BOS a + b = s
        s = symbols(inst.tokens[inst.answer])

        def value(ds: list[int]) -> int:
            return int("".join(map(str, ds[::-1] if reversed_digits else ds)))

        assert len(a) == len(b) == n and len(s) == n + 1
        assert value(a) + value(b) == value(s)


def test_associative_recall_answers_are_the_stored_values(repo: Path) -> None:
    task = make(repo, "associative_recall")
    rng = np.random.default_rng(2)
    for n in SIZES:
        inst = task.make(n, rng)
        pairs = inst.tokens[1 : 2 * n + 1].tolist()
        store = dict(zip(pairs[0::2], pairs[1::2], strict=True))
        assert len(store) == n and inst.tokens[2 * n + 1] == SEP
        asked = inst.tokens[2 * n + 2 :].tolist()
        queries = asked[0::2]
        values = asked[1::2]
        assert len(queries) == min(n, 4) and len(set(queries)) == len(queries)
        assert values == [store[q] for q in queries]
        assert inst.answer.nonzero()[0].tolist() == list(range(2 * n + 3, len(inst.tokens), 2))


def test_passkey_answer_is_the_hidden_number(repo: Path) -> None:
    task = make(repo, "passkey")
    rng = np.random.default_rng(3)
    depths = set()
    for n in SIZES:
        inst = task.make(n, rng)
        toks = inst.tokens.tolist()
        first = toks.index(SEP)
        key = toks[first + 1 : first + 6]
        assert toks[first + 6] == SEP and toks[-6] == QUERY
        assert toks[-5:] == key and inst.answer.sum() == 5
        filler = toks[1:first] + toks[first + 7 : -6]
        assert len(filler) == n and all(t >= FIRST_SYMBOL + 10 for t in filler)
        depths.add(first - 1)
    assert len(depths) > 1


def test_sizes_are_exact_and_sequence_lengths_agree(repo: Path) -> None:
    for name in task_names(repo):
        task = make(repo, name)
        for n in (1, 8, 40):
            instances = evaluation_set(task, n, 10)
            assert {len(i.tokens) for i in instances} == {task.sequence_length(n)}
            assert all(i.tokens.max() < task.vocab_size for i in instances)


def test_the_loss_mask_covers_the_answer_tokens_only(repo: Path) -> None:
    task = make(repo, "associative_recall")
    instances = draw(task, (1, 9), 6, (0, 0))
    x, y = collate(instances)
    for row, inst in enumerate(instances):
        n = len(inst.tokens)
        targets = y[row].tolist()
        for t in range(x.shape[1]):
            answer_next = t + 1 < n and bool(inst.answer[t + 1])
            assert (targets[t] != IGNORE) == answer_next
            if answer_next:
                assert targets[t] == inst.tokens[t + 1]
        assert x[row, : n - 1].tolist() == inst.tokens[:-1].tolist()


def test_a_training_batch_is_a_function_of_seed_step_and_rank(repo: Path) -> None:
    task = make(repo, "copy")
    a = training_batch(task, (1, 16), 8, 0, 3)
    b = training_batch(task, (1, 16), 8, 0, 3)
    assert all((u == v).all() for u, v in zip(a, b, strict=True))
    assert (training_batch(task, (1, 16), 8, 0, 4)[0] != a[0]).any()
    halves = [training_batch(task, (1, 16), 4, 0, 3, rank=r, world_size=2) for r in (0, 1)]
    for part in (0, 1):  # two ranks of 4 train on exactly one process's batch of 8
        assert (torch.cat([h[part] for h in halves]) == a[part]).all()
