"""`posenc inspect` in both forms writes the figures that apply, and refuses bad runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.encodings.absolute import LearnedSinusoidalEncoding, SinusoidalEncoding
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.encodings.rope import RotaryEncoding
from tests.helpers.configs import TINY

#: Evaluated past 64 tokens, so that a 64-token window (rnope_swa) hides keys somewhere.
SMALL = ["model=tiny", "train.context_length=16", "eval.factors=[1,5]"]


@pytest.fixture(autouse=True)
def shared_cache(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSENC_CACHE", str(cache_dir))


def invoke(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.stdout + result.stderr


def expected_figures(enc: PositionalEncoding, trained: bool) -> set[str]:
    """Which figures apply, from what the encoding is (the rules of inspection/figures/)."""
    sinusoidal = isinstance(enc, (SinusoidalEncoding, LearnedSinusoidalEncoding))
    rotary = isinstance(enc, RotaryEncoding)
    out = {"1_decay.png"} if sinusoidal else set()
    out |= {"2_hessian_leak.png"} if sinusoidal or rotary else set()
    out |= {"3_rope_bound.png"} if rotary else set()
    out |= {"4_position_bias.png"} if enc.has_bias else set()
    if trained:
        out |= {"3_qk_by_distance.png"} if rotary else set()
        out |= (
            {"1_learned_frequencies.png"} if isinstance(enc, LearnedSinusoidalEncoding) else set()
        )
        out |= {"5_attention_distance.png", "5_attention_entropy.png", "5_attention_beyond.png"}
    return out


@pytest.mark.encodings
def test_a_config_gets_the_figures_of_its_encoding(
    name: str, tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from posenc_cli.encodings import build_encoding

    monkeypatch.chdir(tmp_path)
    code, output = invoke(["inspect", f"encoding={name}", *SMALL])
    assert code == 0, output
    [out] = list((tmp_path / "outputs" / "inspect").glob("*/*"))
    own = OmegaConf.create(
        {
            "train": {"context_length": 16},  # what ${train.…} reads
            "encoding": OmegaConf.load(repo / "configs" / "encoding" / f"{name}.yaml"),
        }
    )
    enc = build_encoding(own.encoding, 32, 2, 2)
    assert {p.name for p in out.glob("*.png")} == expected_figures(enc, trained=False)
    summary = (out / "summary.md").read_text()
    assert "## Properties of this model" in summary and "causality" in summary
    assert "needs a trained run" in summary


@pytest.fixture(scope="module")
def trained_runs(
    tmp_path_factory: pytest.TempPathFactory, cache_dir: Path, corpus: Path
) -> dict[str, Path]:
    """Tiny trained runs, one per figure family (rotary, distance bias, learned sinusoids), on
    the small generated corpus (its tokenizer trains in a moment)."""
    import os

    os.environ["POSENC_CACHE"] = str(cache_dir)
    root = tmp_path_factory.mktemp("inspect-runs")
    runs = {}
    for name in ("rope", "t5", "sinusoidal_learned"):
        run = root / f"encoding={name},seed=0"  # as a sweep names its runs
        code, output = invoke(
            [
                "train",
                f"encoding={name}",
                *TINY,
                "data=text",
                f"data.path={corpus}",
                "eval.factors=[1,4]",
                "eval.at_end=false",
                "train.checkpoint_every=20",
                f"hydra.run.dir='{run}'",
            ]
        )  # inspect needs the checkpoint only
        assert code == 0, output
        runs[name] = run
    return runs


@pytest.mark.parametrize("name", ["rope", "t5", "sinusoidal_learned"])
def test_a_trained_run_gets_its_figures_and_tensorboard(
    name: str, trained_runs: dict[str, Path]
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from posenc_cli.config.run_config import typed
    from posenc_cli.config.rundir import load_run_config
    from posenc_cli.engine.runtime import make_runtime
    from posenc_cli.evals.run import apply_overrides, load_model

    run = trained_runs[name]
    for _ in range(2 if name == "rope" else 1):  # a second one replaces the first one's files
        code, output = invoke(["inspect", str(run)])
        assert code == 0, output
    cfg = typed(apply_overrides(load_run_config(run), []))
    enc = load_model(run, cfg, make_runtime(cfg)).encoding
    assert {p.name for p in (run / "inspect").glob("*.png")} == expected_figures(enc, True)
    events = list(run.glob("events.out.tfevents.*.inspect"))
    assert len(events) == 1
    acc = EventAccumulator(str(events[0]), size_guidance={"images": 0})
    acc.Reload()
    assert set(acc.Tags()["images"]) == {
        f"inspect/{Path(f).stem}" for f in expected_figures(enc, True)
    }
    scalars = set(acc.Tags()["scalars"])
    assert "inspect/attention/mean_distance_4x" in scalars
    assert any(t.startswith("inspect/property/causality") for t in scalars)
    assert [e.step for e in acc.Scalars("inspect/attention/entropy_1x")] == [20]  # the last


def one_line(args: list[str]) -> str:
    code, output = invoke(args)
    lines = output.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("posenc: error: "), output
    return lines[0]


def test_bad_runs_and_arguments_are_one_line(
    trained_runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    monkeypatch.chdir(tmp_path)
    assert "not a run directory" in one_line(["inspect", str(tmp_path / "missing")])
    assert "drop --out" in one_line(["inspect", str(trained_runs["rope"]), "--out", "x"])
    assert "cannot change" in one_line(["inspect", str(trained_runs["rope"]), "model.d_model=64"])
    bare = tmp_path / "bare"
    shutil.copytree(trained_runs["t5"], bare)
    shutil.rmtree(bare / "checkpoints")
    assert "no checkpoint" in one_line(["inspect", str(bare)])
    other = tmp_path / "other"
    shutil.copytree(trained_runs["t5"], other)
    saved = other / ".hydra" / "config.yaml"
    saved.write_text(saved.read_text().replace("d_model: 32", "d_model: 48"))
    assert "does not match" in one_line(["inspect", str(other)])
    assert "encoding" in one_line(["inspect", "encoding=nope"])
    assert not (tmp_path / "outputs").exists()


def test_an_explicit_out_folder_is_never_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("keep")
    assert "already exists" in one_line(["inspect", "encoding=none", *SMALL, "--out", str(taken)])
    assert [p.name for p in taken.iterdir()] == ["mine.txt"]
    code, output = invoke(["inspect", "encoding=none", *SMALL, "--out", str(tmp_path / "new")])
    assert code == 0 and (tmp_path / "new" / "summary.md").is_file(), output


def test_hostile_run_folders_are_one_line_and_write_nothing_outside(
    trained_runs: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    import torch

    def copy(name: str) -> Path:
        run = tmp_path / name
        shutil.copytree(trained_runs["t5"], run)
        shutil.rmtree(run / "inspect", ignore_errors=True)
        return run

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    linked = copy("linked")
    (linked / "inspect").mkdir()
    (linked / "inspect" / "summary.md").symlink_to(victim)
    assert "symbolic link" in one_line(["inspect", str(linked)])
    assert victim.read_text() == "precious"
    a_file = copy("a_file")
    (a_file / "inspect").write_text("not a folder")
    assert "not a folder" in one_line(["inspect", str(a_file)])
    in_the_way = copy("in_the_way")
    (in_the_way / "inspect" / "summary.md").mkdir(parents=True)
    assert "cannot write" in one_line(["inspect", str(in_the_way)])
    bad_step = copy("bad_step")
    state = torch.load(bad_step / "checkpoints" / "last.pt", weights_only=True)
    state["step"] = "abc"
    torch.save(state, bad_step / "checkpoints" / "last.pt")
    assert "step 'abc', not a whole number" in one_line(["inspect", str(bad_step)])
