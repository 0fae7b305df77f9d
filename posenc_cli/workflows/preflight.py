"""The checks that need torch or the data, run before a run directory is claimed."""

from __future__ import annotations

from posenc_cli.common.errors import PosencError
from posenc_cli.config.run_config import RunConfig
from posenc_cli.data.prepare import check_data_fits, prepare
from posenc_cli.engine.extension import same_tokenizer
from posenc_cli.engine.memory import check_training_memory
from posenc_cli.engine.runtime import check_flex_training, pick_device, pick_precision
from posenc_cli.evals.base import get_task
from posenc_cli.workflows.ranks import check_nproc


def preflight(cfg: RunConfig, data_fit: bool = True) -> None:
    """The device and precision exist here, the sizes fit in memory, the evaluation tasks exist
    (and their settings hold when training ends on an evaluation), the data are prepared and
    (unless ``data_fit`` is off: a sweep reports such a job as failed) fit the run."""
    if cfg.eval.extrapolation.rope_scaling != "none" and cfg.extend.parent is None:
        raise PosencError(
            f"eval.rope_scaling={cfg.eval.extrapolation.rope_scaling} is an evaluation of a "
            "trained run, not a training setting",
            f"train without it, then `posenc eval RUN_DIR "
            f"eval.rope_scaling={cfg.eval.extrapolation.rope_scaling}`",
        )
    if cfg.extend.passkey_share > 0 and cfg.extend.parent is None:
        raise PosencError(
            "extend.passkey_share is the passkey fine-tune of a trained run, not a training "
            "setting",
            "train without it, then `posenc extend RUN_DIR extend.factor=1 extend.method=none "
            "extend.passkey_share=1.0` (docs/evaluation.md)",
        )
    pick_precision(cfg.train.precision, pick_device(cfg.device))
    check_flex_training(cfg, pick_device(cfg.device))
    cuda = check_nproc(cfg)
    check_training_memory(cfg, cuda)
    tasks = [get_task(name) for name in cfg.eval.tasks]
    if cfg.eval.at_end:  # else `posenc eval` checks the settings it evaluates with
        for task in tasks:
            task.check(cfg)  # none reads the data: refused before minutes of tokenizing
    if not cfg.task.synthetic:  # a synthetic task needs no corpus
        data = prepare(cfg.data)
        same_tokenizer(data.tokenizer_path, cfg)
        if data_fit:
            check_data_fits(data, cfg.data, cfg.train.context_length)
