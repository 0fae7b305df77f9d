"""Property test: the tokenizer round-trips any text (deterministic unless
HYPOTHESIS_PROFILE=fuzz, see tests/conftest.py)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc_cli.data.tokenizer import decode, encode, train_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory, make_corpus):
    text = make_corpus(tmp_path_factory.mktemp("tok") / "c.txt").read_text()
    return train_tokenizer(iter(text.split("<|endoftext|>")), 300)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(max_size=200))
def test_tokenizer_round_trips_any_unicode(tokenizer, text: str) -> None:
    assert decode(tokenizer, encode(tokenizer, text)) == text
