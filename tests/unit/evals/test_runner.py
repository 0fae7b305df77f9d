"""run_tasks: every configured task under its key, logged to TensorBoard in the run directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from posenc_cli.evals.runner import run_tasks


def test_tensorboard_tags_and_hparams_in_the_run_directory(
    tmp_path: Path, config, model_for, token_data, rt
) -> None:
    cfg = config("eval.tasks=[extrapolation]")  # the token data has no tokenizer
    model = model_for(cfg).train()
    with SummaryWriter(str(tmp_path)) as writer:
        out = run_tasks(model, token_data(), cfg, rt, writer)
    assert model.training and set(out) == {"extrapolation"}
    assert not [p for p in tmp_path.iterdir() if p.is_dir()], "add_hparams-style sub-run made"
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    points = acc.Scalars("extrapolation/ppl")
    assert [e.step for e in points] == [16, 32, 64, 128, 256]
    result = out["extrapolation"]
    assert [e.value for e in points] == [
        pytest.approx(result["ppl"][str(n)]) for n in result["lengths"]
    ]
    for tag in ("extrapolation/ppl", "extrapolation/tail/ppl", "extrapolation/loss"):
        assert acc.SummaryMetadata(tag).summary_description.startswith("x axis: the evaluation")
    (image,) = acc.Images("extrapolation/ppl_vs_length")
    assert image.width == 600 and image.height == 400 and image.step == cfg.train.steps
    (text,) = acc.Tensors("extrapolation/table/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    assert f"| 256 | 16 | {result['ppl']['256']:.2f} |" in table
    tags = acc.Tags()
    assert {"hparams/ppl_x1", "hparams/ppl_x16", "extrapolation/loss_by_position"} <= set(
        tags["scalars"]
    )
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(
        acc.PluginTagToContent("hparams")
    )
