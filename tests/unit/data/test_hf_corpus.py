"""`data=hf`: corpora read through `datasets` from local parquet, jsonl and save_to_disk files."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

from posenc_cli.common.errors import PosencError
from posenc_cli.config.compose import compose
from posenc_cli.data import hf_dataset
from posenc_cli.data.corpus import EOT
from posenc_cli.data.prepare import prepare
from posenc_cli.data.progress import PrepProgress

datasets = pytest.importorskip("datasets")
huggingface_hub = pytest.importorskip("huggingface_hub")
WORDS = ["the cat sat", "on a mat", "dogs bark", "at night", "and sleep"]
DOCS = [
    f"Document {i}: " + " ".join(WORDS[(i * j) % 5] for j in range(i % 13 + 4)) + "."
    for i in range(240)
]


@pytest.fixture(autouse=True)
def offline(hf_offline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # The libraries read the variables when imported, which was before this fixture ran.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def held_out(doc: str) -> bool:
    """The validation rule written out: BLAKE2b-64 of the text, little-endian, mod 20 is 0."""
    digest = hashlib.blake2b(doc.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 20 == 0


def source(tmp_path: Path, form: str, docs: list[str] = DOCS) -> list[str]:
    """The data.* overrides of DOCS written as ``form``."""
    ds = datasets.Dataset.from_dict({"text": docs, "n": list(range(len(docs)))})
    if form == "disk":
        ds.save_to_disk(str(tmp_path / "disk"))
        return [f"data.dataset={tmp_path / 'disk'}"]
    path = tmp_path / f"docs.{form}"
    (ds.to_parquet if form == "parquet" else ds.to_json)(str(path))
    builder = "parquet" if form == "parquet" else "json"
    return [f"data.dataset={builder}", f"data.data_files={path}"]


def prepared(overrides: list[str]):
    return prepare(compose(["data=hf", "data.vocab_size=300", *overrides]).data)


def text_of(data, part: str) -> str:
    return data.tokenizer.decode(getattr(data, part).tolist(), skip_special_tokens=False)


@pytest.mark.parametrize("form", ["parquet", "jsonl", "disk"])
def test_documents_split_by_their_hash_into_exact_token_files(form: str, tmp_path: Path) -> None:
    data = prepared(source(tmp_path, form))
    val = [d for d in DOCS if held_out(d)]
    assert 0 < len(val) < len(DOCS) // 5
    assert text_of(data, "val") == "".join(d + EOT for d in val)
    assert text_of(data, "train") == "".join(d + EOT for d in DOCS if not held_out(d))


def test_train_tokens_bounds_the_training_ids_and_leaves_validation_alone(
    tmp_path: Path,
) -> None:
    whole = prepared(source(tmp_path, "parquet"))
    bounded = prepared([*source(tmp_path, "parquet"), "data.train_tokens=500"])
    assert len(bounded.train) == 500 < len(whole.train)
    assert bounded.tokenizer_path != whole.tokenizer_path  # another cache entry
    first = prepare(compose(["data=hf", "data.vocab_size=300", *source(tmp_path, "parquet")]).data)
    assert first.tokenizer_path == whole.tokenizer_path  # the same settings: the same entry
    assert text_of(bounded, "val") == text_of(whole, "val")


def test_validation_does_not_depend_on_the_order_of_the_source(tmp_path: Path) -> None:
    forward = prepared(source(tmp_path / "a", "parquet"))
    backward = prepared(source(tmp_path / "b", "parquet", DOCS[::-1]))
    decoded = text_of(backward, "val").split(EOT)[:-1]
    assert sorted(decoded) == sorted(text_of(forward, "val").split(EOT)[:-1])
    assert not np.array_equal(forward.val, backward.val)  # the same documents, reversed


@pytest.mark.parametrize(
    "extra, docs, says",
    [
        (["data.text_field=body"], DOCS, "has no field 'body' — set data.text_field to one of"),
        (["data.split=test"], DOCS, "Bad split: test"),
        ([], ["", "   ", None], "has no text"),
    ],
)
def test_a_bad_source_is_one_line(extra: list[str], docs: list, says: str, tmp_path: Path) -> None:
    with pytest.raises(PosencError) as err:
        prepared([*source(tmp_path, "parquet", docs), *extra])
    assert says in str(err.value) and "\n" not in str(err.value)
    assert not any((tmp_path / "cache").glob("hf-*"))


def test_an_unreachable_hub_with_nothing_cached_is_one_line() -> None:
    with pytest.raises(PosencError, match="is not cached and the hub cannot be reached"):
        prepared(["data.dataset=nobody-here/no-such-corpus"])


def test_without_datasets_installed_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(PosencError, match=r"needs the datasets package .*\[hf\]"):
        prepared(["data.dataset=parquet", f"data.data_files={tmp_path}/x.parquet"])


@pytest.mark.parametrize(
    "overrides, says",
    [
        (
            ["data.dataset=parquet"],
            "data.dataset is set but data=sotu reads its built-in corpus, not a `datasets`",
        ),
        (["data=text", "data.path=a.txt", "data.train_tokens=9"], "data.train_tokens is set but"),
        (["data=hf", "data.dataset=parquet", "data.path=a.txt"], "reads a `datasets` source"),
        (["data=hf", "data.dataset=parquet"], "data.dataset=parquet reads the files data.data_"),
        (
            ["data=hf", "data.dataset=json", "data.data_files=a.json", "data.subset=en"],
            "data.subset=en is set but data.dataset=json reads local files",
        ),
        (["data=hf", "data.dataset=.", "data.revision=main"], "data.revision=main is set but"),
    ],
)
def test_a_source_key_of_another_data_kind_is_refused(
    overrides: list[str], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("some text")
    with pytest.raises(PosencError, match=says):
        compose(overrides)


def test_preparation_progress_counts_documents_ids_and_bytes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    with PrepProgress("train") as shown:
        assert list(shown.counted(iter(["ab", "é"]))) == ["ab", "é"]
        shown.add(3, 40, 7)
    assert (shown.docs, shown.ids, shown.bytes) == (5, 40, 11)  # "é" is 2 bytes
    assert "prepared data: train: 5 documents, 40 ids" in capsys.readouterr().out


def test_a_document_too_long_to_read_is_one_line_naming_its_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound holds whatever the source: a row longer than MAX_DOCUMENT_CHARS (made small
    here) is refused before the tokenizer sees it, naming the row."""
    monkeypatch.setattr(hf_dataset, "MAX_DOCUMENT_CHARS", 1000)
    docs = [*DOCS[:3], "long " * 300, *DOCS[3:]]
    with pytest.raises(PosencError, match=r"row 4 holds 1,500 characters in 'text', more than"):
        prepared(source(tmp_path, "parquet", docs))


@pytest.mark.parametrize("value", ["abc", "0", "-5", "inf", "nan"])
def test_a_bad_hub_timeout_is_one_line(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSENC_HUB_TIMEOUT", value)
    with pytest.raises(PosencError, match=r"POSENC_HUB_TIMEOUT=.* is not a number of seconds"):
        prepared(source(tmp_path, "parquet"))
