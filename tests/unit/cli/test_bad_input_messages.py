"""The bad inputs that used to print tracebacks or mislead: each is now one line, exit 2, and
creates nothing (run in-process through the Typer app)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from posenc_cli.cli.app import app


@pytest.fixture(autouse=True)
def shared_cache(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One data cache for the session: the built-in corpus's tokenizer is trained once, not
    once per test that gets as far as preparing the data."""
    monkeypatch.setenv("POSENC_CACHE", str(cache_dir))


def invoke(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NOPE", raising=False)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert not (tmp_path / "outputs").exists()
    return result.stderr.strip().splitlines()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["train", "hydra.run.dir=${oc.env:NOPE}"], "cannot resolve 'hydra.run.dir'"),
        (["train", "data.cache_dir=${oc.env:NOPE}"], "cannot resolve 'data.cache_dir'"),
        (
            ["train", "train.context_length=${oc.env:NOPE}"],
            "cannot resolve 'train.context_length'",
        ),
        (
            ["train", "task=copy", "task.train_lengths=[1,${oc.env:NOPE}]"],
            "cannot resolve 'task.train_lengths'",
        ),
        (
            ["train", "seed=${oc.env:NOPE,3}"],
            "seed=${oc.env:NOPE,3} resolves to '3' (str), not int — give a plain value",
        ),
        (["train", "data=text", "data.path=my=file.txt"], "cannot parse override 'data.path=my="),
        (["train", "data=text", "data.path=dätä.txt"], "cannot parse override 'data.path=d"),
        (
            ["train", "encoding=learned", "encoding.max_len=64"],
            "encoding.max_len=64 is below train.context_length=128",
        ),
        (["train", "eval.tasks=[nope]"], "unknown evaluation task 'nope'"),
        (["train", "encoding.name=../../x"], "encoding.name is '../../x', not a plain name"),
        (["train", "model=huge"], "unknown model 'huge'"),
        (["train", "data=hf"], "data=hf needs data.dataset — add data.dataset="),
        (["train", "train.stepz=3"], "unknown key 'train.stepz' (did you mean 'steps'?)"),
        (["train", "model.d_model=100", "model.n_heads=3"], "not divisible by model.n_heads"),
        (
            ["train", "model.d_model=12", "model.n_heads=4"],
            "head dimension model.d_model / model.n_heads to be an even integer, got 3",
        ),
        (["train", "train.context_length=1"], "train.context_length=1 is too short"),
        (["train", "data=text"], "needs data.path"),
        (["train", "data=text", "data.path=does/not/exist.txt"], "does not exist"),
        (["train", "data.vocab_size=100"], "smaller than the byte alphabet"),
        (["train", "device=tpu"], "unknown device 'tpu'"),
        (
            ["train", "train.position_range=64"],
            "train.position_range=64 is shorter than train.context_length=128",
        ),
        (
            ["train", "encoding=learned", "train.position_range=4096"],
            "encoding.max_len=2048 is below train.position_range=4096",
        ),
        (
            ["train", "eval.rope_scaling=yarn"],
            "eval.rope_scaling=yarn is an evaluation of a trained",
        ),
        (
            ["train", "extend.passkey_share=0.5"],
            "extend.passkey_share is the passkey fine-tune of a trained run",
        ),
        (["train", "encoding=alibi", "eval.rope_scaling=pi"], "needs a RoPE-family encoding"),
        (
            ["train", "eval.rope_factor=4"],
            "eval.rope_factor=4.0 has no effect with eval.rope_scaling=none",
        ),
        (["train", "encoding.yarn_ramp=linear"], "encoding.yarn_ramp=linear is not one of"),
        (["train", "eval.rope_scaling=linear"], "unknown eval.rope_scaling 'linear'"),
        (["train", "encoding.rotary_fraction=0"], "encoding.rotary_fraction=0 is not in (0, 1]"),
        (["train", "encoding=rope", "encoding.p=2"], "encoding.p=2 is not in [0, 1]"),
    ],
)
def test_one_line_naming_the_problem(
    args: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = invoke(args, tmp_path, monkeypatch)
    assert len(lines) == 1 and lines[0].startswith("posenc: error: ") and expected in lines[0]
    assert " — " in lines[0]


def test_quoting_is_suggested_for_an_equals_sign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = invoke(["train", "seed=1", "data=text", "data.path=a=b.txt"], tmp_path, monkeypatch)
    assert "quote values" in lines[0] and "seed" not in lines[0]


def test_a_run_directory_that_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "afile").write_text("x")
    lines = invoke(["train", "hydra.run.dir=afile"], tmp_path, monkeypatch)
    assert "is a file" in lines[0] and (tmp_path / "afile").read_text() == "x"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_a_missing_device_is_refused_before_the_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = invoke(["train", "device=cuda"], tmp_path, monkeypatch)
    assert lines == [
        "posenc: error: device=cuda but no CUDA GPU is visible — use device=auto or device=cpu"
    ]


def test_a_read_only_cache_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corpus: Path
) -> None:
    from posenc_cli.data import cache

    def read_only(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(cache, "fresh_tmp_dir", read_only)
    monkeypatch.setenv("POSENC_CACHE", str(tmp_path / "cache"))  # nothing cached there yet
    lines = invoke(["train", "data=text", f"data.path={corpus}"], tmp_path, monkeypatch)
    assert (
        lines[0].startswith("posenc: error: cannot write the data cache")
        and "Read-only file system" in lines[0]
        and "POSENC_CACHE" in lines[0]
    )


def test_deterministic_runs_use_one_thread() -> None:
    from omegaconf import OmegaConf

    from posenc_cli.engine.runtime import make_runtime

    before = torch.get_num_threads()
    try:
        make_runtime(
            OmegaConf.create(
                {
                    "train": {
                        "deterministic": True,
                        "threads": 2,
                        "precision": "fp32",
                        "attention": "auto",
                    },
                    "device": "cpu",
                }
            )
        )
        assert torch.get_num_threads() == 1 and torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(before)


def test_encodings_lists_every_description_verbatim(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Descriptions hold brackets (CoPE's e[p_ij]) that rich would take for markup."""
    from omegaconf import OmegaConf

    from posenc_cli.common.console import console

    monkeypatch.setattr(console, "_width", 400)
    result = CliRunner().invoke(app, ["encodings"])
    assert result.exit_code == 0
    for path in (repo / "configs" / "encoding").glob("*.yaml"):
        assert str(OmegaConf.load(path).description) in result.output, path.stem
