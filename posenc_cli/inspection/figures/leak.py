"""Figure 2: the m + n leak (the first derivation's Hessian argument). With a diagonal H, the
sinusoidal term p_mᵀ H p_n keeps ½(H_{2j,2j} − H_{2j+1,2j+1}) cos((m + n)θ_j): an absolute position
leaks into the score. RoPE's (R_m q)ᵀ(R_n k) = qᵀ R_{n−m} k, for the same H (q = H·1,
k = 1), depends on m − n alone: its heatmap is constant along every diagonal."""

from __future__ import annotations

from typing import Any

import torch

from posenc_cli.encodings.absolute import LearnedSinusoidalEncoding, SinusoidalEncoding
from posenc_cli.encodings.rope import RotaryEncoding
from posenc_cli.inspection.base import InspectFigure, Output, Subject
from posenc_cli.inspection.style import new_figure
from posenc_cli.inspection.theory import absolute_dependence, hessian_scores, sinusoidal_frequencies

#: Positions shown: the training range, at most this many.
MAX_POSITIONS = 256


def frequencies(subject: Subject) -> tuple[torch.Tensor, str]:
    """The configured (or learned) θ_j and what they are, for either family."""
    enc = subject.encoding
    if isinstance(enc, LearnedSinusoidalEncoding):
        theta = enc.theta.detach().double()
        what = "learned θ_j" if subject.trained else f"base {enc.base:g}"
        return theta, f"{what}, d = {enc.d_model}"
    if isinstance(enc, SinusoidalEncoding):
        return sinusoidal_frequencies(
            enc.d_model, enc.base
        ), f"base {enc.base:g}, d = {enc.d_model}"
    inv = enc.trained_inv_freq.double()
    return inv, f"θ = {enc.theta:g}, head dim {enc.head_dim}"


def diagonal(size: int) -> torch.Tensor:
    """A random diagonal H with unequal entries, the same for every run (seed 0)."""
    return (
        torch.rand(size, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 1.5
        + 0.25
    )


def relative_part_removed(scores: torch.Tensor) -> torch.Tensor:
    """``scores`` minus, at each (m, n), the mean of its diagonal m − n = const."""
    out = scores.clone()
    n = scores.shape[0]
    for offset in range(-(n - 1), n):
        diag = torch.diagonal(out, offset)
        diag -= diag.mean()
    return out


def _panel(
    fig: Any, ax: Any, data: torch.Tensor, title: str, label: str, cmap: str, span: float | None
) -> None:
    low, high = (-span, span) if span is not None else (float(data.min()), float(data.max()))
    image = ax.imshow(data.numpy(), origin="lower", cmap=cmap, vmin=low, vmax=high)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("key position n")
    ax.set_ylabel("query position m")
    fig.colorbar(image, ax=ax, label=label, shrink=0.85)


class LeakFigure(InspectFigure):
    order = 2
    name = "hessian_leak"
    derivation = "2. the m + n leak (first derivation, diagonal Hessian)"

    def skip_reason(self, subject: Subject) -> str | None:
        if isinstance(
            subject.encoding, (SinusoidalEncoding, LearnedSinusoidalEncoding, RotaryEncoding)
        ):
            return None
        return "the argument is about sinusoidal frequencies (sinusoidal encodings and RoPE)"

    def draw(self, subject: Subject) -> list[Output]:
        inv, what = frequencies(subject)
        n = min(subject.train_length, MAX_POSITIONS)
        sinusoidal, rope = hessian_scores(torch.arange(n), inv, diagonal(2 * inv.numel()))
        fig, axes = new_figure(
            2,
            2,
            width=5.0,
            height=4.2,
            title=f"Scores of positions m, n for a random diagonal H ({what})",
        )
        residuals = [relative_part_removed(x) for x in (sinusoidal, rope)]
        span = max(float(r.abs().max()) for r in residuals) or 1.0
        for col, (scores, residual, label) in enumerate(
            (
                (sinusoidal, residuals[0], "sinusoidal: p_mᵀ H p_n"),
                (rope, residuals[1], "RoPE: (R_m H·1)ᵀ (R_n 1)"),
            )
        ):
            _panel(fig, axes[0, col], scores, label, "score", "viridis", None)
            _panel(
                fig,
                axes[1, col],
                residual,
                f"{label.split(':')[0]} minus its mean along m − n = const\n(max spread "
                f"{absolute_dependence(scores):.1e} of the largest score)",
                "absolute part of the score",
                "RdBu_r",
                span,
            )
        return [
            Output(
                "hessian_leak",
                fig,
                "Bottom row: what is left after removing each "
                "score's dependence on m − n; the sinusoidal score keeps stripes along "
                "m + n (the Hessian argument's absolute leak), RoPE's is zero.",
            )
        ]

    def scalars(self, subject: Subject) -> dict[str, float]:
        inv, _ = frequencies(subject)
        n = min(subject.train_length, MAX_POSITIONS)
        sinusoidal, rope = hessian_scores(torch.arange(n), inv, diagonal(2 * inv.numel()))
        return {
            "m_plus_n_dependence/sinusoidal": absolute_dependence(sinusoidal),
            "m_plus_n_dependence/rope": absolute_dependence(rope),
        }
