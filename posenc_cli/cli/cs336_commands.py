"""The CS336 bridge's commands (registered in app.py): `posenc import-cs336` and `export-cs336`.

Each imports its stage inside the function, so `posenc --help` does not load torch.
"""

from __future__ import annotations

from pathlib import Path

import typer

from posenc_cli.cli.arguments import IN_USE, OVERRIDES
from posenc_cli.cli.errors import user_errors


def import_cs336(
    checkpoint: Path = typer.Argument(
        ..., help="Your CS336 checkpoint (save_checkpoint's file, or a bare state dict)"
    ),
    vocab: Path = typer.Option(..., "--vocab", help="vocab.json, or the pickled dict[int, bytes]"),
    merges: Path = typer.Option(
        ..., "--merges", help="merges.txt, or the pickled list[tuple[bytes, bytes]]"
    ),
    special: list[str] | None = typer.Option(
        None, "--special", help="A special token (repeatable) [default: <|endoftext|>]"
    ),
    overrides: list[str] | None = OVERRIDES,
) -> None:
    """Import a CS336 assignment-1 model as a posenc run (needs model.n_heads, encoding.theta
    and train.context_length; also takes eval.*, data.*, seed and hydra.run.dir, nothing that
    trains); then `posenc eval` and `posenc compare` work on it."""
    with user_errors():
        # deferred, as in export_cs336: `posenc --help` stays torch-free
        from posenc_cli.cs336.importer import import_cs336 as run_import

        run_dir = run_import(
            checkpoint, vocab, merges, list(special or ["<|endoftext|>"]), list(overrides or [])
        )
        print(
            f"posenc: imported {checkpoint} as {run_dir}; evaluate it with: posenc eval "
            f"{run_dir} data=text data.path=YOUR_VALIDATION.txt",
            flush=True,
        )


def export_cs336(
    run_dir: Path = typer.Argument(..., help="A posenc run trained with rope"),
    out: Path = typer.Argument(..., help="A new folder for the files"),
    in_use: bool = IN_USE,
) -> None:
    """Write a posenc RoPE run as a CS336 checkpoint, vocab and merges (text and pickles)."""
    with user_errors():
        from posenc_cli.cs336.exporter import export_cs336 as run_export

        for path in run_export(run_dir, out, in_use):
            print(f"wrote {path}", flush=True)
