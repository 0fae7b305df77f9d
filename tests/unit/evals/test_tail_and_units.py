"""The tail protocol (every scored target has at least n - L/2 tokens of context, the same
targets at every length, whatever eval.tokens is) and the per-unit record of an evaluation."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from posenc_cli.common.errors import PosencError
from posenc_cli.evals.base import RECORDS, get_task
from posenc_cli.evals.extrapolation_result import extrapolation
from posenc_cli.evals.scoring import tail_budget, tail_ends
from posenc_cli.evals.units import (
    UNITS_FILE,
    UnitsFileError,
    read_units,
    targets_digest,
    unit_sums,
)
from posenc_cli.evals.writers import take_records, write_records

L = 16  # the training length of tests/unit/evals/conftest.py
EOT = 7


@pytest.fixture
def evaluate(config, model_for, val_ids, rt):
    """evaluate(*overrides): (ids, model, result) of the extrapolation task's own settings."""

    def run(*overrides: str) -> tuple[np.ndarray, torch.nn.Module, dict]:
        cfg = config("eval.factors=[1,2,4]", "eval.extrapolation.tail_targets=96", *overrides)
        ids = val_ids()
        ids[::97] = EOT  # documents of 96 tokens
        model = model_for(cfg)
        return ids, model, extrapolation(model, ids, L, cfg.eval.extrapolation, rt, EOT)

    return run


def test_tail_chunks_are_disjoint_spread_and_leave_room_for_the_longest_window() -> None:
    ends = tail_ends(available=1000, longest=256, chunk=8, budget=80)
    assert len(ends) == 10 and ends[0] == 256 and ends[-1] <= 1000
    assert np.all(np.diff(ends) >= 8) and np.all((ends - 256) % 8 == 0)
    assert tail_ends(available=260, longest=256, chunk=8, budget=80).tolist() == [256]
    assert tail_ends(available=100, longest=256, chunk=8, budget=80).size == 0


def test_every_tail_target_is_scored_with_its_full_window(evaluate) -> None:
    """Each chunk's losses equal a direct forward pass over the window of n tokens that ends
    with it; so every target has at least n - L/2 tokens of context."""
    ids, model, result = evaluate()
    tail = result["tail"]
    assert tail["chunk"] == L // 2 and tail["targets"] == 96
    assert tail["min_context"] == {"16": 8, "32": 24, "64": 56}
    ends = tail_ends(len(ids) - 1, 64, L // 2, 96)
    x = torch.from_numpy(ids.astype(np.int64))
    for n in (16, 64):
        losses = []
        for e in ends:
            with torch.no_grad():
                logits = model(x[e - n : e].unsqueeze(0))[0]
            losses.append(F.cross_entropy(logits, x[e - n + 1 : e + 1], reduction="none")[-8:])
        direct = torch.cat(losses).mean().item()
        assert tail["loss"][str(n)] == pytest.approx(direct, rel=1e-6)


def test_the_tail_keeps_its_context_whatever_eval_tokens_is(evaluate) -> None:
    """A small eval.tokens shrinks the tail's sample (its cost follows the first protocol's),
    never its context: the chunks still come from the whole held-out text."""
    ids, _, small = evaluate("eval.tokens=256")
    *_, large = evaluate("eval.tokens=262144")
    assert small["tokens"] == 256 < large["tokens"]
    assert 0 < small["tail"]["targets"] < large["tail"]["targets"] == 96
    assert small["tail"]["min_context"] == large["tail"]["min_context"]
    assert tail_ends(len(ids) - 1, 64, 8, small["tail"]["targets"])[-1] > 256


def test_the_tail_never_costs_more_forward_tokens_than_the_first_protocol() -> None:
    # quick configuration: 176,128 targets at 128 ... 2048, 8,192 asked, 14,204 affordable
    assert tail_budget(8192, 176_128, [128, 256, 512, 1024, 2048], 128) == 8192
    assert tail_budget(8192, 16_384, [128, 256, 512, 1024, 2048], 128) == 16_384 * 5 // 62
    assert tail_budget(8192, 256, [16, 32], 16) == 256 * 2 // 6
    assert tail_budget(0, 176_128, [128], 128) == 0


def test_the_loss_change_beyond_the_training_length_is_the_tail_difference(evaluate) -> None:
    *_, result = evaluate()
    tail = result["tail"]
    change = tail["beyond_train_length"]
    assert sorted(change) == ["32", "64"]
    for n, c in change.items():
        assert c["difference"] == pytest.approx(tail["loss"][n] - tail["loss"]["16"], abs=1e-12)
        assert c["ci95"][0] <= c["difference"] <= c["ci95"][1]


def test_units_csv_gives_back_every_perplexity(evaluate, tmp_path: Path) -> None:
    """exp(sum loss_sum / sum targets) of each protocol and length is the run's perplexity."""
    ids, _, result = evaluate()
    out = {"extrapolation": result}
    write_records(tmp_path, take_records(out), out)
    assert RECORDS not in result
    units = read_units(tmp_path / "eval" / "extrapolation" / UNITS_FILE)
    assert {p for p, _ in units} == {"nonoverlapping", "tail"}
    for (protocol, n), s in units.items():
        part = result["tail"] if protocol == "tail" else result
        assert math.exp(s.loss_sum.sum() / s.targets.sum()) == pytest.approx(
            part["ppl"][str(n)], rel=1e-12
        )
        assert s.targets.max() <= L  # unit_tokens defaults to the training length
    at_16 = units[("nonoverlapping", 16)]
    assert all(
        np.array_equal(at_16.targets, units[("nonoverlapping", n)].targets) for n in (32, 64)
    )


def test_a_unit_never_spans_two_documents() -> None:
    ids = np.array([1, 2, 3, EOT, 4, 5, 6, 12, 8, EOT, 9, 10, 11])
    targets = np.arange(12)
    s = unit_sums(ids, targets, np.arange(12.0), EOT, unit_tokens=4)
    # documents: targets 0-2, 3-8 (its first target is the <|endoftext|>), 9-11
    assert s.document.tolist() == [0, 1, 1, 2]
    assert s.targets.tolist() == [3, 4, 2, 3]
    assert s.loss_sum.tolist() == [3.0, 3 + 4 + 5 + 6, 7 + 8, 9 + 10 + 11]


def test_the_digest_names_the_targets_and_their_tokens() -> None:
    ids = np.arange(50) % 13
    same = targets_digest(ids, np.arange(10, 20))
    assert same == targets_digest(ids.copy(), np.arange(19, 9, -1))
    assert same != targets_digest(ids, np.arange(11, 21))
    other = ids.copy()
    other[15] = 12
    assert same != targets_digest(other, np.arange(10, 20))


@pytest.mark.parametrize(
    "text",
    [
        "protocol,length,document,unit,loss,targets\n",
        "protocol,length,document,unit,loss_sum,targets\ntail,16,0,0,abc,3\n",
        "protocol,length,document,unit,loss_sum,targets\ntail,16,0,0,-1.0,3\n",
        "protocol,length,document,unit,loss_sum,targets\ntail,16,0,0,nan,3\n",
        "protocol,length,document,unit,loss_sum,targets\ntail,x,0,0,1.0,3\n",
        "protocol,length,document,unit,loss_sum,targets\ntail,16,0,0,1.0\n",
        "protocol,length,document,unit,loss_sum,targets\ntail,16,²,0,1.0,3\n",
        "protocol,length,document,unit,loss_sum,targets\ntail," + "9" * 5000 + ",0,0,1.0,3\n",
        "protocol,length,document,unit,loss_sum,targets\ntail,16," + "1" + "0" * 30 + ",0,1.0,3\n",
        "protocol,length,document,unit,loss_sum,targets\ntail,16,0,0,1.0,3\ntail,16,0,0,2.0,3\n",
    ],
)
def test_a_units_csv_posenc_did_not_write_is_refused(text: str, tmp_path: Path) -> None:
    path = tmp_path / UNITS_FILE
    path.write_text(text)
    with pytest.raises(UnitsFileError):
        read_units(path)


def test_a_record_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / UNITS_FILE)
    with pytest.raises(UnitsFileError):
        read_units(tmp_path / UNITS_FILE)  # refused before it is opened: no hang


def test_records_of_rejected_or_non_finite_results_are_not_written(tmp_path: Path) -> None:
    out = {
        "extrapolation": {"ppl": {"16": 3.0}, RECORDS: {UNITS_FILE: "x"}},
        "extrapolation_pi": {"ppl": {"16": math.nan}, RECORDS: {UNITS_FILE: "x"}},
    }
    files = take_records(out)
    assert all(RECORDS not in r for r in out.values())
    write_records(tmp_path, files, {"extrapolation_pi": out["extrapolation_pi"]})
    assert not (tmp_path / "eval").exists()  # one not kept, one not finite
    write_records(tmp_path, files, out)
    assert (tmp_path / "eval" / "extrapolation" / UNITS_FILE).read_text() == "x"
    assert not (tmp_path / "eval" / "extrapolation_pi").exists()


def test_a_unit_larger_than_the_shortest_window_is_refused(config) -> None:
    task = get_task("extrapolation")
    task.check(config("eval.extrapolation.unit_tokens=16"))  # one window of L: accepted
    with pytest.raises(PosencError) as err:
        task.check(config("eval.extrapolation.unit_tokens=17"))
    assert "larger than a window of the shortest evaluated length 16" in err.value.what
    assert "unit_tokens <= 16" in err.value.fix
