"""The one table of every comparison, for the terminal (rich) and for a README (Markdown):
(text, is best) cells, the best in bold."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text


def rich_table(
    title: str, header: list[str], body: list[list[tuple[str, bool]]], fixed: int = 2
) -> Any:
    """The terminal table: the first column left-aligned, the first ``fixed`` never wrapped,
    the best per column in bold green and n/a dimmed."""

    table = Table(title=escape(title))  # a heading's [rope, alibi] is not markup
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=i < fixed)
    for row in body:
        table.add_row(
            *(
                Text(t, style="bold green" if best else "dim" if t == "n/a" else "")
                for t, best in row
            )
        )
    return table


def markdown_table(title: str, header: list[str], body: list[list[tuple[str, bool]]]) -> str:
    """The Markdown table under a bold title: the first column left-aligned, the best in bold."""
    lines = [
        f"**{title}**",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    lines += [
        "| " + " | ".join(f"**{t}**" if best else t for t, best in row) + " |" for row in body
    ]
    return "\n".join(lines)
