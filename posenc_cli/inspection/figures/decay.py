"""Figure 1: the long-range decay of ⟨p_m, p_n⟩ with m - n (the first derivation's
Riemann–Lebesgue argument), for the configured sinusoidal base beside bases 10, 100 and
10000; for a trained `sinusoidal_learned` run also the learned frequencies against their
initialisation."""

from __future__ import annotations

from typing import Any

import torch

from posenc_cli.encodings.absolute import LearnedSinusoidalEncoding, SinusoidalEncoding
from posenc_cli.inspection.base import InspectFigure, Output, Subject
from posenc_cli.inspection.style import mark_training_length, new_figure
from posenc_cli.inspection.theory import sinusoid_inner_products, sinusoidal_frequencies

REFERENCE_BASES = (10.0, 100.0, 10000.0)


class DecayFigure(InspectFigure):
    order = 1
    name = "decay"
    derivation = "1. long-range decay (first derivation, Riemann–Lebesgue)"

    def skip_reason(self, subject: Subject) -> str | None:
        if isinstance(subject.encoding, (SinusoidalEncoding, LearnedSinusoidalEncoding)):
            return None
        return "only sinusoidal encodings add p_m to the input (RoPE's decay is figure 3)"

    def draw(self, subject: Subject) -> list[Output]:
        enc = subject.encoding
        dim = subject.encoding.d_model
        distances = torch.arange(0, subject.longest)
        fig, axes = new_figure(
            title=f"Long-range decay: ⟨p_m, p_n⟩ against m − n (d = {dim}, normalised by d/2)"
        )
        ax = axes[0, 0]
        _plot_bases(ax, distances, dim, enc.base)
        learned = isinstance(enc, LearnedSinusoidalEncoding) and subject.trained
        if learned:
            curve = sinusoid_inner_products(distances, enc.theta.detach().double())
            ax.plot(
                distances,
                curve / (dim / 2),
                color="black",
                linewidth=1.6,
                label="learned frequencies",
            )
        mark_training_length(ax, subject.train_length)
        ax.axhline(0, color="0.7", linewidth=0.8)
        ax.set_xlabel("distance m − n (tokens)")
        ax.set_ylabel("⟨p_m, p_n⟩ / (d/2)")
        ax.legend(fontsize=8)
        out = [
            Output(
                "decay",
                fig,
                "⟨p_m, p_n⟩ = Σ_j cos((m − n)θ_j) falls from d/2 towards "
                "0 as the distance grows, faster for a smaller base.",
            )
        ]
        if learned:
            out.append(self._frequencies(subject))
        return out

    def _frequencies(self, subject: Subject) -> Output:
        enc = subject.encoding
        init = sinusoidal_frequencies(enc.d_model, enc.base)
        learned = enc.theta.detach().double()
        fig, axes = new_figure(
            1,
            2,
            width=5.0,
            title="Learned sinusoidal frequencies θ_j "
            f"against their initialisation base^(−2j/d), base {enc.base:g}, "
            f"step {subject.step}",
        )
        j = torch.arange(init.numel())
        ax = axes[0, 0]
        ax.semilogy(j, init, color="0.5", linestyle="--", label="initialisation")
        ax.semilogy(j, learned, color="black", marker=".", markersize=3, label="learned")
        ax.set_xlabel("frequency index j")
        ax.set_ylabel("θ_j (radians per token, log scale)")
        ax.legend(fontsize=8)
        ax = axes[0, 1]
        ax.axhline(0, color="0.5", linestyle="--", linewidth=1)
        ax.plot(j, (learned / init - 1) * 100, color="black", marker=".", markersize=3)
        ax.set_xlabel("frequency index j")
        ax.set_ylabel("change of θ_j since initialisation (%)")
        return Output(
            "learned_frequencies",
            fig,
            "How far training moved each frequency θ_j "
            "from base^(−2j/d), in absolute terms (left) and relative (right).",
        )


def _plot_bases(ax: Any, distances: torch.Tensor, dim: int, configured_base: float) -> None:
    """The normalised decay curve of the reference bases and the configured one (bold)."""
    for base in sorted({*REFERENCE_BASES, configured_base}):
        curve = sinusoid_inner_products(distances, sinusoidal_frequencies(dim, base))
        configured = base == configured_base
        ax.plot(
            distances,
            curve / (dim / 2),
            linewidth=2.0 if configured else 1.0,
            label=f"base {base:g}" + (" (configured)" if configured else ""),
            zorder=3 if configured else 2,
        )
