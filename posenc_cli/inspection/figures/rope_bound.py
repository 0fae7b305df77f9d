"""Figure 3: RoPE's long-range decay. Su et al. bound the score |Σ_j q_j k_j* e^{i k θ_j}| by
max_j |h_{j+1} − h_j| · Σ_j |S_j|, S_j = Σ_{i<j} e^{i k θ_i}; the mean (1/F) Σ_j |S_j| falls
with the distance k (RoFormer §3.4.3). In a trained run: the mean scaled q·k by distance,
per layer, on held-out text at the longest evaluation length."""

from __future__ import annotations

import torch

from posenc_cli.encodings.rope import RotaryEncoding
from posenc_cli.inspection.base import InspectFigure, Output, Subject
from posenc_cli.inspection.style import distance_axis, new_figure
from posenc_cli.inspection.theory import rope_relative_bound, sinusoidal_frequencies


class RopeBoundFigure(InspectFigure):
    order = 3
    name = "rope"
    derivation = "3. RoPE's relative upper bound (RoFormer §3.4.3)"

    def skip_reason(self, subject: Subject) -> str | None:
        if isinstance(subject.encoding, RotaryEncoding):
            return None
        return "the encoding does not rotate queries and keys"

    def draw(self, subject: Subject) -> list[Output]:
        out = [self._bound(subject)]
        if subject.trained:
            out.append(self._scores(subject))
        return out

    def _bound(self, subject: Subject) -> Output:
        enc = subject.encoding
        distances = torch.arange(0, subject.longest)
        fig, axes = new_figure(
            title="RoPE's relative upper bound (1/F) Σ_j |S_j| against "
            f"distance (head dim {enc.head_dim})"
        )
        ax = axes[0, 0]
        ax.plot(
            distances,
            rope_relative_bound(distances, enc.trained_inv_freq),
            linewidth=1.8,
            label=f"configured: θ = {enc.theta:g}"
            + ("" if enc.rotary_fraction == 1 else f", rotary_fraction {enc.rotary_fraction}")
            + ("" if enc.p == 1 else f", p = {enc.p}"),
        )
        if enc.theta != 10000 or enc.rotary_fraction != 1 or enc.p != 1:
            plain = sinusoidal_frequencies(enc.head_dim, 10000.0)
            ax.plot(
                distances,
                rope_relative_bound(distances, plain),
                linewidth=1.0,
                color="0.5",
                label="θ = 10000, every pair rotated",
            )
        distance_axis(ax, subject.train_length, subject.longest, "relative distance m − n")
        ax.set_ylabel("(1/F) Σ_j |S_j|  (F = head dim / 2; unrotated pairs: θ = 0)")
        ax.legend(fontsize=8)
        return Output(
            "rope_bound",
            fig,
            "The bound on |q·k| that RoPE's rotations allow falls "
            "with distance: the long-range decay RoFormer derives.",
        )

    def _scores(self, subject: Subject) -> Output:
        stats = subject.stats("model", subject.longest)
        fig, axes = new_figure(
            title=f"Trained run: mean scaled q·k by distance on held-out "
            f"text at {subject.longest} tokens (step {subject.step})"
        )
        ax = axes[0, 0]
        for layer, curve in enumerate(stats.qk_by_distance):
            ax.plot(range(stats.length), curve, linewidth=1.0, label=f"layer {layer + 1}")
        distance_axis(ax, subject.train_length, stats.length)
        ax.set_ylabel("mean scaled q·k (logit before bias and softmax)")
        ax.legend(fontsize=8)
        return Output(
            "qk_by_distance",
            fig,
            "The mean attention logit by distance, per layer: "
            "how the trained heads use RoPE's rotations within and past L.",
        )

    def scalars(self, subject: Subject) -> dict[str, float]:
        if not subject.trained:
            return {}
        stats = subject.stats("model", subject.longest)
        L = subject.train_length
        if stats.length <= L:
            return {}
        gap = stats.qk_by_distance[:, L:].mean() - stats.qk_by_distance[:, :L].mean()
        return {"qk/mean_past_L_minus_within_L": float(gap)}
