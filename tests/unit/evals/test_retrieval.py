"""Passkey retrieval: a model that copies the key scores 1.0, one that cannot see the sentence
scores what it scores without it (lift 0), the chance levels are exact because every digit is
one token, and the instances are a function of the seed alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from posenc_cli.config.run_config import typed
from posenc_cli.data.cache import TokenData
from posenc_cli.data.passkey_text import digit_ids, key_tokens
from posenc_cli.data.tokenizer import train_tokenizer
from posenc_cli.evals.retrieval_figure import heatmap
from posenc_cli.evals.tasks.retrieval import Retrieval, instances

TEXT = "the cat sat on the mat and the dog ran to the park. " * 40 + "0123456789 " * 20
VOCAB = 300


@pytest.fixture(scope="module")
def text_data(tmp_path_factory: pytest.TempPathFactory) -> TokenData:
    tok = train_tokenizer(iter([TEXT]), VOCAB)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    ids = np.random.default_rng(0).integers(0, VOCAB, 4000).astype(np.uint16)
    return TokenData(ids, ids, path, {"vocab_size": VOCAB})


class Induction(nn.Module):
    """Predicts the token that followed the last earlier occurrence of the current 4 tokens:
    after the question it writes the key it saw after the same words."""

    def forward(self, x: Tensor) -> Tensor:
        out = torch.zeros(*x.shape, VOCAB)
        for b, row in enumerate(x.tolist()):
            seen: dict[tuple[int, ...], int] = {}
            for t in range(len(row)):
                gram = tuple(row[max(0, t - 3) : t + 1])
                if gram in seen:
                    out[b, t, row[seen[gram] + 1]] = 50.0
                if t + 1 < len(row):
                    seen[gram] = t
        return out


class Bigram(nn.Module):
    """Logits of the current token alone: it never sees the sentence."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.table = nn.Embedding(VOCAB, VOCAB)

    def forward(self, x: Tensor) -> Tensor:
        return self.table(x)


def _cfg(composed):
    from posenc_cli.evals.run import apply_overrides

    return typed(
        apply_overrides(composed(), ["eval.tasks=[retrieval]", "eval.retrieval.factors=[8,16]"])
    )


def test_a_model_that_copies_the_key_scores_one(composed, text_data, rt) -> None:
    result = Retrieval().run(Induction(), text_data, _cfg(composed), rt)
    assert result["lengths"] == [128, 256] and not result["skipped"]
    for k in ("128", "256"):
        assert result["exact_match"][k] == 1.0 and result["digit_accuracy"][k] == 1.0
        assert result["p_key"][k] == pytest.approx(1.0) and result["lift"][k] > 10
        assert set(result["by_depth"][k].values()) == {1.0}
        lo, hi = result["lift_interval"][k]
        assert 10 < lo <= result["lift"][k] <= hi


def test_a_model_that_never_sees_the_sentence_scores_at_chance(composed, text_data, rt) -> None:
    """The bigram model's answer logits are the same with and without the sentence: lift 0
    exactly, its interval [0, 0], and accuracy equal to its accuracy without the key."""
    result = Retrieval().run(Bigram(), text_data, _cfg(composed), rt)
    assert result["chance"] == {"digit_accuracy": 0.1, "exact_match": 1e-5, "lift": 0.0}
    for k in ("128", "256"):
        assert result["lift"][k] == pytest.approx(0.0, abs=1e-5)
        assert result["lift_interval"][k] == pytest.approx([0.0, 0.0], abs=1e-5)
        assert result["digit_accuracy"][k] == result["digit_accuracy_without"][k]
        assert result["exact_match"][k] == result["exact_match_without"][k]


def test_instances_depend_on_the_seed_alone_and_hide_the_sentence_once(text_data) -> None:
    tok = text_data.tokenizer

    def encode(text: str) -> list[int]:
        return tok.encode(text).ids

    digits = digit_ids(tok.token_to_id)
    assert digits is not None and len(set(digits)) == 10
    depths = [0.0, 0.5, 1.0]
    first = instances(text_data.val, encode, digits, 128, depths, 7, seed=0)
    assert first == instances(text_data.val, encode, digits, 128, depths, 7, seed=0)
    assert first != instances(text_data.val, encode, digits, 128, depths, 7, seed=1)
    assert [c.depth for c in first] == [0.0, 0.5, 1.0, 0.0, 0.5, 1.0, 0.0]
    assert len({c.key for c in first}) == 7 and len({tuple(c.without) for c in first}) == 7
    for case in first:
        sentence, question, answer = key_tokens(encode, digits, case.key)
        assert case.answer == answer == [digits[int(c)] for c in case.key]
        assert len(case.key) == 5 and tok.decode(answer) == case.key
        room = len(case.without) - len(question) - len(answer)
        at = round(case.depth * room)
        row = case.with_key
        assert len(row) == 128 and row[at : at + len(sentence)] == sentence
        assert row[:at] + row[at + len(sentence) :] == case.without


def test_the_heatmap_is_an_image_of_lengths_by_depths(
    composed, text_data, rt, tmp_path: Path
) -> None:
    result = Retrieval().run(Bigram(), text_data, _cfg(composed), rt)
    image = heatmap(result, "bigram")
    assert image is not None and image.ndim == 3 and image.shape[2] == 3


def test_a_tokenizer_without_a_token_per_digit_is_skipped_with_its_reason() -> None:
    assert digit_ids(lambda token: None if token == "7" else ord(token)) is None


@pytest.mark.parametrize(
    "bad",
    [
        "eval.retrieval.depths=[1.5]",
        "eval.retrieval.passkeys=0",
        "eval.retrieval.factors=[]",
        "eval.retrieval.seed=-1",
        "eval.retrieval.passkeys=many",
        "eval.retrieval.depths=[x]",
    ],
)
def test_bad_settings_are_one_line_before_anything_runs(composed, bad: str) -> None:
    from posenc_cli.common.errors import PosencError
    from posenc_cli.evals.run import apply_overrides

    cfg = typed(apply_overrides(composed(), ["eval.tasks=[retrieval]", bad]))
    with pytest.raises(PosencError, match=bad.split("=")[0].replace(".", r"\.")):
        Retrieval().check(cfg)


@pytest.mark.encodings
def test_every_encoding_is_scored_or_skipped_with_a_reason(
    name: str, composed, model_for, text_data, rt
) -> None:
    """A random tiny model of each encoding: every length is scored (probabilities, exact
    match and lift in range) or, past a learned table, skipped with the number it needs."""
    from posenc_cli.evals.run import apply_overrides

    cfg = typed(
        apply_overrides(
            composed(f"encoding={name}"),
            # 20 instances per length (4 per depth): every property below, a tenth of the work
            [
                "eval.tasks=[retrieval]",
                "eval.retrieval.factors=[4,8]",
                "eval.retrieval.passkeys=20",
            ],
        )
    )
    model = model_for(cfg)
    with torch.no_grad():
        result = Retrieval().run(model, text_data, cfg, rt)
    assert result["lengths"] == [64, 128]
    limit = getattr(model.encoding, "max_len", None)
    for length in result["lengths"]:
        k = str(length)
        if limit is not None and length > limit:
            assert result["skipped"][k] == f"needs {length} positions; the encoding has {limit}"
            continue
        assert 0 <= result["exact_match"][k] <= 1 and 0 <= result["digit_accuracy"][k] <= 1
        assert 0 < result["p_key"][k] <= 1 and 0 < result["p_key_without"][k] <= 1
        lo, hi = result["lift_interval"][k]
        assert np.isfinite(result["lift"][k]) and lo <= result["lift"][k] <= hi
        assert set(result["by_depth"][k]) == {f"{d:g}" for d in result["depths"]}


def test_a_length_beyond_the_held_out_text_is_skipped_with_its_reason(
    composed, text_data, rt
) -> None:
    short = TokenData(text_data.train, text_data.val[:100], text_data.tokenizer_path, {})
    result = Retrieval().run(Induction(), short, _cfg(composed), rt)
    assert result["lengths"] == [128, 256] and not result["digit_accuracy"]
    assert "compare" not in result  # nothing scored: no table in `posenc compare`
    assert all("longer than the held-out text" in why for why in result["skipped"].values())


def test_the_instance_record_gives_the_results_means(composed, text_data, rt, tmp_path) -> None:
    """passkeys.csv holds one line per instance whose means are the result's digit accuracy
    and lift, and the digest names the instances (the same for another model)."""
    from posenc_cli.evals.base import RECORDS
    from posenc_cli.evals.instance_scores import read_scores
    from posenc_cli.evals.tasks.retrieval import PAIRED, PASSKEYS_FILE

    cfg = _cfg(composed)
    result = Retrieval().run(Bigram(), text_data, cfg, rt)
    other = Retrieval().run(Induction(), text_data, cfg, rt)
    assert result["instances_sha256"] == other["instances_sha256"]
    assert len(set(result["instances_sha256"].values())) == 2  # one per length
    file = tmp_path / PASSKEYS_FILE
    file.write_text(result[RECORDS][PASSKEYS_FILE])
    scores = read_scores(file, PAIRED)
    for length in (128, 256):
        acc, lift = scores["digit_accuracy"][length], scores["lift"][length]
        assert acc.loss_sum.size == result["keys"]
        assert acc.loss_sum.mean() == pytest.approx(result["digit_accuracy"][str(length)])
        assert lift.loss_sum.mean() == pytest.approx(result["lift"][str(length)])
