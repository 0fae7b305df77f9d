"""The house rules of docs/design.md, checked on the source: imports point one way, no cycles,
no private names across packages, small files and functions, nothing loose at the top level."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "posenc_cli"
#: Which packages each package may import (besides itself and common), from docs/design.md.
ALLOWED = {
    "cli": {
        "workflows",
        "bench",
        "report",
        "evals",
        "engine",
        "config",
        "data",
        "cs336",
        "encodings",
        "inspection",
        "hf",
    },
    "workflows": {"evals", "engine", "config", "data"},
    "hf": {"interchange", "engine", "config", "data", "model", "encodings"},
    "inspection": {"evals", "engine", "config", "model", "encodings"},
    "bench": {"engine", "config", "model", "nn"},
    "cs336": {"interchange", "engine", "config", "model", "nn"},
    "interchange": {"engine", "config", "model"},
    "evals": {"engine", "config", "data", "model", "synthetic"},
    "engine": {"config", "data", "model", "encodings", "synthetic"},
    "report": {"config", "encodings", "evals"},
    "config": {"encodings", "synthetic", "data"},
    "model": {"encodings", "nn"},
    "encodings": {"nn"},
    "data": set(),
    "nn": set(),
    "common": set(),
    "synthetic": set(),
}


def modules() -> dict[str, ast.Module]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = ast.parse(path.read_text(encoding="utf-8"))
    return out


def imports(tree: ast.Module) -> list[ast.ImportFrom]:
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("posenc_cli")
    ]


def package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else ""


def test_the_top_level_holds_only_the_entry_points() -> None:
    loose = {p.name for p in PACKAGE.glob("*.py")}
    assert loose == {"__init__.py", "__main__.py"}
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(
        ALLOWED
    )


def test_imports_point_one_way_and_name_nothing_private() -> None:
    for name, tree in modules().items():
        src = package(name)
        for node in imports(tree):
            dst = package(node.module + ".x")
            if src and dst and dst != src and dst != "common":
                assert dst in ALLOWED[src], f"{name} imports {node.module}"
            if dst != src:
                assert not any(a.name.startswith("_") for a in node.names), (
                    f"{name} imports a private name of {node.module}"
                )


def test_no_import_cycles_between_modules() -> None:
    graph = {name: {n.module for n in imports(tree)} for name, tree in modules().items()}
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        assert node not in path, " -> ".join([*path, node])
        if node in done:
            return
        for nxt in graph.get(node, ()):
            visit(nxt, [*path, node])
        done.add(node)

    for name in graph:
        visit(name, [])


def test_files_and_functions_stay_small() -> None:
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert text.count("\n") <= 300, f"{path} has {text.count(chr(10))} lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                assert length <= 40, f"{path}:{node.lineno} {node.name} has {length} lines"


def test_no_type_ignore_comments() -> None:
    """mypy checks posenc_cli in CI (pyproject.toml's [tool.mypy]); the code passes it
    without being told to look away from any line: a real type, a narrowing assert or a
    ``cast`` with its reason says what is known, where an ignore would hide it."""
    marker = "type: " + "ignore"
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{n}"
        for root in (PACKAGE, PACKAGE.parent / "tests")
        for path in sorted(root.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if marker in line
    ]
    assert not found, found


def test_report_and_cli_name_no_evaluation_task() -> None:
    """Adding a task touches neither: they ask the tasks (evals/base.py), so no string in them
    is a task's name or one of its result keys (``<task>_<suffix>``)."""
    from posenc_cli.evals.base import registry

    names = set(registry())
    found = [
        (module, node.value)
        for module, tree in modules().items()
        if package(module) in ("report", "cli")
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and any(node.value == n or node.value.startswith(f"{n}_") for n in names)
    ]
    assert not found, found


def test_no_module_assigns_sys_argv() -> None:
    """Commands call what they run with the config they composed; none re-enters a program
    through its argument list (what `posenc train` once did to reach Hydra's runner)."""
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    text = ast.unparse(target)
                    assert text != "sys.argv", f"{name} assigns sys.argv"


#: Names of a run directory's files that only common/run_layout.py spells (``checkpoints`` is
#: also the clock's phase name, ``config.yaml`` a bench folder's, so they are left out here).
RUN_FILE_NAMES = {".hydra", "last.pt", "best.pt", "metrics.json", "overrides.yaml", ".posenc.lock"}


def test_only_the_run_layout_spells_the_run_directorys_file_names() -> None:
    """hf/ and data/ name a tokenizer.json of their own formats (a Hugging Face folder, the data
    cache); everywhere else it is the run's and comes from the layout too."""
    for name, tree in modules().items():
        if name == "posenc_cli.common.run_layout":
            continue
        names = set(RUN_FILE_NAMES)
        if package(name) not in ("hf", "data"):
            names.add("tokenizer.json")
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert node.value not in names, f"{name} spells {node.value!r}"
