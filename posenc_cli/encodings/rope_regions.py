"""Which rotary pairs the context-extension methods treat differently, before any is tried.

Why: PI divides every frequency by S; YaRN and Llama 3 divide only the slow pairs and keep the
fast ones; NTK-aware scaling stretches each pair by its own amount. Where a model has few pairs
that turn at least once over its training length L, the methods change the same pairs in the
same way and a study cannot separate them, whatever its seeds. Counting the pairs in each
method's regions says so up front: r_k = L/λ_k is the number of turns pair k makes over L
(λ_k = 2π/θ_k its wavelength), YaRN keeps pairs with r ≥ β = 32 and interpolates those with
r < α = 1 (Peng et al. 2023, §3.2), Llama 3 keeps wavelengths below L/4 and interpolates those
above L (Meta's rope scaling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: YaRN's ramp bounds in rotations per original context (Peng et al. 2023, §3.2: α = 1, β = 32;
#: transformers' beta_slow and beta_fast).
YARN_ALPHA = 1.0
YARN_BETA = 32.0
#: Llama 3.1's low- and high-frequency factors (Meta's reference rope scaling).
LLAMA3_LOW = 1.0
LLAMA3_HIGH = 4.0


@dataclass(frozen=True)
class PairRegions:
    """Counts of the rotating pairs by how each method treats them at training length L."""

    length: int
    turns: tuple[float, ...]  #: r_k of every rotating pair, fastest first

    def count(self, low: float, high: float = math.inf) -> int:
        """Pairs with low <= r < high."""
        return sum(low <= r < high for r in self.turns)

    @property
    def yarn(self) -> tuple[int, int, int]:
        """(kept, on the ramp, interpolated) under YaRN."""
        return (
            self.count(YARN_BETA),
            self.count(YARN_ALPHA, YARN_BETA),
            self.count(0.0, YARN_ALPHA),
        )

    @property
    def llama3(self) -> tuple[int, int, int]:
        """(kept, smoothed, interpolated) under Llama 3: λ < L/4 is r > 4, λ > L is r < 1."""
        kept = sum(r > LLAMA3_HIGH for r in self.turns)
        scaled = self.count(0.0, LLAMA3_LOW)
        return kept, len(self.turns) - kept - scaled, scaled


def pair_regions(inv_freq: list[float], length: int) -> PairRegions:
    """The regions of the rotating pairs (θ_k > 0) of a RoPE model trained at ``length``."""
    turns = tuple(length * f / (2 * math.pi) for f in inv_freq if f > 0)
    return PairRegions(length, turns)


def describe(regions: PairRegions) -> list[str]:
    """What a person planning an extension study should know, in a few lines."""
    n = len(regions.turns)
    fast = n - regions.count(0.0, 1.0)
    y_kept, y_ramp, y_interp = regions.yarn
    l_kept, l_smooth, l_interp = regions.llama3
    lines = [
        f"RoPE pairs at L = {regions.length}: {n} rotating; the fastest turns "
        f"{regions.turns[0]:.1f} times over L, the slowest {regions.turns[-1]:.3g}; "
        f"{fast} of {n} ({100 * fast / n:.0f} %) have a wavelength below L",
        f"YaRN (α = {YARN_ALPHA:g}, β = {YARN_BETA:g}): {y_kept} kept, {y_ramp} on the ramp, "
        f"{y_interp} interpolated; Llama 3: {l_kept} kept, {l_smooth} smoothed, "
        f"{l_interp} interpolated",
        f"PI, YaRN and Llama 3 divide the {n - fast} slow pairs alike and differ only on the "
        f"{fast} others",
    ]
    if y_kept == 0:
        lines.append(
            f"YaRN keeps no pair as trained: β = {YARN_BETA:g} turns is above the fastest pair's "
            f"{regions.turns[0]:.1f}, which is always L/2π: only a longer L moves pairs past it"
        )
    if fast < n / 2:
        lines.append(
            "most pairs turn less than once within L: expect PI, YaRN and Llama 3 to act alike "
            "here; a study that must separate them needs a longer L or a smaller RoPE base"
        )
    return lines
