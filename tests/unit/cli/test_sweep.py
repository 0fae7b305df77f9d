"""`posenc sweep`'s plan: every job composed and validated before any runs (the sweeps
themselves are in tests/e2e/)."""

from __future__ import annotations

from posenc_cli.cli.sweep import plan
from posenc_cli.config.groups import group_options
from posenc_cli.config.overrides import expand_sweep


def test_the_two_studies_plan_every_encoding_once() -> None:
    swept = []
    for study in ("extrapolation", "extrapolation_modern"):
        base, jobs = plan([f"experiment={study}"])
        swept += [j for job in jobs for j in job if j.startswith("encoding=")]
        params = {str(k): str(v) for k, v in base.hydra.sweeper.params.items()}
        assert len(expand_sweep(["seed=0,1,2"], params)) == 3 * len(jobs)
    shared = ["encoding=alibi", "encoding=rope", "encoding=t5"]   # the modern study's anchors
    assert sorted(swept) == sorted([f"encoding={n}" for n in group_options("encoding")] + shared)
