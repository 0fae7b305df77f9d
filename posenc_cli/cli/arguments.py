"""Typer arguments shared by several commands."""

import typer

OVERRIDES = typer.Argument(
    None, help="Hydra overrides, e.g. encoding=rope train.steps=500", show_default=False
)

#: Both exporters: export a run that another process still trains (its last checkpoint).
IN_USE = typer.Option(
    False,
    "--in-use",
    help="Export the last checkpoint of a run another posenc process still trains "
    "(its step is printed)",
)
