"""configs/experiment/: global packages that compose; the seed study sweeps the nine seed
encodings and the modern study every other encoding beside rope, alibi and t5, so every
encoding is in a study and a new one joins the modern study without editing it."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf

from posenc_cli.config.compose import compose
from posenc_cli.config.groups import config_dir
from posenc_cli.config.overrides import expand_sweep
from posenc_cli.config.run_config import typed


def test_experiment_files_are_global_packages(corpus: Path) -> None:
    for path in (config_dir() / "experiment").glob("*.yaml"):
        assert path.read_text().startswith("# @package _global_")
        assert OmegaConf.load(path) is not None
        text = "/data: text" in path.read_text()  # data.path is only for data=text
        compose([f"experiment={path.stem}", *([f"data.path={corpus}"] if text else [])])


def test_the_gpu_study_is_gpt2_small_at_512_on_wikitext_articles_to_16x(corpus: Path) -> None:
    from posenc_cli.engine.build import build_model

    cfg = compose(["experiment=extrapolation_gpu"])
    assert (cfg.data.kind, cfg.train.context_length, list(cfg.eval.factors)) == (
        "hf",
        512,
        [1, 2, 4, 8, 16],
    )
    assert (cfg.data.dataset, cfg.data.subset, cfg.data.documents) == (
        "Salesforce/wikitext",
        "wikitext-103-raw-v1",
        "wikitext_articles",
    )
    own = compose(["experiment=extrapolation_gpu", "data=text", f"data.path={corpus}"])
    assert own.data.kind == "text" and own.train.context_length == 512
    V = 32768
    d = 768
    layers = 12
    d_ff = 2048  # embedding + head, 12 blocks, final norm
    expected = 2 * V * d + layers * (4 * d * d + 3 * d * d_ff + 2 * d) + d
    with torch.device("meta"):  # shapes only: no 540 MB of weights to initialise
        built = build_model(typed(cfg), cfg.data.vocab_size)
    assert built.num_parameters() == expected == 135_285_504
    assert swept("extrapolation_gpu") == SEED_ENCODINGS


def swept(experiment: str, *overrides: str) -> list[str]:
    """The encodings a study's sweeper params give, expanded as `posenc sweep` expands them."""
    cfg = compose([f"experiment={experiment}", *overrides], with_hydra=True)
    params = {str(k): str(v) for k, v in cfg.hydra.sweeper.params.items()}
    jobs = expand_sweep([], params)
    return sorted(
        o.removeprefix("encoding=") for job in jobs for o in job if o.startswith("encoding=")
    )


SEED_ENCODINGS = sorted(
    [
        "none",
        "learned",
        "sinusoidal",
        "sinusoidal_learned",
        "rope",
        "alibi",
        "t5",
        "transformer_xl",
        "deberta",
    ]
)


def test_the_seed_study_sweeps_the_nine_seed_encodings() -> None:
    assert swept("extrapolation") == SEED_ENCODINGS


def test_every_encoding_yaml_is_in_a_study(repo: Path) -> None:
    every = sorted(p.stem for p in (repo / "configs" / "encoding").glob("*.yaml"))
    modern = swept("extrapolation_modern")
    assert {"rope", "alibi", "t5"} <= set(modern)
    assert sorted(set(modern) | set(SEED_ENCODINGS)) == every
    assert len(modern) == len(set(modern))


def test_the_gpu_task_study_is_kazemnejad_sized_and_composes() -> None:
    """6 layers x 256 trained on sizes 1-20, tested to 40, the five encodings of the paper's
    ordering on copy, reverse and sort, three seeds: 45 jobs, one per task composed here."""
    cfg = compose(["experiment=length_generalization_gpu"], with_hydra=True)
    params = {str(k): str(v) for k, v in cfg.hydra.sweeper.params.items()}
    jobs = expand_sweep([], params)
    assert len(jobs) == 45
    for job in [jobs[0], jobs[len(jobs) // 2], jobs[-1]]:
        one = compose(["experiment=length_generalization_gpu", *job])
        assert (one.model.d_model, one.model.n_layers) == (256, 6)
        assert list(one.task.train_lengths) == [1, 20] and max(one.task.test_lengths) == 40
    assert swept("length_generalization_gpu") == sorted(
        ["none", "t5", "alibi", "rope", "sinusoidal"] * 9
    )
