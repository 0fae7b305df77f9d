"""A task defined only here — no YAML, no edit anywhere else — runs with its own settings
(eval.mean_token.*), logs to TensorBoard, and prints through the commands' console code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from posenc_cli.cli.console import print_eval_result, print_run_summary
from posenc_cli.common.console import console
from posenc_cli.config.run_config import typed
from posenc_cli.evals.base import EvalTask, task_of
from posenc_cli.evals.result_view import MetricTable, ResultView
from posenc_cli.evals.run import EvalWriters, apply_overrides
from posenc_cli.evals.runner import run_tasks


class MeanToken(EvalTask):
    """scale x the mean held-out token id: a number the test computes on its own."""

    name = "mean_token"
    defaults = {"scale": 2.0}
    result_view = ResultView((MetricTable("by_length", "mean token by length"),))

    def run(self, model: Any, data: Any, cfg: Any, rt: Any) -> dict[str, Any]:
        value = float(self.settings(cfg).scale) * float(data.val.mean())
        return {
            "value": value,
            "by_length": {"16": value},
        }

    def log(self, writer: Any, key: str, result: dict[str, Any], cfg: Any) -> None:
        writer.add_scalar(f"{key}/value", result["value"], 0)

    def summary(self, result: dict[str, Any]) -> list[tuple[str, str]]:
        return [("mean token x scale", f"{result['value']:.3f}")]

    def render(self, run_dir: Path, cfg: Any, key: str, result: dict[str, Any]) -> list[Any]:
        return [f"{key}: mean token x scale = {result['value']:.3f}"]


def _evaluate(cfg: Any, model: Any, data: Any, rt: Any, run_dir: Path) -> dict[str, Any]:
    writers = EvalWriters(run_dir)
    try:
        return run_tasks(model, data, cfg, rt, None, writer_for=writers.get)
    finally:
        writers.close()


def test_a_task_from_tests_runs_logs_and_prints(
    composed, model_for, token_data, rt, tmp_path: Path
) -> None:
    cfg = typed(
        apply_overrides(
            composed(),
            [
                "eval.tasks=[mean_token,extrapolation]",
                "eval.mean_token.scale=3",
                "eval.factors=[1]",
            ],
        )
    )
    data = token_data(600)
    out = _evaluate(cfg, model_for(cfg), data, rt, tmp_path)
    expected = 3.0 * sum(int(i) for i in data.val) / len(data.val)
    assert abs(out["mean_token"]["value"] - expected) < 1e-9
    assert task_of("mean_token") is not None and task_of("mean_token_fp32").name == "mean_token"
    events = EventAccumulator(str(tmp_path / "eval" / "mean_token"))
    events.Reload()
    assert abs(events.Scalars("mean_token/value")[0].value - expected) < 1e-3
    metrics = {
        "encoding": "rope",
        "seed": 0,
        "n_params": 1,
        "steps": 1,
        "train_tokens": 1,
        "vocab_size": 300,
        "final_train_loss": 1.0,
        "final_val_loss": 1.0,
        **out,
    }
    with console.capture() as captured:
        print_eval_result(tmp_path, cfg, "mean_token", out["mean_token"])
        print_run_summary(metrics, tmp_path)
    text = captured.get()
    assert f"mean token x scale = {expected:.3f}" in text
    assert "mean token x scale" in text.split("posenc run")[1] and "ppl by length" in text


def test_its_settings_default_to_its_own_and_the_older_flat_keys_still_map(composed) -> None:
    asked = apply_overrides(composed(), ["eval.tasks=[mean_token]", "eval.mode=sliding"])
    cfg = typed(asked)
    assert MeanToken().settings(cfg).scale == 2.0
    assert cfg.eval.extrapolation.mode == "sliding" == asked.eval.mode


def test_a_saved_config_of_flat_eval_keys_loads_into_the_section(composed, tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from posenc_cli.config.rundir import load_run_config

    saved = OmegaConf.to_container(composed(), resolve=True)
    del saved["eval"]["extrapolation"]  # a run saved before the sections: flat values only
    saved["eval"].update(factors=[1, 8], mode="sliding", stride=4)
    (tmp_path / ".hydra").mkdir()
    OmegaConf.save(OmegaConf.create(saved), tmp_path / ".hydra" / "config.yaml")
    cfg = apply_overrides(load_run_config(tmp_path), ["eval.extrapolation.stride=2"])
    section = typed(cfg).eval.extrapolation
    assert (list(section.factors), section.mode, section.stride, section.tokens) == (
        [1, 8],
        "sliding",
        2,
        512,
    )
    assert list(cfg.eval.factors) == [1, 8] and cfg.eval.stride == 2


def test_compare_shows_its_table_by_length_averaged_over_seeds(tmp_path: Path, capsys) -> None:
    import json

    from posenc_cli.report.compare import compare

    for seed, value in ((0, 1.0), (1, 3.0)):
        run = tmp_path / f"run{seed}"
        run.mkdir()
        result = {
            "by_length": {"16": value},
        }
        (run / "metrics.json").write_text(
            json.dumps({"encoding": "rope", "seed": seed, "mean_token": result})
        )
    compare([tmp_path], tmp_path / "out")
    table = (tmp_path / "out" / "mean_token.md").read_text()
    assert "| rope | 2 | 2.000 ± 1.414 |" in table
    assert "mean token by length" in capsys.readouterr().out
