"""Typer arguments shared by several commands."""

import typer

OVERRIDES = typer.Argument(
    None, help="Hydra overrides, e.g. encoding=rope train.steps=500", show_default=False
)
