"""The published results regenerate: every comparison that docs/results made from the records
committed under docs/results/records/ is rebuilt here by the command its provenance names, and
must equal what is committed (the provenance block aside); every block a page copies from such
a file between `<!-- begin: FILE -->` and `<!-- end: FILE -->` must equal that file. A change
that alters a published number fails here, not in a reader's rerun."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from posenc_cli.report.compare import compare
from posenc_cli.report.provenance import HEADING

REPO = Path(__file__).resolve().parents[3]
RESULTS = REPO / "docs" / "results"
RECORDS = "docs/results/records/"
COMMAND = re.compile(r"^\* command: `(posenc compare [^`]+)`$", re.MULTILINE)
BLOCK = re.compile(r"<!-- begin: (\S+) -->\n(.*?)<!-- end: \1 -->", re.DOTALL)


def body(text: str) -> str:
    """A written Markdown file without its provenance block."""
    return text.split(f"\n{HEADING}\n", 1)[0].rstrip() + "\n"


def regenerable() -> list[Path]:
    """One Markdown file per page folder whose command reads committed records only (every
    file compare wrote there names the same command)."""
    out = {}
    pages = (p for p in sorted(RESULTS.rglob("*.md")) if p.parent != RESULTS)
    for md in (p for p in pages if "records" not in p.relative_to(RESULTS).parts):
        match = COMMAND.search(md.read_text(encoding="utf-8"))
        if match and RECORDS in match.group(1):
            out.setdefault(md.parent, md)
    return list(out.values())


def test_some_published_study_regenerates() -> None:
    assert regenerable(), "no docs/results page is made from committed records"


@pytest.mark.parametrize("page", regenerable(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_the_tables_equal_what_the_committed_records_give(page: Path, tmp_path: Path) -> None:
    args = shlex.split(COMMAND.search(page.read_text(encoding="utf-8")).group(1))[2:]
    dirs = [REPO / a for a in args if not a.startswith("--") and a.startswith(RECORDS)]
    baseline = args[args.index("--baseline") + 1] if "--baseline" in args else None
    assert (REPO / args[args.index("--out") + 1]).resolve() == page.parent.resolve()
    compare(dirs, tmp_path, baseline)
    written = sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".md", ".csv"))
    assert written and page.name in written
    for name in written:
        got, committed = (tmp_path / name).read_text(), (page.parent / name).read_text()
        if name.endswith(".md"):
            assert body(got) == body(committed), name
            assert "local changes" not in committed, name
        else:
            assert got == committed, name


@pytest.mark.parametrize("page", sorted(RESULTS.glob("*.md")), ids=lambda p: p.name)
def test_copied_blocks_equal_their_files(page: Path) -> None:
    for name, block in BLOCK.findall(page.read_text(encoding="utf-8")):
        source = (page.parent / name).read_text(encoding="utf-8")
        assert block.strip() == body(source).strip(), f"{page.name} copies {name}"
