"""`posenc sweep`'s plan: every job composed and validated before any runs (the sweeps
themselves are in tests/e2e/)."""

from __future__ import annotations

from posenc_cli.cli.sweep import plan
from posenc_cli.config.groups import group_options


def test_extrapolation_experiment_sweeps_every_encoding() -> None:
    base, jobs = plan(["experiment=extrapolation"])
    swept = sorted({j for job in jobs for j in job if j.startswith("encoding=")})
    assert swept == sorted(f"encoding={n}" for n in group_options("encoding"))
    _, three = plan(["experiment=extrapolation", "seed=0,1,2"])
    assert len(three) == 3 * len(jobs)
