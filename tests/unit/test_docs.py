"""The documentation cannot rot silently: every relative link and image in README.md and docs/
resolves (to a file, and to a heading when it names one), every page of docs/ is reachable from
docs/README.md, and every `posenc …` line in the README's code blocks parses as a command and
composes as a config — so a renamed key or option breaks a test, not a reader."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from posenc_cli.cli.app import app
from posenc_cli.config.compose import compose
from posenc_cli.config.groups import GROUPS
from posenc_cli.config.overrides import expand_sweep

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"!?\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")


def _prose(text: str) -> str:
    """The page without its code blocks and inline code, where brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as '-', repeats -1."""
    seen: dict[str, int] = {}
    for heading in re.findall(
        r"^#{1,6}\s+(.+?)\s*#*$", FENCE.sub("", page.read_text()), re.MULTILINE
    ):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        if n:
            seen[f"{slug}-{n}"] = 1
    return set(seen)


def _links(page: Path) -> list[str]:
    return [t for t in LINK.findall(_prose(page.read_text())) if not re.match(r"\w+:", t)]


def _target(page: Path, link: str) -> tuple[Path, str]:
    path, _, anchor = link.partition("#")
    return ((page.parent / path).resolve() if path else page), anchor


def test_anchor_slugs_follow_github() -> None:
    page = REPO / "docs" / "encodings.md"
    assert "add-an-encoding" in _anchors(page)  # "## Add an encoding"
    assert "what-posenc-inspect-draws" in _anchors(page)  # "## What `posenc inspect` draws"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for link in _links(page):
        target, anchor = _target(page, link)
        if not target.exists():
            broken.append(f"{link} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link} (no such heading)")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_every_docs_page_is_reachable_from_the_index() -> None:
    seen = set()
    todo = [REPO / "docs" / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.exists():
            continue
        seen.add(page)
        todo += [_target(page, link)[0] for link in _links(page)]
    unreachable = [str(p.relative_to(REPO)) for p in PAGES[1:] if p not in seen]
    assert not unreachable


def _readme_commands() -> list[list[str]]:
    blocks = re.findall(
        r"^```bash\n(.*?)^```", (REPO / "README.md").read_text(), re.MULTILINE | re.DOTALL
    )
    lines = [ln for b in blocks for ln in b.splitlines() if ln.startswith("posenc ")]
    return [shlex.split(ln, comments=True)[1:] for ln in lines]


COMMANDS = _readme_commands()
#: Where a command's overrides start: after the run directory for eval and resume.
OVERRIDES_FROM = {"train": 0, "sweep": 0, "bench": 0, "inspect": 0, "eval": 1, "resume": 1}


def _parse(args: list[str]) -> None:
    """Click parses the line as `posenc` would, without running the command."""
    group = typer.main.get_command(app)
    try:
        if args[0].startswith("-"):
            group.make_context("posenc", list(args))
            return
        parent = typer.Context(group, info_name="posenc")
        command = group.get_command(parent, args[0])
        assert command is not None, f"no command `posenc {args[0]}`"
        command.make_context(args[0], list(args[1:]), parent=parent)
    except typer.Exit as exc:  # --help: printed and exited
        assert exc.exit_code == 0


def _overrides(args: list[str]) -> list[str]:
    start = OVERRIDES_FROM.get(args[0]) if args else None
    if start is None:
        return []
    rest = args[1 + start :]
    if args[0] == "inspect" and rest and "=" not in rest[0]:
        rest = rest[1:]  # a run directory, then overrides for it
    return rest


def _covering_jobs(overrides: list[str]) -> list[list[str]]:
    """Sweep jobs in which every swept value appears at least once (not the whole grid)."""
    jobs = []
    covered = set()
    for job in expand_sweep(overrides):
        if not set(job) <= covered:
            jobs.append(job)
            covered |= set(job)
    return jobs


def test_the_readme_shows_commands() -> None:
    assert len(COMMANDS) > 10
    assert {"train", "eval", "sweep", "compare", "inspect", "bench"} <= {c[0] for c in COMMANDS}


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_readme_command_parses_and_composes(args, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _parse(args)
    overrides = _overrides(args)
    for o in overrides:  # the reader's own text files: the command needs them to exist
        if o.startswith(("data.path=", "data.val_path=")):
            Path(o.split("=", 1)[1]).write_text("Some text of the reader's own.\n")
    given = set(tmp_path.iterdir())
    jobs = _covering_jobs(overrides) if args[0] == "sweep" else [overrides]
    for job in jobs:
        compose(job, with_hydra=True)  # a bad key raises the PosencError a reader would see
    assert set(tmp_path.iterdir()) == given  # composing creates nothing


def test_the_readme_lists_every_config_group() -> None:
    """The README's sentence naming the groups, against the folders of configs/ (hydra/ holds
    Hydra's logging setup, not a group a user chooses) and the groups `posenc --help` lists."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    sentence = re.search(r"Config groups live in `configs/`:([^.]*)\.", text)
    assert sentence, "README.md no longer names the config groups"
    named = re.findall(r"`(\w+)`", sentence.group(1))
    folders = {p.name for p in (REPO / "configs").iterdir() if p.is_dir()} - {"hydra"}
    assert sorted(named) == sorted(folders) == sorted(GROUPS)
