"""data.documents: WikiText's rows (lines) joined into articles, so that whole articles are
held out and evaluation windows read coherent text."""

from __future__ import annotations

import pytest

from posenc_cli.common.errors import PosencError
from posenc_cli.data.hf_corpus import HfCorpus, is_validation
from posenc_cli.data.row_documents import documents

#: Two articles as WikiText-103-raw stores them: one line per row, blank rows between, section
#: headings "= = … = =" inside an article.
ROWS = [
    " = Valkyria Chronicles III = \n",
    " \n",
    " Senjō no Valkyria 3 is a tactical role @-@ playing video game .\n",
    " = = Gameplay = = \n",
    " The game 's battle system is unchanged .\n",
    " = = = Plot = = = \n",
    " The Nameless fight the Imperial army .\n",
    " = Tower Building of the Little Rock Arsenal = \n",
    " The building is a brick structure .\n",
]


def test_an_article_runs_from_its_title_to_the_next_title_with_its_sections() -> None:
    rows = [r for r in ROWS if r.strip()]  # the source yields non-empty rows only
    got = list(documents(iter(rows), "wikitext_articles", 10_000))
    assert got == ["".join(rows[:6]), "".join(rows[6:])]
    assert got[0].startswith(" = Valkyria") and " = = Gameplay = = " in got[0]
    assert list(documents(iter(rows), "rows", 10_000)) == rows


def test_rows_that_are_not_wikitext_are_one_line_not_one_huge_article() -> None:
    rows = iter(["no title here\n"] * 50)
    with pytest.raises(PosencError, match="data.documents=rows"):
        list(documents(rows, "wikitext_articles", 200))


def test_whole_articles_are_held_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The held-out rule applies to articles: every validation document is an article whose
    own hash chose it, never a paragraph torn out of one."""
    articles = [
        [f" = Article {i} = \n", f" Its first paragraph , number {i} .\n", " = = Notes = = \n"]
        for i in range(60)
    ]
    rows = [row for article in articles for row in article]
    monkeypatch.setattr("posenc_cli.data.hf_corpus.texts", lambda cfg: iter(rows))
    cfg = {"dataset": "x", "val_every_nth": 4, "train_tokens": None}
    corpus = HfCorpus(_Section({**cfg, "documents": "wikitext_articles"}))
    val = list(corpus.val_segments())
    whole = ["".join(a) for a in articles]
    assert val == [a for a in whole if is_validation(a, 4)] and 0 < len(val) < len(whole)
    assert list(corpus.train_segments()) == [a for a in whole if not is_validation(a, 4)]


class _Section(dict):
    """The two ways HfCorpus reads its config section: attributes and .get()."""

    def __getattr__(self, name: str) -> object:
        return self[name]
