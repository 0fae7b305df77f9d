"""eval.rope_scaling: evaluate a RoPE-family model with stretched frequencies at each length.

The static methods (pi, ntk, yarn, llama3) use one factor S for every length, as a model
configured for its longest context would: eval.rope_factor, by default the longest evaluated
length / the training length — so they also show what stretching costs at 1x. dynamic_ntk
recomputes its NTK factor for each evaluated length L' as transformers does, from
eval.rope_factor (default 1: S = max(1, L'/L), the "dynamic" of the method). longrope
divides each pair's frequency by its rescale factor, the long set (eval.rope_long_factor) at
lengths above the training length and the short set up to it, as transformers switches them
for each forward; its S sets only the attention factor. The formulas are in
encodings/rope_scaling.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

from posenc_cli.config.schema import ExtrapolationConfig


def dynamic_ntk_factor(factor: float | None, length_ratio: float) -> float:
    """The NTK-aware factor of transformers' dynamic NTK at L' = ratio·L: its base is
    b·((S·L'/L) - (S - 1))^(E/(E-2)) past L and b up to L (``_compute_dynamic_ntk_parameters``),
    i.e. NTK-aware scaling by S·ratio - (S - 1); S = 1 (the default) stretches by L'/L."""
    S = 1.0 if factor is None else float(factor)
    return S * max(1.0, length_ratio) - (S - 1.0)


def longrope_set(length: int, original_length: int) -> str:
    """Which rescale factors transformers' LongRoPE uses for a sequence of ``length`` tokens:
    "long" once it is longer than the original length, "short" up to it
    (``longrope_frequency_update`` in modeling_rope_utils: max(position_ids) + 1 > L)."""
    return "long" if length > original_length else "short"


def longrope_factors(
    long: list[float], short: list[float], length: int, original_length: int
) -> list[float]:
    """The set ``longrope_set`` names."""
    return long if longrope_set(length, original_length) == "long" else short


def rescale_for(ev: ExtrapolationConfig, length: int, train_length: int) -> list[float] | None:
    """eval.rope_scaling=longrope's factors at ``length`` (None for the other methods)."""
    if ev.rope_scaling != "longrope":
        return None
    # the extrapolation task searches a missing set first (evals/longrope_search.py)
    assert ev.rope_long_factor is not None and ev.rope_short_factor is not None
    return longrope_factors(ev.rope_long_factor, ev.rope_short_factor, length, train_length)


def factor_for(ev: ExtrapolationConfig, train_length: int, length: int, longest: int) -> float:
    """The extension factor S used at evaluation length ``length``."""
    if ev.rope_scaling == "dynamic_ntk":
        return dynamic_ntk_factor(ev.rope_factor, length / train_length)
    if ev.rope_factor is not None:
        return ev.rope_factor
    return max(1.0, longest / train_length)


@contextmanager
def context_extension(
    model: nn.Module, ev: ExtrapolationConfig, train_length: int, longest: int
) -> Iterator[Callable[[int], None]]:
    """A function that prepares ``model`` for one evaluation length; the trained frequencies
    are restored on exit. Without eval.rope_scaling it does nothing."""
    encoding = getattr(model, "encoding", None)
    method = ev.rope_scaling
    if method == "none" or encoding is None or not encoding.rotary:
        yield lambda length: None
        return

    def prepare(length: int) -> None:
        factor = factor_for(ev, train_length, length, longest)
        encoding.extend_context(method, factor, train_length, rescale_for(ev, length, train_length))

    try:
        yield prepare
    finally:
        encoding.extend_context("none", 1.0, train_length)


def rope_scaling_record(
    ev: ExtrapolationConfig, train_length: int, lengths: list[int]
) -> dict[str, Any]:
    """What the result records of the extension: the method and the factor at each length
    (nothing without eval.rope_scaling, so plain results keep their old shape); for longrope
    also both sets of rescale factors and which one each length used."""
    method = ev.rope_scaling
    if method == "none":
        return {}
    factors = {str(L): factor_for(ev, train_length, L, max(lengths)) for L in lengths}
    out: dict[str, Any] = {"rope_scaling": method, "rope_factors": factors}
    if method == "longrope":
        out["rope_long_factor"] = ev.rope_long_factor
        out["rope_short_factor"] = ev.rope_short_factor
        out["rope_rescale"] = {str(L): longrope_set(L, train_length) for L in lengths}
    return out
