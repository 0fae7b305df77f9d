"""`posenc bench`'s settings: checked before any run directory exists (the bench runs are in
tests/e2e/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posenc_cli.bench.suite import compose_bench
from posenc_cli.common.errors import PosencError


def test_bench_rejects_bad_settings_before_any_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PosencError, match="unknown encoding 'ropee'"):
        compose_bench(["bench.encodings=[ropee]"])
    with pytest.raises(PosencError, match="eval_factors"):
        compose_bench(["bench.eval_factors=[0]"])
    with pytest.raises(PosencError, match="FlexAttention trains on CUDA only"):
        compose_bench(["bench.attention=flex"])
    cfg, run_dir = compose_bench(["model=tiny"])
    assert cfg.model.d_model == 32 and run_dir.parts[:2] == ("outputs", "bench")
    assert cfg.bench.model == "tiny"  # what bench.json records
    assert compose_bench([])[0].model.d_model == 256
    assert not (tmp_path / "outputs").exists()
    (tmp_path / "taken" / "x").mkdir(parents=True)
    with pytest.raises(PosencError, match="already exists"):
        compose_bench(["hydra.run.dir=taken"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where CUDA is absent")
def test_bench_on_cuda_without_a_gpu_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PosencError, match="bench.device=cuda, but torch sees no CUDA device"):
        compose_bench(["bench.device=cuda"])
    assert not (tmp_path / "outputs").exists()
