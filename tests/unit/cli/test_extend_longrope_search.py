"""`posenc extend extend.method=longrope extend.steps=N` without both factor sets: the missing
ones are searched on the parent (its weights, its validation text, the run's seed) before the
new run exists — the long set at S·L, the short set at L — and written into the new run's
config; the same plan finds the same sets, and given sets are kept as they are (in-process,
the validation text replaced by random ids)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from posenc_cli.config.compose import compose, load
from posenc_cli.engine.build import build_model
from posenc_cli.evals.longrope_search import LONG_BOUND, Search
from posenc_cli.workflows import extend_search
from posenc_cli.workflows.extend_plan import plan_jobs
from posenc_cli.workflows.extend_search import with_rescale_sets

PARENT = ["model=tiny", "train.context_length=16", "device=cpu", "seed=3"]
EIGHT = "[1,1,1,2,2,3,4,4]"


@pytest.fixture
def parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny rope run trained at L = 16 (random weights), whose validation text is random ids."""
    run = tmp_path / "parent"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(compose(PARENT)))
    (run / "checkpoints").mkdir()
    torch.manual_seed(0)
    model = build_model(load(PARENT), 64)
    torch.save({"model": model.state_dict(), "step": 5}, run / "checkpoints" / "last.pt")
    val = np.random.default_rng(0).integers(0, 64, 2000).astype(np.uint16)
    monkeypatch.setattr(extend_search, "prepare", lambda data: SimpleNamespace(val=val))
    monkeypatch.chdir(tmp_path)
    return run


def planned(run: Path, *extend: str) -> DictConfig:
    args = ["extend.method=longrope", "extend.factor=4", "extend.steps=2", *extend]
    jobs, _ = plan_jobs(run, [*args, "hydra.run.dir=child"])
    assert jobs[0].cfg is not None
    return jobs[0].cfg


def test_missing_sets_are_searched_on_the_parent_and_recorded(
    parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    searched: list[tuple[bool, int]] = []
    run = Search.run

    def spy(self: Search, long: bool, length: int, used: bool) -> tuple[list[float], dict]:
        searched.append((long, length))
        return run(self, long, length, used)

    monkeypatch.setattr(Search, "run", spy)
    cfg = planned(parent)
    found = with_rescale_sets(cfg)
    assert searched == [(True, 64), (False, 16)]  # the long set at S·L, the short one at L
    assert cfg.extend.long_factor is None  # the plan itself is left as it was
    long, short = found.extend.long_factor, found.extend.short_factor
    for lam, high in ((long, LONG_BOUND * 4), (short, 4.0)):
        assert len(lam) == 8 and list(lam) == sorted(lam) and 1.0 <= min(lam) <= max(lam) <= high
    assert with_rescale_sets(planned(parent)).extend == found.extend  # the seed's draws
    assert build_model(load(PARENT), 64).encoding.switch_length is None
    assert not (parent.parent / "child").exists()


def test_a_given_set_is_kept_and_only_the_other_searched(parent: Path) -> None:
    found = with_rescale_sets(planned(parent, f"extend.short_factor={EIGHT}")).extend
    assert list(found.short_factor) == [1, 1, 1, 2, 2, 3, 4, 4] and len(found.long_factor) == 8


def test_nothing_is_searched_with_both_sets_or_for_another_method(
    parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("searched")

    monkeypatch.setattr(extend_search, "parent_model", refuse)
    given = planned(parent, f"extend.long_factor={EIGHT}", f"extend.short_factor={EIGHT}")
    assert with_rescale_sets(given) is given
    jobs, _ = plan_jobs(parent, ["extend.method=yarn", "extend.steps=2", "hydra.run.dir=y"])
    assert jobs[0].cfg is not None and with_rescale_sets(jobs[0].cfg) is jobs[0].cfg
