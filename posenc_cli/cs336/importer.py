"""`posenc import-cs336`: a CS336 model and tokenizer written as a posenc run directory.

The run directory holds what `posenc train` writes — .hydra/config.yaml, tokenizer.json,
checkpoints/last.pt and best.pt, metrics.json — so `posenc eval` and `posenc compare` treat it
like any other run; metrics.json marks it imported, with the source files' sha256.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posenc_cli.common.digest import file_digest
from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.config.overrides import given
from posenc_cli.config.rundir import claim_new_run_dir
from posenc_cli.cs336.bpe_checks import check_embedding, check_finite
from posenc_cli.cs336.bpe_files import build_tokenizer, read_merges, read_vocab
from posenc_cli.cs336.state import Weights, load_weights
from posenc_cli.engine.checkpoint import save_atomic
from posenc_cli.engine.metrics import imported_metrics, merge_metrics
from posenc_cli.model import TransformerLM, build_model

#: What the weights cannot tell and the user must say, with an example.
REQUIRED = {
    "model.n_heads": "model.n_heads=16",
    "encoding.theta": "encoding.theta=10000",
    "train.context_length": "train.context_length=256",
}


def import_cs336(
    checkpoint: Path, vocab: Path, merges: Path, specials: list[str], overrides: list[str]
) -> Path:
    """Check everything, then write the run directory; returns it."""
    for key, example in REQUIRED.items():
        if not given(overrides, key):
            raise PosencError(
                f"posenc import-cs336 needs {key} (the weights do not say it)",
                f"add {example}, as your model was built",
            )
    weights = load_weights(checkpoint)
    cfg = compose(["encoding=rope", *_dimension_overrides(weights), *overrides], with_hydra=True)
    check_finite(weights.state, checkpoint)
    tok = build_tokenizer(read_vocab(vocab), read_merges(merges), specials, (vocab, merges))
    if tok.get_vocab_size() > weights.vocab_size:
        raise PosencError(
            f"the tokenizer has {tok.get_vocab_size()} tokens but the embedding "
            f"only {weights.vocab_size} rows",
            "give the vocab and merges this model was trained with",
        )
    check_embedding(tok.get_vocab(), weights.vocab_size, vocab)
    model = _load_model(cfg, weights)
    run_dir = claim_new_run_dir(cfg, overrides)
    _write_run(run_dir, cfg, overrides, weights, model, tok)
    merge_metrics(
        run_dir,
        _metrics(
            cfg,
            weights,
            model,
            tok.get_vocab_size(),
            {"checkpoint": checkpoint, "vocab": vocab, "merges": merges},
        ),
    )
    return run_dir


def _dimension_overrides(w: Weights) -> list[str]:
    return [
        f"model.d_model={w.d_model}",
        f"model.n_layers={w.n_layers}",
        f"model.d_ff={w.d_ff}",
        f"data.vocab_size={max(w.vocab_size, 257)}",
    ]


def _load_model(cfg: DictConfig, weights: Weights) -> TransformerLM:
    """posenc's model with the weights, refusing anything but an exact match (one line)."""
    model = build_model(cfg, weights.vocab_size)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights.state))
    unexpected = sorted(set(weights.state) - set(expected))
    shapes = sorted(
        f"{k} {tuple(weights.state[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in weights.state and weights.state[k].shape != v.shape
    )
    if missing or unexpected or shapes:
        parts = [
            f"{what}: {', '.join(keys[:6])}{' …' if len(keys) > 6 else ''}"
            for what, keys in (
                ("missing", missing),
                ("unexpected", unexpected),
                ("mis-shaped", shapes),
            )
            if keys
        ]
        raise PosencError(
            f"the state dict does not match a CS336 TransformerLM with these "
            f"settings ({'; '.join(parts)})",
            "check model.n_heads and that the model is the assignment's",
        )
    model.load_state_dict({k: v.float() for k, v in weights.state.items()})
    return model


def _write_run(
    run_dir: Path,
    cfg: DictConfig,
    overrides: list[str],
    weights: Weights,
    model: TransformerLM,
    tok: Any,
) -> None:
    plain = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    (run_dir / ".hydra").mkdir(exist_ok=True)
    OmegaConf.save(plain, run_dir / ".hydra" / "config.yaml")
    OmegaConf.save(OmegaConf.create(list(overrides)), run_dir / ".hydra" / "overrides.yaml")
    tok.save(str(run_dir / "tokenizer.json"))
    state = {
        "model": model.state_dict(),
        "step": weights.iteration or 0,
        "imported": True,
        "config": OmegaConf.to_container(plain),
    }
    save_atomic(state, run_dir / "checkpoints" / "last.pt")
    save_atomic({**state, "val_loss": None}, run_dir / "checkpoints" / "best.pt")


def _metrics(
    cfg: DictConfig, weights: Weights, model: TransformerLM, tokens: int, sources: dict[str, Path]
) -> dict[str, Any]:
    imported = {
        "from": "cs336",
        **{k: str(p) for k, p in sources.items()},
        **{f"{k}_sha256": file_digest(p, "sha256") for k, p in sources.items()},
    }
    sizes = (model.num_parameters(), weights.vocab_size, tokens)
    return imported_metrics(cfg, sizes, weights.iteration, imported)
