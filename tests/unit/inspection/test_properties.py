"""The property table: float-precision errors where the property holds, large where not."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from posenc_cli.encodings.absolute import (
    LearnedAbsoluteEncoding,
    LearnedSinusoidalEncoding,
    SinusoidalEncoding,
)
from posenc_cli.encodings.base import PositionalEncoding
from posenc_cli.inspection.properties import HOLDS, property_table
from posenc_cli.model.transformer import TransformerLM


@pytest.fixture
def errors(
    name: str,
    make_model: Callable[..., TransformerLM],
    tokens: Callable[..., torch.Tensor],
    randomise_zero_params: Callable[[TransformerLM], None],
) -> dict[str, float | None]:
    """The property table of the encoding ``name`` (its tiny model, zero parameters
    randomised): each property's error, by the property's short name."""
    model = make_model(name).eval()
    randomise_zero_params(model)
    rows = property_table(model, tokens(16), train_length=16, longest=64)
    return {r.name.split(" (")[0]: r.error for r in rows}


@pytest.mark.encodings
def test_attention_is_equivariant_and_every_model_causal(errors: dict[str, float]) -> None:
    assert errors["permutation equivariance"] < HOLDS
    assert errors["causality"] < HOLDS


@pytest.mark.encodings(lambda e: e.relative)
def test_relative_encodings_are_shift_invariant(errors: dict[str, float]) -> None:
    assert errors["shift invariance"] < HOLDS


ABSOLUTE = (LearnedAbsoluteEncoding, SinusoidalEncoding, LearnedSinusoidalEncoding)


@pytest.mark.encodings(lambda e: isinstance(e, ABSOLUTE))
def test_absolute_encodings_are_not(errors: dict[str, float]) -> None:
    assert errors["shift invariance"] > 1e-2


@pytest.mark.encodings(lambda e: hasattr(e, "rotate"))
def test_rotations_preserve_norms_and_depend_on_the_difference(errors: dict[str, float]) -> None:
    assert errors["RoPE: ‖R_m x‖ = ‖x‖"] < HOLDS
    assert errors["RoPE: ⟨R_m q, R_n k⟩ = ⟨q, R_{n-m} k⟩"] < HOLDS


def test_shift_is_not_applicable_past_a_learned_table(make_model, tokens) -> None:
    model = make_model("learned").eval()  # 32 rows: 16 tokens shifted by 32 do not fit
    rows = property_table(model, tokens(16), train_length=32, longest=32)
    shift = next(r for r in rows if r.name.startswith("shift"))
    assert shift.error is None and shift.holds is None and "max_len" in shift.note


class PeekingEncoding(PositionalEncoding):
    """A deliberately broken encoding: every position sees the mean of the whole sequence."""

    def embed(self, x_BTD: torch.Tensor, pos_T: torch.Tensor) -> torch.Tensor:
        return x_BTD + x_BTD.mean(1, keepdim=True)


def test_a_model_that_peeks_ahead_fails_the_causality_row(tokens) -> None:
    torch.manual_seed(0)
    model = TransformerLM(64, 32, 2, 4, None, PeekingEncoding(32, 4, 8, 2)).eval()
    rows = property_table(model, tokens(16), train_length=16, longest=32)
    causal = next(r for r in rows if r.name.startswith("causality"))
    assert causal.error > 1e-2 and causal.holds is False


def test_the_shift_claim_is_every_layers(encoding_config) -> None:
    """RoPE beside NoPE layers claims it; RoPE beside a FIRE layer (FIRE reads i) does not."""
    from posenc_cli.encodings import build_encoding
    from posenc_cli.inspection.properties import claims_relative

    def mixed(other: str | None) -> TransformerLM:
        rope = build_encoding(encoding_config("rope"), 32, 4, 3)
        named = None if other is None else build_encoding(encoding_config(other), 32, 4, 3)
        return TransformerLM(
            50, 32, 3, 4, None, rope, None, encoded=[True, False, False], others=[None, named, None]
        )

    assert claims_relative(mixed(None)) and claims_relative(mixed("alibi"))
    assert not claims_relative(mixed("fire"))
