"""The command line: Typer commands, sweeps, what the user sees."""
