"""`posenc import-hf` of a LongRoPE checkpoint (transformers' rope_type longrope on a Llama): the
run is RoPE at the original length with eval.rope_scaling=longrope, and posenc's evaluation
computes transformers' logits and perplexity below, at and above the original length."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from posenc_cli.cli.app import app
from posenc_cli.config.run_config import typed
from posenc_cli.config.rundir import load_run_config, unlock_run_dir
from posenc_cli.engine import checkpoint
from posenc_cli.engine.build import build_model
from posenc_cli.engine.metrics import read_metrics
from posenc_cli.evals.context_extension import context_extension

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
#: float32 logits of size ~3 after two layers: both sides round differently in the last bits.
TOLERANCE = 1e-4
ROWS = 300
#: The `longrope` fixture's lengths (tests/unit/hf/conftest.py).
ORIGINAL = 16
LONGEST = 64


def factor_sets(folder: Path) -> tuple[list[float], list[float]]:
    """The long and the short set of the fixture's config.json."""
    rope = json.loads((folder / "config.json").read_text())["rope_parameters"]
    return rope["long_factor"], rope["short_factor"]


def invoke(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.output


def imported(folder: Path, run: Path) -> Path:
    code, out = invoke("import-hf", str(folder), f"hydra.run.dir={run}")
    assert code == 0, out
    assert f"evaluate it with: posenc eval {run} (LongRoPE as transformers runs it" in out
    return run


def edit_config(folder: Path, change: dict[str, object], drop: tuple[str, ...] = ()) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(change)
    for key in drop:
        config.pop(key)
    (folder / "config.json").write_text(json.dumps(config))


def test_the_run_is_rope_at_the_original_length_evaluated_with_longrope(
    longrope: Path, tmp_path: Path
) -> None:
    run = imported(longrope, tmp_path / "run")
    cfg = typed(load_run_config(run))
    ev = cfg.eval.extrapolation
    assert cfg.train.context_length == ORIGINAL and cfg.encoding.params["theta"] == 500.0
    assert (ev.rope_scaling, ev.rope_factor) == ("longrope", LONGEST / ORIGINAL)
    assert (ev.rope_long_factor, ev.rope_short_factor) == factor_sets(longrope)


def scores(
    folder: Path, run: Path, length: int, prepared: int | None = None
) -> tuple[float, float, float]:
    """max |Δlogits| and both perplexities of one batch of ``length`` tokens, posenc's model
    prepared by its saved evaluation for that length (or for ``prepared``)."""
    cfg = typed(load_run_config(run))
    model = build_model(cfg, ROWS).eval()
    model.load_state_dict(checkpoint.load(run / "checkpoints" / "last.pt")["model"])
    ids = torch.randint(0, ROWS, (2, length + 1), generator=torch.Generator().manual_seed(length))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ev = cfg.eval.extrapolation
    train_length = cfg.train.context_length
    with torch.no_grad(), context_extension(model, ev, train_length, LONGEST) as prepare:
        prepare(length if prepared is None else prepared)
        expected = theirs(ids[:, :-1]).logits
        got = model(ids[:, :-1])

    def ppl(logits: torch.Tensor) -> float:
        return math.exp(
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        )

    return (expected - got).abs().max().item(), ppl(expected), ppl(got)


@pytest.mark.parametrize("length", [ORIGINAL - 1, ORIGINAL, ORIGINAL + 1, LONGEST])
def test_posenc_computes_transformers_logits_and_perplexity(
    length: int, longrope: Path, tmp_path: Path
) -> None:
    run = imported(longrope, tmp_path / "run")
    error, theirs, ours = scores(longrope, run, length)
    assert error < TOLERANCE, error
    assert ours == pytest.approx(theirs, rel=1e-5)


def test_the_other_set_would_not_match(longrope: Path, tmp_path: Path) -> None:
    """The check above can tell the sets apart: each length scored with the other set misses."""
    run = imported(longrope, tmp_path / "run")
    assert scores(longrope, run, LONGEST, prepared=ORIGINAL)[0] > 10 * TOLERANCE
    assert scores(longrope, run, ORIGINAL, prepared=LONGEST)[0] > 10 * TOLERANCE


@pytest.mark.parametrize("length", [ORIGINAL, LONGEST])
def test_the_earlier_rope_scaling_spelling_imports_alike(
    length: int, longrope: Path, tmp_path: Path
) -> None:
    long, short = factor_sets(longrope)
    legacy = {"type": "longrope", "long_factor": long, "short_factor": short, "factor": 2.0}
    legacy["original_max_position_embeddings"] = ORIGINAL
    edit_config(longrope, {"rope_scaling": legacy, "rope_theta": 500.0}, drop=("rope_parameters",))
    run = imported(longrope, tmp_path / "run")
    cfg = typed(load_run_config(run))
    ev = cfg.eval.extrapolation
    assert cfg.train.context_length == ORIGINAL and ev.rope_factor == 2.0  # the given factor
    assert (ev.rope_long_factor, ev.rope_short_factor) == (long, short)
    error, _, _ = scores(longrope, run, length)
    assert error < TOLERANCE, error


@pytest.mark.slow
def test_posenc_eval_scores_it_with_longrope_and_as_plain_rope(
    longrope: Path, tmp_path: Path, text: str
) -> None:
    run = imported(longrope, tmp_path / "run")
    (tmp_path / "val.txt").write_text(text * 3)
    common = ["eval.factors=[1,4]", "eval.tokens=512", "data=text", f"data.path={tmp_path}/val.txt"]
    for scaling in ([], ["eval.rope_scaling=none"]):  # the saved S and factors then stay unused
        code, out = invoke("eval", str(run), *common, *scaling)
        assert code == 0, out
        unlock_run_dir(run)  # the command's lock lasts as long as its process, here the test's
    results = {k: v for k, v in read_metrics(run).items() if k.startswith("extrapolation")}
    scaled = [v for k, v in results.items() if k.endswith("_longrope")]
    plain = [v for k, v in results.items() if "longrope" not in k]
    assert len(results) == 2 and len(scaled) == len(plain) == 1, sorted(results)
    assert scaled[0]["rope_rescale"] == {"16": "short", "64": "long"}
    assert scaled[0]["rope_factors"] == {"16": 4.0, "64": 4.0} and "rope_scaling" not in plain[0]
    assert scaled[0]["ppl"]["64"] != plain[0]["ppl"]["64"]


def _rope(**change: object):
    def damage(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        edit_config(folder, {"rope_parameters": {**config["rope_parameters"], **change}})

    return damage


@pytest.mark.parametrize(
    "damage, says",
    [
        (_rope(long_factor=[1.0, 2.0]), "long_factor is [1.0, 2.0], not a list of 4 numbers > 0"),
        (_rope(short_factor=[1.0, 1.0, 0.0, 1.0]), "not a list of 4 numbers > 0"),
        (_rope(attention_factor=2.0), "attention_factor=2 replaces LongRoPE's"),
        (
            lambda folder: edit_config(folder, {"original_max_position_embeddings": 8}),
            "original_max_position_embeddings=8 outside the rope section",
        ),
        (_rope(rope_type="yarn"), "was trained with rope_type 'yarn'"),
    ],
)
def test_what_transformers_would_run_otherwise_is_refused(
    damage, says: str, longrope: Path, tmp_path: Path
) -> None:
    damage(longrope)
    code, out = invoke("import-hf", str(longrope), f"hydra.run.dir={tmp_path / 'run'}")
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1, out
    assert lines[0].startswith("posenc: error:") and says in lines[0], lines[0]
    assert not (tmp_path / "run").exists()
