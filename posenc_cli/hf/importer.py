"""`posenc import-hf DIR_OR_HUB_ID`: a Llama-family checkpoint written as a posenc run directory
(SmolLM3's, whose NoPE layers become ``encoding=hybrid``, included).

Everything is read and checked before the run directory is created; interchange/ writes it as
every imported run is written (the model's own tokenizer.json), so `posenc eval` (every
protocol, every eval.rope_scaling method) and `posenc inspect` take it like any other run.
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from posenc_cli.common.digest import file_digest
from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.config.overrides import given
from posenc_cli.config.run_config import RunConfig, typed
from posenc_cli.data.tokenizer import eot_id, load_tokenizer
from posenc_cli.engine.build import build_model
from posenc_cli.engine.memory import FLOAT, available_bytes, gib, n_params
from posenc_cli.engine.metrics import imported_metrics
from posenc_cli.hf.export import require_safetensors
from posenc_cli.hf.import_config import read_config, settings
from posenc_cli.hf.import_weights import posenc_state, read_safetensors, weight_files
from posenc_cli.hf.source import model_folder
from posenc_cli.interchange.import_overrides import check_import_overrides
from posenc_cli.interchange.imported_run import write_imported_run
from posenc_cli.interchange.weights import check_finite, load_exactly
from posenc_cli.model import TransformerLM


def import_hf(
    name: str, overrides: list[str], allow_download: bool = False, revision: str | None = None
) -> Path:
    """Check everything, then write the run directory; returns it."""
    check_import_overrides(overrides, "import-hf", ("train.context_length",), "its config.json")
    require_safetensors()
    folder = model_folder(name, allow_download, revision)
    config = read_config(folder)
    derived = settings(config, folder)
    vocab = int(config["vocab_size"])  # an integer >= 1: settings() checked it
    encoding = derived.pop("encoding", "rope")  # hybrid for SmolLM3's NoPE layers
    cfg = compose(
        [
            f"encoding={encoding}",
            *(f"{k}={v}" for k, v in derived.items() if not given(overrides, k)),
            *overrides,
        ],
        with_hydra=True,
    )
    run = typed(cfg)
    tok = _tokenizer(folder, vocab)
    _check_import_memory(run, vocab, folder)
    m = run.model
    weights = read_safetensors(weight_files(folder))
    state = posenc_state(weights, m.n_layers, m.d_model // m.n_heads, m.tie_embeddings)
    check_finite(state, folder)
    model = build_model(run, vocab)
    load_exactly(
        model,
        state,
        f"{folder}: config.json and the weights disagree",
        "use the config.json saved with these weights",
    )
    metrics = _metrics(run, model, tok, name, folder)
    copy = partial(shutil.copyfile, folder / "tokenizer.json")
    return write_imported_run(cfg, overrides, model, 0, copy, metrics)


def _tokenizer(folder: Path, model_vocab: int) -> Tokenizer:
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise PosencError(
            f"{folder} has no tokenizer.json",
            "save the model's fast tokenizer there (AutoTokenizer...save_pretrained)",
        )
    tok = load_tokenizer(path)
    largest = max(tok.get_vocab(with_added_tokens=True).values(), default=-1)
    if tok.get_vocab_size() > model_vocab or largest >= model_vocab:
        raise PosencError(
            f"{path} has {tok.get_vocab_size()} tokens up to id {largest}, but the model's "
            f"embedding has {model_vocab} rows",
            "give the tokenizer this model was trained with",
        )
    eot_id(tok)
    return tok


def _check_import_memory(cfg: RunConfig, vocab: int, folder: Path) -> None:
    """The weights config.json describes, read whole three times over (the file's tensors,
    posenc's layout, the model), must fit before the first byte is read."""
    need = 3 * FLOAT * n_params(cfg, vocab)
    available = available_bytes()
    if need > available:
        raise PosencError(
            f"{folder / 'config.json'} describes a model of {n_params(cfg, vocab):,} parameters: "
            f"importing it needs about {gib(need)} but {gib(available)} of memory is available",
            "import a smaller checkpoint, or free memory on this machine",
        )


def _metrics(
    cfg: RunConfig, model: TransformerLM, tok: Tokenizer, name: str, folder: Path
) -> dict[str, Any]:
    files = {"config": folder / "config.json", "tokenizer": folder / "tokenizer.json"}
    imported = {
        "from": "hf",
        "model": name,
        "weights": [p.name for p in weight_files(folder)],
        **{f"{k}_sha256": file_digest(p, "sha256") for k, p in files.items()},
    }
    sizes = (model.num_parameters(), model.vocab_size, tok.get_vocab_size())
    return imported_metrics(cfg, sizes, None, imported)
