"""compare shows a single run's own 95 % interval, and no longer reads overlapping intervals as
"no difference": that takes the paired tables (test_paired_report.py)."""

from __future__ import annotations

import json
from pathlib import Path

from posenc_cli.report.compare import cells
from posenc_cli.report.runs import group_runs, load_runs


def test_overlapping_intervals_are_shown_but_not_read_as_a_tie(
    tmp_path: Path, fake_metrics
) -> None:
    width = {"rope": 1.0, "alibi": 3.0, "sinusoidal": 1.0}
    for enc, w in width.items():
        m = fake_metrics(enc, 0)
        ex = m["extrapolation"]
        ex["ppl_ci95"] = {k: [v - w, v + w] for k, v in ex["ppl"].items()}
        (tmp_path / enc).mkdir()
        (tmp_path / enc / "metrics.json").write_text(json.dumps(m))
    (group,) = group_runs(load_runs([tmp_path], []), [])
    header, body = cells(group)
    at_128 = {row[0][0]: row[2] for row in body}  # rope 60 [59-61] is best at 128
    assert at_128["rope"] == ("60.00 [59.00–61.00]", True)
    assert at_128["alibi"][0] == "62.00 [59.00–65.00]"  # overlaps rope's: no verdict here
    assert at_128["sinusoidal"][0] == "64.00 [63.00–65.00]"  # does not
