"""`posenc export-hf RUN OUT`: a posenc RoPE run as a Hugging Face checkpoint folder.

OUT gets config.json (export_config.py), model.safetensors (float32, q and k rows in the
halves layout of layout.py) and the run's tokenizer (tokenizer.json, tokenizer_config.json,
special_tokens_map.json). Everything is written into a hidden sibling folder that is renamed
to OUT once complete, so OUT is either absent or whole.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from posenc_cli.common.atomic import write_json_atomic
from posenc_cli.common.errors import PosencError
from posenc_cli.common.sizes import default_d_ff
from posenc_cli.config.run_config import RunConfig
from posenc_cli.data.corpus import EOT
from posenc_cli.encodings.rope import rotary_frequencies
from posenc_cli.engine.build import build_model
from posenc_cli.hf.export_checks import check_exportable, layer_windows, no_rope_layers
from posenc_cli.hf.export_config import Shape, hf_config
from posenc_cli.hf.layout import llama_state, phi3_state
from posenc_cli.interchange.export_source import open_run, write_export

FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def export_hf(
    run_dir: Path,
    out: Path,
    method: str = "none",
    factor: float | None = None,
    in_use: bool = False,
) -> list[Path]:
    """Check the options and the run, write FILES into a new folder ``out``; returns their
    paths. ``factor`` None: not given (1, what an extension run was fine-tuned with, or for
    longrope the run's eval.rope_factor);
    ``in_use``: export the last checkpoint of a run another process still trains."""
    given = _given_factor(method, factor)
    source = open_run(run_dir, out, in_use, lambda cfg: check_exportable(cfg, run_dir))
    cfg, state = source.cfg, source.checkpoint["model"]
    _check_weights_fit(cfg, state, run_dir)
    eot = _end_of_text(source.tokenizer)
    method, S, length = run_scaling(cfg, run_dir, method, given)
    shape = replace(_shape(cfg, state, int(eot)), train_length=length)
    config = hf_config(
        shape, method, S, run_rescale(cfg, run_dir) if method == "longrope" else None
    )
    tensors = llama_state(state, shape.n_layers, shape.head_dim, shape.rotary_dims)
    if config["model_type"] == "phi3":
        tensors = phi3_state(tensors, shape.n_layers)
    require_safetensors()
    write_export(out, lambda tmp: _write_files(tmp, config, tensors, source.tokenizer))
    return [out / f for f in FILES]


def run_scaling(
    cfg: RunConfig, run_dir: Path, method: str, factor: float | None
) -> tuple[str, float, int]:
    """The method, factor and original length to write: those a `posenc extend` run was
    fine-tuned with (dynamic NTK as transformers' factor 1, which reaches S at S·L), else the
    options' with the run's own length (longrope's factor by default the S its evaluation
    uses, eval.rope_factor; the others' 1)."""
    length = cfg.train.context_length
    if method == "longrope" and factor is None:
        factor = cfg.eval.extrapolation.rope_factor
        if factor is None:
            raise PosencError(
                f"{run_dir}'s config sets no eval.rope_factor, the S longrope would write",
                "give it, e.g. --factor 4",
            )
    ext = cfg.extend
    if ext.parent is not None:
        if method != "none":
            raise PosencError(
                f"{run_dir} was fine-tuned with extend.method={ext.method}, which its "
                "config.json then says",
                "export it without --rope-scaling and --factor",
            )
        if ext.method != "none":
            assert ext.original_length is not None  # set with the parent (config/extension.py)
            method, length = ext.method, ext.original_length
            factor = 1.0 if method == "dynamic_ntk" else ext.factor
    if method == "yarn" and cfg.encoding.params.get("yarn_ramp") == "paper":
        raise PosencError(
            f"{run_dir} uses YaRN's paper ramp (encoding.yarn_ramp=paper), which transformers' "
            "YaRN does not compute",
            "export a run with encoding.yarn_ramp=hf, or without --rope-scaling yarn",
        )
    return method, 1.0 if factor is None else factor, length


def run_rescale(cfg: RunConfig, run_dir: Path) -> tuple[list[float], list[float]]:
    """LongRoPE's two factor sets: those a run fine-tuned with longrope trained with (its
    extend.*), else the run's evaluation settings (an imported LongRoPE checkpoint's); config
    loading checked their lengths against the rotated pairs."""
    ext = cfg.extend
    if ext.parent is not None and ext.method == "longrope":
        # _check_weights_fit built the model, which refuses a run without both sets
        assert ext.long_factor is not None and ext.short_factor is not None
        return list(ext.long_factor), list(ext.short_factor)
    ev = cfg.eval.extrapolation
    if ev.rope_long_factor is None or ev.rope_short_factor is None:
        raise PosencError(
            f"{run_dir}'s config has no LongRoPE rescale factors (eval.rope_long_factor and "
            "eval.rope_short_factor)",
            "export a run imported from a LongRoPE checkpoint, or choose another --rope-scaling",
        )
    return list(ev.rope_long_factor), list(ev.rope_short_factor)


def _given_factor(method: str, factor: float | None) -> float | None:
    """The factor given (None: not given); never silently ignored: one without a method, or
    one that is not a finite number, is refused before anything is read."""
    if factor is None:
        return None
    if not math.isfinite(factor):
        raise PosencError(f"--factor {factor} is not a finite number", "give e.g. --factor 4")
    if method == "none":
        raise PosencError(
            f"--factor {factor:g} has no effect without --rope-scaling",
            "add --rope-scaling yarn (or pi, ntk, dynamic_ntk, llama3, longrope), or leave "
            "--factor out",
        )
    return factor


def _end_of_text(tok_path: Path) -> int:
    """The id of the run's end-of-text token from its tokenizer.json, a file the run may have
    received: a regular file (never a link followed elsewhere) holding a JSON object."""
    fix = "export a run posenc trained, with its own tokenizer.json"
    if tok_path.is_symlink() or not tok_path.is_file():
        raise PosencError(f"{tok_path} is missing, a link or not a regular file", fix)
    try:
        tokenizer = json.loads(tok_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        raise PosencError(f"{tok_path} is not valid JSON", fix) from None
    added = tokenizer.get("added_tokens") if isinstance(tokenizer, dict) else None
    ids = [
        t["id"]
        for t in (added if isinstance(added, list) else [])
        if isinstance(t, dict) and t.get("content") == EOT and isinstance(t.get("id"), int)
    ]
    if not ids:
        raise PosencError(f"{tok_path} has no {EOT} token", fix)
    return int(ids[0])


def _check_weights_fit(cfg: RunConfig, state: dict[str, Any], run_dir: Path) -> None:
    """The checkpoint's weights are those of the model the run's config describes, so the
    exported config.json describes the exported weights (transformers would refuse them)."""
    try:
        vocab = int(state["lm_head.weight"].shape[0])
        build_model(cfg, vocab).load_state_dict(state, strict=True)
    except (KeyError, AttributeError, IndexError, TypeError, RuntimeError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise PosencError(
            f"{run_dir}'s checkpoint does not match its .hydra/config.yaml ({first})",
            "export a run whose saved config is the one it trained with",
        ) from None


def _shape(cfg: RunConfig, state: dict[str, Any], eot: int) -> Shape:
    m = cfg.model
    enc = cfg.encoding.params
    head_dim = m.d_model // m.n_heads
    _, rotary_dims = rotary_frequencies(head_dim, enc["theta"], enc["rotary_fraction"], 1.0)
    return Shape(
        vocab_size=int(state["lm_head.weight"].shape[0]),
        d_model=m.d_model,
        n_layers=m.n_layers,
        n_heads=m.n_heads,
        n_kv_heads=m.n_kv_heads or m.n_heads,
        d_ff=m.d_ff or default_d_ff(m.d_model),
        head_dim=head_dim,
        rotary_dims=rotary_dims,
        theta=float(enc["theta"]),
        train_length=cfg.train.context_length,
        rms_norm_eps=m.rms_norm_eps,
        eot=eot,
        no_rope_layers=no_rope_layers(cfg),
        windows=layer_windows(cfg),
    )


def _write_files(
    folder: Path, config: dict[str, Any], tensors: dict[str, Any], tok_path: Path
) -> None:
    # deferred: safetensors is the optional [hf] extra
    from safetensors.torch import save_file

    write_json_atomic(folder / "config.json", config)
    save_file(
        {k: v.float().contiguous() for k, v in tensors.items()},
        str(folder / "model.safetensors"),
        metadata={"format": "pt"},
    )
    shutil.copyfile(tok_path, folder / "tokenizer.json")
    specials = {"bos_token": EOT, "eos_token": EOT, "pad_token": EOT}
    write_json_atomic(
        folder / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **specials,
            "unk_token": None,
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": config["max_position_embeddings"],
        },
    )
    write_json_atomic(folder / "special_tokens_map.json", specials)


def require_safetensors() -> None:
    """One line when the optional extra is not installed."""
    try:
        import safetensors  # noqa: F401
    except ImportError:
        raise PosencError(
            "Hugging Face interchange needs the safetensors package",
            'install the extra: pip install -e ".[hf]"',
        ) from None
