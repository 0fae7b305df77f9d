"""A metrics.json holding numbers posenc could not have written (a received or hand-edited
run) is skipped by `posenc compare` with a note naming the value; the other runs are compared
as if it were absent."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from posenc_cli.common.errors import PosencError
from posenc_cli.report.runs import group_runs, load_runs


def tamper(metrics: dict[str, Any], where: str, value: Any) -> dict[str, Any]:
    """``metrics`` with the dotted key ``where`` set to ``value``."""
    *path, last = where.split(".", 2) if where.startswith("extrapolation") else [where]
    node = metrics
    for key in path:
        node = node[key]
    node[last] = value
    return metrics


@pytest.mark.parametrize(
    ("where", "value", "named"),
    [
        ("extrapolation.ppl.128", -5.0, "extrapolation.ppl.128 is -5.0, not a finite number >= 1"),
        ("extrapolation.ppl.256", 0.5, "extrapolation.ppl.256 is 0.5, not a finite number >= 1"),
        ("extrapolation.ppl.512", "abc", "extrapolation.ppl.512 is 'abc', not a number"),
        ("extrapolation.ppl.512", True, "extrapolation.ppl.512 is True, not a number"),
        ("extrapolation.ppl", "low", "extrapolation.ppl is 'low', not a table by length"),
        ("extrapolation.loss.128", -1.0, "extrapolation.loss.128 is -1.0, not a finite"),
        ("final_val_loss", float("nan"), "final_val_loss is nan, not a finite number >= 0"),
        ("tokens_per_s", -3, "tokens_per_s is -3, not a finite number >= 0"),
        ("train_length", "sixteen", "train_length is 'sixteen', not a whole number >= 1"),
        ("steps", 2.5, "steps is 2.5, not a whole number >= 1"),
        ("encoding", ["x"], "encoding is ['x'], not a name"),
        ("model", {"layers": [["x"]]}, "model.layers is [['x']], not a list of names"),
        (
            "model",
            {"layer_encodings": {"t5": {"a": {"b": 1}}}},
            "model.layer_encodings.t5 is {'a': {'b': 1}}, not plain parameters",
        ),
    ],
)
def test_a_tampered_run_is_skipped_with_a_note_naming_the_value(
    where: str,
    value: Any,
    named: str,
    tmp_path: Path,
    write_run: Callable[..., Path],
    fake_metrics: Callable[..., dict[str, Any]],
) -> None:
    write_run(tmp_path, "good", fake_metrics("rope", 0))
    bad = write_run(tmp_path, "bad", tamper(fake_metrics("alibi", 0), where, value))
    notes: list[str] = []
    runs = load_runs([tmp_path], notes)
    assert [r.encoding for r in runs] == ["rope"]
    assert len(notes) == 1 and notes[0].startswith(f"skipped {bad / 'metrics.json'}: {named}")
    (group,) = group_runs(runs, [])
    assert group.rows[0].ppl[128].mean == 60.0  # the good run's own value (conftest CURVES)


def test_posenc_writes_infinity_as_null_and_compare_reads_that(
    tmp_path: Path, write_run: Callable[..., Path], fake_metrics: Callable[..., dict[str, Any]]
) -> None:
    write_run(tmp_path, "null", tamper(fake_metrics("rope", 0), "extrapolation.ppl.128", None))
    notes: list[str] = []
    (group,) = group_runs(load_runs([tmp_path], notes), notes)
    assert group.rows[0].ppl[128] is None and group.rows[0].ppl[256].mean == 75.0


def test_only_tampered_runs_is_one_line(
    tmp_path: Path, write_run: Callable[..., Path], fake_metrics: Callable[..., dict[str, Any]]
) -> None:
    run = write_run(tmp_path, "bad", fake_metrics("rope", 0))
    text = json.dumps(fake_metrics("rope", 0)).replace('"128": 60.0', '"128": Infinity')
    (run / "metrics.json").write_text(text)
    with pytest.raises(PosencError, match="none of the 1 metrics.json files could be read"):
        load_runs([tmp_path], [])


def test_a_run_with_results_under_other_settings_only_says_so(
    tmp_path: Path,
    write_run: Callable[..., Path],
    fake_metrics: Callable[..., dict[str, Any]],
) -> None:
    """`posenc eval RUN eval=quick` writes under a key of its settings: the note names it
    instead of blaming eval.at_end, and no units note follows."""
    write_run(tmp_path, "good", fake_metrics("rope", 0))
    other = fake_metrics("rope", 1)
    other["extrapolation_t999"] = other.pop("extrapolation")
    write_run(tmp_path, "other", other)
    notes: list[str] = []
    group_runs(load_runs([tmp_path], notes), notes)
    assert len(notes) == 1 and notes[0].endswith(
        "has no extrapolation results of its own settings (only extrapolation_t999, evaluated "
        "with other settings, which no table pools)"
    )
