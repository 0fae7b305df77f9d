"""Class 1, memory: every size is bounded before anything is allocated or created, against the
memory this machine has available, and running out of memory anyway is one line, not a bug."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from posenc_cli.config.compose import compose, load
from posenc_cli.config.run_config import typed
from posenc_cli.engine.memory import n_params, training_needs
from posenc_cli.workflows import crash
from tests.helpers.configs import TINY

#: (argv, the start of what the line names): each needs far more memory than any machine has.
CASES = [
    (["train", "train.batch_size=100000000"], "train.batch_size: a training batch needs"),
    (["train", "train.eval_batches=100000000"], "train.eval_batches: the validation windows"),
    (["train", "eval.factors=[1,100000000]"], "eval.factors: the evaluation's longest forward"),
    (
        ["inspect", "encoding=rope", "train.context_length=10000000"],
        "train.context_length: a forward of 10000000 tokens needs at least",
    ),
    (
        ["train", "encoding=learned", "encoding.max_len=1000000000"],
        "encoding.max_len: encoding=learned's own weights with gradients and optimizer state",
    ),
    (
        [
            "train",
            "model.layers=[encoding,t5]",
            "+model.layer_encodings.t5.num_buckets=2000000000",
            "+model.layer_encodings.t5.max_distance=2000000001",
        ],
        "model.layer_encodings.t5.*: t5's weights with gradients and optimizer state needs",
    ),
    # the model's size is named by the key furthest above the quick model's
    (["train", "model.n_layers=100000"], "model.n_layers: the model with gradients"),
    (["train", "data.vocab_size=100000000"], "data.vocab_size: the model with gradients"),
    (["train", "model.d_ff=10000000000"], "model.d_ff: the model with gradients"),
    (["inspect", "encoding=rope", "model.d_model=10000000"], "model.d_model: the model (its"),
]


@pytest.mark.parametrize(("args", "expected"), CASES, ids=[c[0][-1] for c in CASES])
def test_a_size_the_machine_cannot_hold_is_refused_before_anything_exists(
    args: list[str], expected: str, refused: Callable[..., str]
) -> None:
    line = refused(args)
    assert expected in line and "of memory is available" in line


def test_an_evaluation_the_machine_cannot_hold_is_refused_with_evals_own_keys(
    run: Path, refused: Callable[..., str]
) -> None:
    """`posenc eval` sizes its longest forward before it loads the model or takes the run,
    and names the key *it* accepts (not train.*, which it refuses)."""
    line = refused(["eval", str(run), "eval.factors=[1,100000000]"])
    assert "eval.factors: the evaluation's longest forward" in line
    assert "of memory is available — lower the longest of eval.factors" in line


def test_the_parameter_count_is_the_models_own() -> None:
    from posenc_cli.engine.build import build_model

    for extra in ([], ["encoding=deberta", "model.layers=[encoding,fox,none]"]):
        cfg = compose(["model=tiny", "model.n_layers=3", *extra])
        assert n_params(typed(cfg), 300) == build_model(typed(cfg), 300).num_parameters()


def test_the_estimate_grows_with_the_key_it_names() -> None:
    small = {n.key: n for n in training_needs(load(["train.batch_size=8"]), 4096)}
    big = {n.key: n for n in training_needs(load(["train.batch_size=80"]), 4096)}
    state = small["model.d_model"].bytes
    assert big["train.batch_size"].bytes > 9 * (small["train.batch_size"].bytes - state)
    assert big["model.d_model"] == small["model.d_model"]
    assert big["train.eval_batches"].bytes > small["train.eval_batches"].bytes


def test_the_encodings_own_weights_are_counted_before_they_exist() -> None:
    """A learned table of max_len x d_model is the encoding's whole count (on the meta
    device: no memory), and it is part of the model's."""
    cfg = load(["encoding=learned", "encoding.max_len=4096", "model=tiny"])
    needs = {n.key: n for n in training_needs(cfg, 300)}
    assert needs["encoding.max_len"].bytes == 4096 * cfg.model.d_model * 4 * 4


@pytest.mark.parametrize(
    "exc",
    [
        MemoryError(),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 12800000000 bytes."
        ),
    ],
)
def test_running_out_of_memory_is_one_line_not_a_bug(exc: Exception) -> None:
    line = crash.out_of_memory(exc)
    assert line is not None and line.startswith("posenc: error: out of memory")
    assert crash.out_of_memory(ValueError("out of memory")) is None


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (MemoryError(), 2, "posenc: error: out of memory"),
        (ValueError("windows"), 1, "posenc: internal error (ValueError: windows)"),
    ],
)
def test_a_run_that_fails_after_training_steps_leaves_a_resumable_checkpoint(
    error: Exception,
    code: int,
    line: str,
    corpus: Path,
    workdir: Path,
    monkeypatch,
) -> None:
    """The first validation (step 10 of 20) fails after the last checkpoint (none yet): the
    steps trained so far are saved before the error ends the run."""
    from typer.testing import CliRunner

    from posenc_cli.cli.app import app
    from posenc_cli.engine import checkpoint
    from posenc_cli.engine.trainer import Trainer

    def failing(self: Trainer) -> float:
        raise error

    monkeypatch.setattr(Trainer, "validate", failing)
    args = [*TINY, "train.checkpoint_every=15", "data=text", f"data.path={corpus}"]
    result = CliRunner().invoke(app, ["train", *args, "hydra.run.dir=run", "device=cpu"])
    assert result.exit_code == code, (result.output, result.exception)
    (said,) = result.stderr.strip().splitlines()
    assert said.startswith(line) and "Traceback" not in result.output
    saved = checkpoint.load(workdir / "run" / "checkpoints" / "last.pt")
    assert saved["step"] == 10


@pytest.mark.parametrize(
    ("key", "fix"),
    [
        ("train.batch_size", "lower extend.batch_size or extend.factor"),
        ("eval.factors", "lower extend.factor"),
        ("model.d_model", "extend the parent on a machine with more memory"),
    ],
)
def test_an_extension_that_cannot_fit_names_what_extend_accepts(key: str, fix: str) -> None:
    """`posenc extend` takes the model and train.* from the parent: its advice names its own
    keys, never train.batch_size, which it refuses."""
    from posenc_cli.common.errors import PosencError
    from posenc_cli.engine.memory import EXTENSION_KEYS, Need, check_fits

    with pytest.raises(PosencError) as refused:
        check_fits([Need(key, "it", 2**40)], 2**30, "memory", instead=EXTENSION_KEYS)
    assert fix in str(refused.value) and "train.batch_size (" not in str(refused.value)
