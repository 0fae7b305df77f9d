"""An imported model written as a posenc run directory, by one function for every bridge.

The directory holds what `posenc train` writes — .hydra/config.yaml, tokenizer.json,
checkpoints/last.pt and best.pt (each with its weights' digest), metrics.json marked with where
the weights came from — so `posenc eval`, `inspect`, `compare` and `export-*` take it like any
other run, and `posenc resume` names its origin when it refuses to train it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.run_layout import RunDir
from posenc_cli.config.rundir import save_run_config, unlock_run_dir
from posenc_cli.engine.checkpoint import save_atomic, state_digest
from posenc_cli.engine.metrics import merge_metrics
from posenc_cli.model import TransformerLM


def write_imported_run(
    run_dir: Path,
    cfg: DictConfig,
    overrides: list[str],
    model: TransformerLM,
    step: int,
    save_tokenizer: Callable[[Path], None],
    metrics: dict[str, Any],
) -> None:
    """Fill the claimed ``run_dir``, then release it, so `posenc eval` can take it at once. An
    import stopped midway (a signal, a full disk) removes the directory it had just claimed:
    a run without its checkpoints would look like one that is still training."""
    layout = RunDir(run_dir)
    try:
        save_run_config(run_dir, cfg, overrides)
        save_tokenizer(layout.tokenizer_file)
        weights = model.state_dict()
        state = {
            "model": weights,
            "weights_sha256": state_digest(weights),
            "step": step,
            "imported": True,
            "config": OmegaConf.to_container(
                OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"])
            ),
        }
        save_atomic(state, layout.checkpoint("last"))
        save_atomic({**state, "val_loss": None}, layout.checkpoint("best"))
        merge_metrics(run_dir, metrics)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    finally:
        unlock_run_dir(run_dir)
