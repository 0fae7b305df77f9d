"""Which rows of a `datasets` source make one document (data.documents).

Most sources hold one document per row (`rows`). WikiText-103 — the corpus of Press et al.
2022 and of much of the extrapolation literature — holds one *line* per row, so a row-level
document would be a paragraph or a heading: the held-out split would scatter every article
over both sides, and no evaluation window of 8k tokens would see one coherent text.
`wikitext_articles` joins the rows of an article: a new one starts at each top-level heading
`` = Title = `` (a section heading is `` = = Section = = ``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from posenc_cli.common.errors import PosencError

#: data.documents: the choices, with what each means.
GROUPINGS = {"rows": "one document per row", "wikitext_articles": "WikiText articles"}
#: A WikiText article's title line, "= Title =" (stripped), and not a section's "= = … = =".
ARTICLE_TITLE = re.compile(r"= (?!=).*(?<!=) =")


def documents(rows: Iterator[str], grouping: str, limit: int) -> Iterator[str]:
    """The documents of ``rows`` (each non-empty), grouped as ``grouping`` says; a document
    longer than ``limit`` characters is refused, as a row would be."""
    if grouping == "rows":
        yield from rows
        return
    if grouping != "wikitext_articles":
        raise PosencError(
            f"data.documents='{grouping}' is not a way of grouping rows",
            f"choose one of: {', '.join(GROUPINGS)}",
        )
    article: list[str] = []
    size = 0
    for row in rows:
        if ARTICLE_TITLE.fullmatch(row.strip()) and article:
            yield "".join(article)
            article, size = [], 0
        article.append(row)
        size += len(row)
        if size > limit:
            raise PosencError(
                f"a WikiText article grew past {limit:,} characters: the rows do not look "
                "like WikiText's (no ' = Title = ' line starts a new article)",
                "use data.documents=rows for this dataset",
            )
    if article:
        yield "".join(article)
