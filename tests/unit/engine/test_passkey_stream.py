"""The corpus stream with extend.passkey_share: round(share x batch) passkey windows a step after
the ordinary ones, from the step's generator; share 0 is the stream it always was; several
ranks see the windows one process of their whole batch sees; the share is recorded."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import load
from posenc_cli.config.run_config import RunConfig
from posenc_cli.data.batches import get_batch
from posenc_cli.data.cache import TokenData
from posenc_cli.data.passkey_text import KEY_DIGITS
from posenc_cli.data.passkey_windows import IGNORE
from posenc_cli.data.tokenizer import train_tokenizer
from posenc_cli.engine.streams import CorpusStream, make_stream

TEXT = "the cat sat on the mat and the dog ran to the park. " * 40 + "0123456789 " * 20
VOCAB = 300
L = 64
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> TokenData:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_tokenizer(iter([TEXT]), VOCAB).save(str(path))
    ids = np.random.default_rng(0).integers(0, VOCAB, 4000).astype(np.uint16)
    return TokenData(ids, ids, path, {"vocab_size": VOCAB})


@functools.cache
def config(share: float, batch: int = 4, *more: str) -> RunConfig:
    return load(
        [
            "model=tiny",
            f"train.context_length={L}",
            f"train.batch_size={batch}",
            f"extend.passkey_share={share}",
            *more,
        ]
    )


def batch(stream: CorpusStream, seed: int, rank: int = 0, world: int = 1) -> torch.Tensor:
    x, y = stream.batch(0, torch.Generator().manual_seed(seed), CPU, rank, world)
    assert x.shape == y.shape and x.shape[1] == L
    seen = y[:, :-1] != IGNORE  # a passkey window's targets are its key's digits only
    torch.testing.assert_close(y[:, :-1][seen], x[:, 1:][seen])
    return torch.cat([x, y[:, -1:]], dim=1)  # the windows of L + 1 tokens


def ends_with_a_key(stream: CorpusStream, row: list[int]) -> bool:
    text = stream.passkey_text
    assert text is not None
    question = text.parts("0" * KEY_DIGITS)[1]
    tail = row[-len(question) - KEY_DIGITS :]
    return tail[: len(question)] == question and all(t in text.digits for t in tail[-KEY_DIGITS:])


@pytest.mark.parametrize(("share", "count"), [(0.5, 2), (0.25, 1), (1.0, 4), (0.75, 3)])
def test_a_share_gives_round_share_x_batch_passkey_windows_after_the_ordinary_ones(
    data: TokenData, share: float, count: int
) -> None:
    stream = CorpusStream(data, config(share))
    rows = batch(stream, 5)
    assert rows.shape == (4, L + 1)
    keyed = [ends_with_a_key(stream, r) for r in rows.tolist()]
    assert keyed == [False] * (4 - count) + [True] * count
    if count < 4:  # the ordinary windows are get_batch's, drawn first from the generator
        x, y = get_batch(data.train, 4 - count, L, torch.Generator().manual_seed(5))
        torch.testing.assert_close(rows[: 4 - count, :-1], x)
    assert stream.describe()["passkey_share"] == share
    assert stream.describe()["passkey_windows"] == count
    assert torch.equal(rows, batch(stream, 5)) and not torch.equal(rows, batch(stream, 6))


def test_share_0_is_the_stream_without_passkeys(data: TokenData) -> None:
    stream = CorpusStream(data, config(0.0))
    x, y = stream.batch(3, torch.Generator().manual_seed(1), CPU)
    want = get_batch(data.train, 4, L, torch.Generator().manual_seed(1))
    torch.testing.assert_close((x, y), want)
    assert stream.passkey_text is None and "passkey_share" not in stream.describe()


def test_ranks_see_the_windows_one_process_of_their_whole_batch_sees(data: TokenData) -> None:
    """share x batch a whole number: 2 ranks of 4 (2 passkeys each) = 1 process of 8 (4)."""
    ranks = torch.cat([batch(CorpusStream(data, config(0.5)), 9, r, 2) for r in range(2)])
    whole = batch(CorpusStream(data, config(0.5, 8)), 9)
    assert sorted(map(tuple, ranks.tolist())) == sorted(map(tuple, whole.tolist()))
    assert not torch.equal(ranks[:4], ranks[4:])


def test_no_passkey_window_a_step_is_refused_when_the_stream_is_made(data: TokenData) -> None:
    with pytest.raises(PosencError, match="is no passkey window per step"):
        CorpusStream(data, config(0.1))


def test_a_too_short_training_length_is_refused_when_the_stream_is_made(data: TokenData) -> None:
    with pytest.raises(PosencError, match="leaves no room for text in a passkey window"):
        CorpusStream(data, config(0.5, 4, "train.context_length=16"))


def test_a_synthetic_task_has_no_text_for_passkeys() -> None:
    cfg = load(["task=copy", "extend.passkey_share=0.5"])
    with pytest.raises(PosencError, match="passkey windows are drawn from a corpus"):
        make_stream(cfg, None)
