"""The one rich console every stage prints through, so output interleaves in order.

soft_wrap: a notice is one line however long, also in a log file or a pipe (rich would
otherwise break it at 80 columns there, splitting words a user may grep for)."""

from rich.console import Console

console = Console(highlight=False, soft_wrap=True)
