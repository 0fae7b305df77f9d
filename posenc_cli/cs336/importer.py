"""`posenc import-cs336`: a CS336 model and tokenizer written as a posenc run directory.

Everything is read and checked before the run directory is created; interchange/ writes it as
every imported run is written, with the source files' sha256 in metrics.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc_cli.common.digest import file_digest
from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.config.overrides import given
from posenc_cli.config.run_config import RunConfig, typed
from posenc_cli.cs336.bpe_checks import check_embedding
from posenc_cli.cs336.bpe_files import build_tokenizer, read_merges, read_vocab
from posenc_cli.cs336.state import Weights, load_weights
from posenc_cli.engine.build import build_model
from posenc_cli.engine.metrics import imported_metrics
from posenc_cli.interchange.import_overrides import check_import_overrides
from posenc_cli.interchange.imported_run import write_imported_run
from posenc_cli.interchange.weights import check_finite, load_exactly
from posenc_cli.model import TransformerLM

#: What the weights cannot tell and the user must say, with an example.
REQUIRED = {
    "model.n_heads": "model.n_heads=16",
    "encoding.theta": "encoding.theta=10000",
    "train.context_length": "train.context_length=256",
}

#: What the assignment's model fixes: RoPE in every layer, attending globally.
GLOBAL_ROPE_KEYS = ("model.layers", "model.windows", "model.chunks")


def import_cs336(
    checkpoint: Path, vocab: Path, merges: Path, specials: list[str], overrides: list[str]
) -> Path:
    """Check everything, then write the run directory; returns it."""
    _check_overrides(overrides)
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
    run = typed(cfg)
    model = build_model(run, weights.vocab_size)
    load_exactly(
        model,
        weights.state,
        "the state dict does not match a CS336 TransformerLM with these settings",
        "check model.n_heads and that the model is the assignment's",
    )
    sources = {"checkpoint": checkpoint, "vocab": vocab, "merges": merges}
    metrics = _metrics(run, weights, model, tok.get_vocab_size(), sources)
    step = weights.iteration or 0
    return write_imported_run(cfg, overrides, model, step, lambda p: tok.save(str(p)), metrics)


def _check_overrides(overrides: list[str]) -> None:
    """What the weights cannot say is given, and nothing the assignment's model or an import
    fixes is changed (a setting saved unread would bind `posenc eval`)."""
    for key, example in REQUIRED.items():
        if not given(overrides, key):
            raise PosencError(
                f"posenc import-cs336 needs {key} (the weights do not say it)",
                f"add {example}, as your model was built",
            )
    for key in GLOBAL_ROPE_KEYS:
        if given(overrides, key):
            raise PosencError(
                f"cannot set {key} on an imported CS336 model: it was trained with RoPE and "
                "global attention in every layer",
                f"drop {key}; set it on a new run (posenc train) instead",
            )
    check_import_overrides(overrides, "import-cs336", tuple(REQUIRED), "the checkpoint")


def _dimension_overrides(w: Weights) -> list[str]:
    return [
        f"model.d_model={w.d_model}",
        f"model.n_layers={w.n_layers}",
        f"model.d_ff={w.d_ff}",
        f"data.vocab_size={max(w.vocab_size, 257)}",
    ]


def _metrics(
    cfg: RunConfig, weights: Weights, model: TransformerLM, tokens: int, sources: dict[str, Path]
) -> dict[str, Any]:
    imported = {
        "from": "cs336",
        **{k: str(p) for k, p in sources.items()},
        **{f"{k}_sha256": file_digest(p, "sha256") for k, p in sources.items()},
    }
    sizes = (model.num_parameters(), weights.vocab_size, tokens)
    return imported_metrics(cfg, sizes, weights.iteration, imported)
