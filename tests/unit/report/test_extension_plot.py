"""`posenc compare`'s figure with `posenc extend` runs: a colour per method (per encoding when
several parents share it), dashed without fine-tuning, a marker and width per step count;
without extension runs the usual figure, one colour per row."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from posenc_cli.report.extension_plot import MARKERS, PARENT_COLOUR, extension_styles
from posenc_cli.report.plots import plot_ppl_vs_length
from posenc_cli.report.runs import Group, group_runs, load_runs

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _extension(
    fake_metrics, encoding: str, method: str, steps: int, length: int = 512
) -> dict[str, Any]:
    """A fine-tuned run's metrics.json: trained at 512 from a parent trained at 128."""
    m = fake_metrics(encoding, 0, train_length=512)
    m["steps"] = steps
    m["train_tokens"] = 1000
    parent = {"path": encoding, "step": 2000, "train_length": 128, "steps": 2000}
    m["extend"] = {"method": method, "steps": steps, "train_length": length, "factor": length / 128}
    m["extend"]["parent"] = {**parent, "train_tokens": 2048000}
    return m


def _groups(root: Path) -> list[Group]:
    notes: list[str] = []
    return group_runs(load_runs([root], notes), notes)


@pytest.fixture(scope="module")
def rope_grid(tmp_path_factory: pytest.TempPathFactory, fake_metrics, write_run) -> Path:
    """A rope parent evaluated with yarn and pi (0 steps); none, pi and yarn at 100 and 400."""
    root = tmp_path_factory.mktemp("grid")
    parent = fake_metrics("rope", 0)
    for method in ("yarn", "pi"):
        parent[f"extrapolation_{method}4"] = {
            **copy.deepcopy(parent["extrapolation"]),
            "rope_scaling": method,
        }
    write_run(root, "rope", parent)
    for method in ("none", "pi", "yarn"):
        for steps in (400, 100):
            write_run(root, f"{method}-{steps}", _extension(fake_metrics, "rope", method, steps))
    return root


def test_one_parent_gets_a_colour_per_method_and_a_line_per_step_count(rope_grid: Path) -> None:
    (group,) = groups = _groups(rope_grid)
    styles = extension_styles(groups)
    assert styles is not None and styles.by_method and styles.steps == [(100, 512), (400, 512)]
    line = {row.label: styles.line(row) for row in group.rows}
    assert len(line) == 9
    assert line["rope"]["color"] == PARENT_COLOUR and line["rope"]["linestyle"] == "--"
    assert line["rope + yarn x4"]["color"] == line["rope + yarn, 400 steps @512"]["color"]
    assert line["rope + pi x4"]["color"] == line["rope + pi, 100 steps @512"]["color"]
    assert len({line[f"rope{m}, 100 steps @512"]["color"] for m in ("", " + pi", " + yarn")}) == 3
    assert {line[k]["linestyle"] for k in ("rope + yarn x4", "rope + pi x4")} == {"--"}
    short = line["rope + pi, 100 steps @512"]
    long = line["rope + pi, 400 steps @512"]
    assert (short["linestyle"], short["marker"], long["marker"]) == ("-", *MARKERS[:2])
    assert long["linewidth"] > short["linewidth"]


def test_continued_training_at_l_and_at_4l_get_their_own_markers(
    tmp_path: Path, fake_metrics, write_run
) -> None:
    write_run(tmp_path, "rope", fake_metrics("rope", 0))
    write_run(tmp_path, "none-512", _extension(fake_metrics, "rope", "none", 400))
    write_run(tmp_path, "none-128", _extension(fake_metrics, "rope", "none", 400, length=128))
    (group,) = groups = _groups(tmp_path)
    styles = extension_styles(groups)
    assert styles is not None and styles.steps == [(400, 128), (400, 512)]
    line = {row.label: styles.line(row) for row in group.rows}
    at_l, at_4l = line["rope, 400 steps @128"], line["rope, 400 steps @512"]
    assert at_l["color"] == at_4l["color"] and (at_l["marker"], at_4l["marker"]) == MARKERS[:2]


def test_several_parents_get_a_colour_per_encoding(tmp_path: Path, fake_metrics, write_run) -> None:
    write_run(tmp_path, "alibi", fake_metrics("alibi", 0))
    write_run(tmp_path, "rope", fake_metrics("rope", 0))
    write_run(tmp_path, "alibi-400", _extension(fake_metrics, "alibi", "none", 400))
    write_run(tmp_path, "rope-yarn", _extension(fake_metrics, "rope", "yarn", 400))
    (group,) = groups = _groups(tmp_path)
    styles = extension_styles(groups)
    assert styles is not None and not styles.by_method
    line = {row.label: styles.line(row) for row in group.rows}
    assert line["alibi"]["color"] == line["alibi, 400 steps @512"]["color"]
    assert line["alibi"]["linestyle"] == "--" and line["alibi, 400 steps @512"]["linestyle"] == "-"
    assert len({line[k]["color"] for k in ("alibi", "rope", "rope + yarn, 400 steps @512")}) == 3


def test_runs_without_extensions_keep_the_usual_figure(groups: list[Group]) -> None:
    assert extension_styles(groups) is None


def test_the_extension_figure_is_written(rope_grid: Path, tmp_path: Path) -> None:
    assert plot_ppl_vs_length(_groups(rope_grid), tmp_path / "ppl.png")
    png = (tmp_path / "ppl.png").read_bytes()
    assert png.startswith(PNG_SIGNATURE) and len(png) > 20_000
