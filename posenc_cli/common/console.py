"""The one rich console every stage prints through, so output interleaves in order."""

from rich.console import Console

console = Console(highlight=False)
