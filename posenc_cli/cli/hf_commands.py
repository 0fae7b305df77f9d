"""The Hugging Face commands (registered in app.py): `posenc export-hf` and `posenc import-hf`.

Each imports its stage inside the function, so `posenc --help` loads neither torch nor the
Hugging Face libraries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from posenc_cli.cli.arguments import IN_USE, OVERRIDES
from posenc_cli.cli.errors import user_errors


def export_hf(
    run_dir: Annotated[Path, typer.Argument(help="A posenc run trained with encoding=rope")],
    out: Annotated[Path, typer.Argument(help="A new folder for the checkpoint")],
    rope_scaling: Annotated[
        str,
        typer.Option(
            "--rope-scaling",
            help="Context extension written into config.json: none, pi, ntk, "
            "dynamic_ntk, yarn, llama3 or longrope (the rescale factors and S of the run's "
            "eval.rope_* settings, e.g. an imported LongRoPE checkpoint's)",
        ),
    ] = "none",
    factor: Annotated[
        float | None,
        typer.Option(
            "--factor",
            help="The extension factor S of --rope-scaling (longrope: the run's "
            "eval.rope_factor when not given)",
            show_default=False,
        ),
    ] = None,
    in_use: bool = IN_USE,
) -> None:
    """Write a posenc RoPE run as a Hugging Face checkpoint (Llama; Phi-3 for partial rotary)
    that transformers, vLLM and lm-evaluation-harness load."""
    with user_errors():
        # deferred, as in import_hf: `posenc --help` stays torch- and Hugging Face-free
        from posenc_cli.hf.export import export_hf as run_export

        for path in run_export(run_dir, out, rope_scaling, factor, in_use):
            print(f"wrote {path}", flush=True)


def import_hf(
    model: Annotated[
        str, typer.Argument(help="A model folder, or a hub id already in the local cache")
    ],
    overrides: list[str] | None = OVERRIDES,
    allow_download: Annotated[
        bool,
        typer.Option("--allow-download", help="Fetch a hub id that is not cached (safetensors)"),
    ] = False,
    revision: Annotated[
        str | None, typer.Option("--revision", help="The hub revision (branch, tag, commit)")
    ] = None,
) -> None:
    """Import a Llama-family checkpoint (llama, mistral, qwen2 without biases) as a posenc
    run; then `posenc eval` and `posenc inspect` work on it."""
    with user_errors():
        from posenc_cli.hf.importer import import_hf as run_import

        run_dir = run_import(model, list(overrides or []), allow_download, revision)
        print(f"posenc: imported {model} as {run_dir}; {_how_to_evaluate(run_dir)}", flush=True)


def _how_to_evaluate(run_dir: Path) -> str:
    """The command that evaluates the imported run: a LongRoPE checkpoint's own evaluation
    is in its config; a plain one is shown with a scaling method beside it."""
    from posenc_cli.config.rundir import load_run_config  # deferred with the import stage

    if str(load_run_config(run_dir).eval.extrapolation.rope_scaling) == "longrope":
        return (
            f"evaluate it with: posenc eval {run_dir} (LongRoPE as transformers runs it; "
            "eval.rope_scaling=none for plain RoPE)"
        )
    return f"evaluate it with: posenc eval {run_dir} eval.rope_scaling=yarn eval.rope_factor=4"
