"""`posenc compare` shows each RoPE-scaling evaluation of a run as a row of its own beside the
run's plain result, and older runs without a newer encoding parameter join newer ones."""

from __future__ import annotations

import copy
from pathlib import Path

from posenc_cli.report.runs import group_runs, load_runs


def test_scaling_results_are_rows_beside_plain_rope(
    tmp_path: Path, fake_metrics, write_run
) -> None:
    for seed in (0, 1):
        m = fake_metrics("rope", seed)
        yarn = copy.deepcopy(m["extrapolation"])
        yarn["ppl"] = {k: v / 2 for k, v in yarn["ppl"].items()}
        yarn.update(rope_scaling="yarn", rope_factors={"128": 16.0})
        m["extrapolation_yarn"] = yarn
        m["extrapolation_sliding64"] = copy.deepcopy(m["extrapolation"])  # not a variant row
        write_run(tmp_path, f"rope_{seed}", m)
    notes: list[str] = []
    (group,) = group_runs(load_runs([tmp_path], notes), notes)
    rows = {row.label: row for row in group.rows}
    assert sorted(rows) == ["rope", "rope + yarn"]
    assert rows["rope + yarn"].ppl[128].mean == rows["rope"].ppl[128].mean / 2
    assert rows["rope + yarn"].ppl[128].n == 2


def test_a_parameter_missing_from_an_old_run_takes_its_yaml_default(
    tmp_path: Path, fake_metrics, write_run
) -> None:
    for seed, extra in ((0, ""), (1, "rotary_fraction: 1.0\np: 1.0\n")):
        run = write_run(tmp_path, f"rope_{seed}", fake_metrics("rope", seed))
        (run / ".hydra").mkdir()
        (run / ".hydra" / "config.yaml").write_text(
            "encoding:\n  name: rope\n  _target_: posenc_cli.encodings.rope.RotaryEncoding\n"
            "  theta: 10000.0\n" + "".join(f"  {line}\n" for line in extra.splitlines())
        )
    notes: list[str] = []
    (group,) = group_runs(load_runs([tmp_path], notes), notes)
    assert [(row.label, row.ppl[128].n) for row in group.rows] == [("rope", 2)]


def test_a_variant_with_its_own_factor_is_labelled_method_and_factor() -> None:
    from posenc_cli.report.extension_rows import variant_label

    metrics = {
        "extrapolation_llama34": {"rope_scaling": "llama3"},
        "extrapolation_yarn": {"rope_scaling": "yarn"},
        "extrapolation_pi2.5": {"rope_scaling": "pi"},
    }
    assert variant_label(metrics, "extrapolation_llama34") == "llama3 x4"
    assert variant_label(metrics, "extrapolation_yarn") == "yarn"
    assert variant_label(metrics, "extrapolation_pi2.5") == "pi x2.5"


def test_a_dynamic_ntk_extension_is_one_row_labelled_like_the_other_extensions(
    tmp_path: Path, fake_metrics, write_run
) -> None:
    """Scored at the end of training (key extrapolation) or by `posenc eval` later (key
    extrapolation_dynamic_ntk), or both: one row, under the run's own label."""
    parent = fake_metrics("rope", 0)
    parent["extrapolation_dynamic_ntk"] = {**parent["extrapolation"], "rope_scaling": "dynamic_ntk"}
    write_run(tmp_path, "rope", parent)
    for steps, keys in ((100, ["extrapolation"]), (400, ["extrapolation_dynamic_ntk"])):
        m = fake_metrics("rope", 0, train_length=512)
        scored = m.pop("extrapolation")
        for i, key in enumerate(keys):
            m[key] = {**scored, "rope_scaling": "dynamic_ntk", "ppl": {"128": 50.0 + steps + i}}
        if steps == 100:
            m["extrapolation_dynamic_ntk"] = {**m["extrapolation"], "ppl": {"128": 1.0}}
        m["extend"] = {"method": "dynamic_ntk", "steps": steps, "train_length": 512}
        m["extend"]["parent"] = {"train_length": 128, "steps": 2000, "train_tokens": 2048000}
        write_run(tmp_path, f"dynamic_ntk-{steps}", m)
    notes: list[str] = []
    (group,) = group_runs(load_runs([tmp_path], notes), notes)
    rows = {row.label: row.ppl[128].mean for row in group.rows}
    assert rows == {
        "rope": 60.0,
        "rope + dynamic_ntk": 60.0,
        "rope + dynamic_ntk, 100 steps @512": 150.0,
        "rope + dynamic_ntk, 400 steps @512": 450.0,
    }
    assert not [n for n in notes if "more than once" in n or "no extrapolation" in n]
