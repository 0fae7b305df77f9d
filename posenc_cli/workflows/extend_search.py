"""`posenc extend extend.method=longrope extend.steps=N` given fewer than both factor sets: the
missing ones are found before the new run exists, by the search `posenc eval` runs
(evals/longrope_search.py), on the weights the run starts from and the parent's validation
text, with the run's seed — the long set at the fine-tuning length S·L (the length LongRoPE
searches at before it fine-tunes), the short set at L.

The sets found are written into the new run's config (extend.long_factor, extend.short_factor)
before it is saved, so its training, `posenc resume`, `posenc eval` and `posenc export-hf` all
rebuild the model with exactly them (engine/build.py) and never search again.
"""

from __future__ import annotations

import copy

import numpy as np
from omegaconf import DictConfig
from torch import nn

from posenc_cli.common.console import console
from posenc_cli.config.run_config import RunConfig, typed
from posenc_cli.data.prepare import prepare
from posenc_cli.engine.build import build_lm
from posenc_cli.engine.extension import parent_weights
from posenc_cli.engine.runtime import Runtime, make_runtime
from posenc_cli.evals.longrope_search import Search


def with_rescale_sets(cfg: DictConfig) -> DictConfig:
    """A new run's config (not yet saved) with longrope's missing factor sets searched and
    recorded; ``cfg`` itself for another method or when both sets are given."""
    run = typed(cfg)
    ext = run.extend
    if ext.method != "longrope" or None not in (ext.long_factor, ext.short_factor):
        return cfg
    assert ext.original_length is not None  # set with the parent (config/extension.py)
    L, longer = ext.original_length, run.train.context_length
    console.print(
        f"posenc extend: searching longrope's missing factor sets on {ext.parent}'s "
        f"validation text (seed {run.seed}): the long set at {longer} tokens, the short set "
        f"at {L}",
        highlight=False,
    )
    rt = make_runtime(run)
    rng = np.random.default_rng(run.seed)
    search = Search(parent_model(run, rt), prepare(run.data).val, L, ext.factor, rt, rng)
    long, short, _ = search.missing(ext.long_factor, ext.short_factor, longer, True)
    out = copy.deepcopy(cfg)
    out.extend.long_factor, out.extend.short_factor = long, short
    console.print(
        "posenc extend: recorded in the new run's config: extend.long_factor ≈ "
        f"{_shown(long)}, extend.short_factor ≈ {_shown(short)}",
        highlight=False,
    )
    return out


def parent_model(run: RunConfig, rt: Runtime) -> nn.Module:
    """The parent's model (no extension adopted) with the weights ``run`` starts from, in
    evaluation mode on the run's device."""
    assert run.extend.original_length is not None  # set with the parent (config/extension.py)
    state = parent_weights(run)
    vocab = int(state["lm_head.weight"].shape[0])
    model = build_lm(run.model, run.encoding.as_yaml(), vocab, None, run.extend.original_length)
    model.load_state_dict(state)
    return model.to(rt.device).eval()


def _shown(values: list[float]) -> str:
    return "[" + ",".join(f"{v:.4g}" for v in values) + "]"
