"""train.compile=true: the traced model agrees with eager mode, without graph breaks where the
encodings promise it, and `posenc train` runs compiled end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import TINY, run_cli
from test_encodings import make_model, tokens

#: Encodings whose hooks never read a position value while tracing: one graph per forward.
FULL_GRAPH = ["none", "learned", "sinusoidal", "sinusoidal_learned", "rope"]


@pytest.mark.parametrize("name", FULL_GRAPH)
def test_traced_forward_and_gradients_match_eager_in_one_graph(name: str) -> None:
    """fullgraph=True fails on any graph break; the "eager" backend runs Dynamo's trace (and
    the encodings' compile-only code paths, e.g. RoPE's real-valued rotation) without the
    minutes of C++ compilation."""
    torch._dynamo.reset()
    model = make_model(name)
    x = tokens(24)
    eager = model(x)
    (eager.square().mean()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    traced = torch.compile(model, backend="eager", fullgraph=True)(x)
    (traced.square().mean()).backward()
    torch.testing.assert_close(traced, eager, rtol=1e-5, atol=1e-5)
    for n, p in model.named_parameters():
        if n in grads:
            torch.testing.assert_close(p.grad, grads[n], rtol=1e-4, atol=1e-6, msg=n)


def test_posenc_train_compiled_matches_eager_end_to_end(tmp_path: Path, corpus: Path) -> None:
    """TorchInductor really compiles (C++ on CPU), and the run ends where the eager one does."""
    args = [*TINY, "encoding=rope", "train.steps=10", "train.precision=fp32", "train.threads=1",
            "data=text", f"data.path={corpus}"]
    losses = {}
    for flag in ("false", "true"):
        res = run_cli(["train", *args, f"train.compile={flag}", f"hydra.run.dir=run-{flag}"],
                      tmp_path, tmp_path / "cache", timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        metrics = json.loads((tmp_path / f"run-{flag}" / "metrics.json").read_text())
        assert metrics["steps"] == 10
        losses[flag] = metrics["final_val_loss"]
    assert losses["true"] == pytest.approx(losses["false"], abs=2e-3)


def test_a_failing_compiler_is_one_line_and_resumable(tmp_path: Path, corpus: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Inductor with a C++ compiler that does not work: exit 2, one line naming the fix, no
    traceback; after a checkpoint the fix is resuming with train.compile=false, which works."""
    monkeypatch.setenv("CXX", "false")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    args = [*TINY, "encoding=none", "train.precision=fp32", "data=text", f"data.path={corpus}"]
    res = run_cli(["train", *args, "train.compile=true", "hydra.run.dir=run"], tmp_path,
                  tmp_path / "cache")
    assert res.returncode == 2, res.stderr[-2000:]
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert err[0].startswith("posenc: error: torch.compile failed:")
    assert "run again with train.compile=false" in err[0]
    monkeypatch.delenv("CXX")
    done = run_cli(["train", *args, "hydra.run.dir=run2"], tmp_path, tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-2000:]
    switched = run_cli(["train", "resume=run2", "train.compile=true"], tmp_path,
                       tmp_path / "cache")
    assert switched.returncode == 0, switched.stderr[-2000:]  # compile may change on resume


def test_compile_failure_after_a_checkpoint_names_the_resume_command(tmp_path: Path) -> None:
    from torch._dynamo.exc import BackendCompilerFailed

    from posenc_cli.errors import PosencError
    from posenc_cli.runtime import compile_failures

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"")
    with pytest.raises(PosencError, match="no kernel for you") as info:
        with compile_failures(tmp_path, compiling=True):
            raise BackendCompilerFailed(lambda: None, RuntimeError("no kernel for you"), None)
    assert f"posenc train resume={tmp_path} train.compile=false" in str(info.value)
    with pytest.raises(ValueError):  # anything else, or not compiling: untouched
        with compile_failures(tmp_path, compiling=True):
            raise ValueError("x")
