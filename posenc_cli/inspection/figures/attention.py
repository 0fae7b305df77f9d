"""Figure 5: what each head of a trained run does at 1x and at the longest evaluation length,
on the same held-out tokens: the mean attention distance, the entropy of its attention, and
the share of attention mass beyond the training length L — a heatmap per statistic, so a
reader sees which heads stay local and which go diffuse past L."""

from __future__ import annotations

import math
import textwrap
from typing import Any

import numpy as np

from posenc_cli.inspection.base import InspectFigure, Output, Subject
from posenc_cli.inspection.style import heatmap, new_figure


class AttentionFigure(InspectFigure):
    order = 5
    name = "attention"
    derivation = "5. attention statistics of a trained run"

    def skip_reason(self, subject: Subject) -> str | None:
        if not subject.trained:
            return "needs a trained run: `posenc inspect RUN_DIR`"
        return None

    def draw(self, subject: Subject) -> list[Output]:
        L = subject.train_length
        T = subject.longest
        short = subject.stats("model", L)
        long = subject.stats("model", T)
        out = [
            Output(stem, per_head_figure(subject, short, long, field, name, label), caption)
            for stem, field, name, label, caption in PANELS
        ]
        if long.beyond is not None:
            out.append(
                Output(
                    "attention_beyond",
                    beyond_figure(subject, long.beyond),
                    "How much attention each head puts on "
                    "keys further away than any it saw in training.",
                )
            )
        return out

    def scalars(self, subject: Subject) -> dict[str, float]:
        L = subject.train_length
        T = subject.longest
        out: dict[str, float] = {}
        for length, tag in ((L, "1x"), (T, f"{T // L}x")):
            stats = subject.stats("model", length)
            out[f"attention/mean_distance_{tag}"] = float(np.mean(stats.mean_distance))
            out[f"attention/entropy_{tag}"] = float(np.mean(stats.entropy))
            if stats.beyond is not None:
                out[f"attention/mass_beyond_L_{tag}"] = float(np.mean(stats.beyond))
        return out


#: (file stem, statistic, title, colour-bar label, caption) of the two per-head heatmaps.
PANELS = (
    (
        "attention_distance",
        "mean_distance",
        "Mean attention distance",
        "mean distance Σ p_ij (i − j), tokens",
        "Mean attention distance per head: local heads stay dark at both lengths.",
    ),
    (
        "attention_entropy",
        "entropy",
        "Attention entropy",
        "entropy −Σ p ln p (nats)",
        "Attention entropy per head: a head whose entropy grows with the context "
        "spreads its attention past L.",
    ),
)


def per_head_figure(
    subject: Subject, short: Any, long: Any, field: str, name: str, label: str
) -> Any:
    """One statistic per layer and head at 1x and at the longest length, on one colour scale,
    each panel titled with what uniform causal attention would give."""
    L = subject.train_length
    T = subject.longest
    a = getattr(short, field)
    b = getattr(long, field)
    top = max(float(a.max()), float(b.max()))
    fig, axes = new_figure(
        1, 2, width=5.0, height=3.8, title=f"{name} per layer and head, step {subject.step}"
    )
    heatmap(fig, axes[0, 0], a, f"1x: {L} tokens", label, 0.0, top)
    heatmap(fig, axes[0, 1], b, f"{T // L}x: {T} tokens", label, 0.0, top)
    for ax, n in ((axes[0, 0], L), (axes[0, 1], T)):
        ax.set_title(f"{ax.get_title()} {uniform_note(subject, field, n)}", fontsize=10)
    return fig


def uniform_value(field: str, n: int, window: int | None, chunk: int | None) -> float:
    """The mean distance or entropy of uniform attention over the keys each of n queries
    sees (its earlier keys, within the layer's sliding window and chunk), averaged over the
    queries: query i sees k_i keys, distance (k_i − 1)/2, entropy ln k_i."""
    total = 0.0
    for i in range(n):
        first = 0 if window is None else max(0, i - window + 1)
        first = first if chunk is None else max(first, i // chunk * chunk)
        seen = i - first + 1
        total += math.log(seen) if field == "entropy" else (seen - 1) / 2
    return total / n


def uniform_note(subject: Subject, field: str, n: int) -> str:
    """The panel's reference: uniform causal attention, or, where windows or chunks
    (model.windows, model.chunks) let layers see different keys, each group of layers' own."""
    digits = 2 if field == "entropy" else 1
    groups: dict[str, list[int]] = {}
    for layer, local in enumerate(zip(subject.model.windows, subject.model.chunks, strict=True)):
        groups.setdefault(f"{uniform_value(field, n, *local):.{digits}f}", []).append(layer + 1)
    if len(groups) == 1 and not any(subject.model.windows) and not any(subject.model.chunks):
        return f"(uniform causal: {next(iter(groups))})"
    parts = [
        f"{value} (layer{'s' if len(ls) > 1 else ''} {', '.join(map(str, ls))})"
        for value, ls in groups.items()
    ]
    # no-break spaces keep each group on one line of the wrapped title
    kept = "; ".join(part.replace(" ", "\N{NO-BREAK SPACE}") for part in parts)
    return "\n" + textwrap.fill(f"(uniform over the keys seen: {kept})", 46)


def beyond_figure(subject: Subject, beyond: Any) -> Any:
    """The share of each head's attention on keys further than L, at the longest length."""
    L = subject.train_length
    T = subject.longest
    fig, axes = new_figure(
        width=5.6,
        height=3.8,
        title=f"Share of attention beyond distance L = {L} at {T} "
        f"tokens (queries i ≥ L), step {subject.step}",
    )
    heatmap(
        fig,
        axes[0, 0],
        beyond,
        f"{T // L}x",
        "attention mass at i − j ≥ L",
        0.0,
        max(1e-6, float(beyond.max())),
    )
    return fig
