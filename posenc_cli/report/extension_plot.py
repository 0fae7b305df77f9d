"""How `posenc compare` draws perplexity vs length when `posenc extend` runs are among the rows.

A grid of methods x fine-tuning steps is some twenty lines; a colour per row label cannot be
read. Here a line's colour says its method (or its encoding, when several parents share the
figure), dashed means no fine-tuning (the parent, or the parent evaluated with a method), and
the marker and width say how many steps it was fine-tuned and at which length (continued
training at L and at 4L are different runs of the same method). Two legends spell out both keys.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from posenc_cli.encodings.names import ROPE_SCALING_METHODS

if TYPE_CHECKING:
    from posenc_cli.report.runs import Group, Row

#: Markers of the fine-tuned step counts, fewest steps first; 0 steps is a small dot.
MARKERS = ("s", "^", "D", "v", "P", "X")
PARENT_COLOUR = "0.15"
FINE_TUNED = "fine-tuning length"


@dataclass(frozen=True)
class Kind:
    """What a row is: its parent encoding's label, method, steps and length fine-tuned at."""

    base: str
    method: str
    steps: int
    length: int | None

    @property
    def parent(self) -> bool:
        return self.method == "none" and self.steps == 0


def kind_of(row: Row) -> Kind:
    """A row's kind from its first run: an extension, a scaling evaluation, or a plain run."""
    run = row.runs[0]
    base = re.split(r" \+ |, \d+ steps @", row.label)[0]
    ext = run.metrics.get("extend")
    if isinstance(ext, dict):
        length = ext.get("train_length")
        return Kind(base, str(ext.get("method")), int(ext.get("steps") or 0), length)
    if run.variant is not None:
        return Kind(base, str((run.result or {}).get("rope_scaling")), 0, None)
    return Kind(base, "none", 0, None)


def _fewest_steps(key: tuple[int, int | None]) -> tuple[int, int]:
    return key[0], key[1] or 0


def _method_order(method: str) -> tuple[int, str]:
    known = method in ROPE_SCALING_METHODS
    return (ROPE_SCALING_METHODS.index(method) if known else len(ROPE_SCALING_METHODS), method)


@dataclass
class ExtensionStyles:
    """The line style of every row of the figure and the two legends that explain them."""

    kinds: dict[int, Kind]
    colours: dict[str, Any]
    #: (steps, length fine-tuned at) of the fine-tuned rows, in the order of their markers.
    steps: list[tuple[int, int | None]]
    by_method: bool

    def colour_key(self, kind: Kind) -> str:
        """The method (one parent encoding), else the encoding (with the method, if not none)."""
        if self.by_method:
            return "parent" if kind.parent else kind.method
        return kind.base if kind.method == "none" else f"{kind.base} + {kind.method}"

    def line(self, row: Row) -> dict[str, Any]:
        """matplotlib keywords for the row's line."""
        kind = self.kinds[id(row)]
        return {
            **_steps_style(self.steps.index((kind.steps, kind.length)) if kind.steps else None),
            "color": self.colours[self.colour_key(kind)],
        }

    def mark_lengths(self, ax: Any) -> None:
        """A dotted line at each length the runs were fine-tuned at."""
        for length in sorted({k.length for k in self.kinds.values() if k.steps and k.length}):
            ax.axvline(length, color="0.35", linestyle=":", linewidth=1.2, label=FINE_TUNED)

    def legends(self, fig: Any, guides: dict[str, Any]) -> None:
        """Colour key above, line key (with the guides) below, outside the panels."""
        # deferred: matplotlib only when the figure is drawn
        from matplotlib.lines import Line2D

        parents = sorted({k.base for k in self.kinds.values()})
        names = {"none": "none (continued training)", "parent": f"{parents[0]} (the parent)"}
        colour = {
            names.get(key, key): Line2D([], [], color=c, linewidth=2.5)
            for key, c in self.colours.items()
        }
        title = "method (colour)" if self.by_method else "encoding (colour)"
        if not self.by_method and any(" + " in key for key in self.colours):
            title = "encoding + method (colour)"
        _legend(fig, colour, title, "upper")
        lines = {"no fine-tuning": Line2D([], [], color="0.4", **_steps_style(None))}
        for i, (steps, length) in enumerate(self.steps):
            at = f" @{length}" if length else ""
            lines[f"{steps} steps{at}"] = Line2D([], [], color="0.4", **_steps_style(i))
        if any(k.steps and k.length for k in self.kinds.values()):
            guides = {**guides, FINE_TUNED: Line2D([], [], color="0.35", linestyle=":")}
        _legend(fig, {**lines, **guides}, "fine-tuning (line)", "lower")


def _steps_style(i: int | None) -> dict[str, Any]:
    """Dashed with small dots without fine-tuning; else the i-th marker, wider with more steps."""
    if i is None:
        return {"linestyle": "--", "marker": "o", "markersize": 3, "linewidth": 1.3}
    return {
        "linestyle": "-",
        "marker": MARKERS[i % len(MARKERS)],
        "markersize": 5,
        "linewidth": 1.2 + 0.8 * i,
    }


def _legend(fig: Any, entries: dict[str, Any], title: str, where: str) -> None:
    fig.legend(
        entries.values(),
        entries.keys(),
        title=title,
        loc=f"outside right {where}",
        frameon=False,
        alignment="left",
    )


def extension_styles(groups: list[Group]) -> ExtensionStyles | None:
    """The styles when some row is a `posenc extend` run; None keeps compare's usual figure."""
    rows = [r for g in groups for r in g.rows]
    if not any(isinstance(r.runs[0].metrics.get("extend"), dict) for r in rows):
        return None
    kinds = {id(r): kind_of(r) for r in rows}
    styles = ExtensionStyles(
        kinds,
        {},
        sorted({(k.steps, k.length) for k in kinds.values() if k.steps}, key=_fewest_steps),
        len({k.base for k in kinds.values()}) == 1,
    )
    ordered = sorted(kinds.values(), key=lambda k: (k.base, _method_order(k.method)))
    keys = [key for key in dict.fromkeys(map(styles.colour_key, ordered)) if key != "parent"]
    colours = palette(len(keys))
    if styles.by_method and any(k.parent for k in kinds.values()):
        styles.colours["parent"] = PARENT_COLOUR
    styles.colours.update({key: colours[i % len(colours)] for i, key in enumerate(keys)})
    return styles


def palette(n: int) -> Sequence[Any]:
    """The colours of ``n`` lines in compare's figures: tab10's up to ten, tab20's beyond."""
    # deferred: matplotlib only when a figure is drawn
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    assert isinstance(cmap, ListedColormap)  # the qualitative maps are lists of colours
    return cast(Sequence[Any], cmap.colors)  # a tuple of RGB tuples; typed as any array-like
