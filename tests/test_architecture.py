"""The package's shape (docs/architecture.md, issue 40): no import circles between the modules of
ftui, a top level that holds packages only, and modules short enough to have one job each.

The import graph is grimp's (what import-linter reads, pyproject.toml's contracts): every import
statement of every module, those inside functions and under TYPE_CHECKING included, so a circle
that Python only meets at run time (a function's late import) is one here too.
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ftui"
TOP_LEVEL_FILES = {"__init__.py", "i18n.py"}
TOP_LEVEL_DATA = {"locale", "__pycache__"}  # the interface's catalogs (not code), Python's bytecode
MAX_LINES = 500


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("ftui", cache_dir=None)


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Each group of modules that import one another (strongly connected, Tarjan's algorithm),
    as one circle through it: ``[a, b, ..., a]``, shortest from the group's first module."""
    modules = sorted(graph.modules)
    imports = {m: sorted(graph.find_modules_directly_imported_by(m) - {m}) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(root: str) -> None:  # iterative: a deep chain must not hit the recursion limit
        work = [(root, iter(imports[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(imports[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))

    for module in modules:
        if module not in index:
            visit(module)
    named = []
    for group in sorted(groups):
        start = group[0]
        chains = [graph.find_shortest_chain(importer=nxt, imported=start) for nxt in imports[start] if nxt in group]
        chain = min((c for c in chains if c), key=len)
        named.append([start, *chain])
    return named


def test_no_module_of_ftui_imports_itself_in_a_circle(graph):
    found = circles(graph)
    assert not found, "import circles (each module imports the next, the last the first):\n" + "\n".join(
        " -> ".join(circle) for circle in found)


def test_the_circle_finder_names_a_circle():
    """The check above would pass on a finder that never finds one."""
    graph = grimp.ImportGraph()
    for module in ("p", "p.a", "p.b", "p.c", "p.d"):
        graph.add_module(module)
    for importer, imported in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.d", "p.a")):
        graph.add_import(importer=importer, imported=imported)
    assert circles(graph) == [["p.a", "p.b", "p.c", "p.a"]]
    graph.remove_import(importer="p.c", imported="p.a")
    assert circles(graph) == []


def test_the_top_level_holds_packages_only():
    """``ls ftui/`` reads as the architecture: packages, plus the package's own __init__.py and
    i18n.py (which every layer imports)."""
    loose = sorted(p.name for p in PACKAGE.iterdir() if p.is_file() and p.name not in TOP_LEVEL_FILES)
    assert not loose, f"files at ftui/'s top level: {loose}; put each in the package of its job"
    not_packages = sorted(p.name for p in PACKAGE.iterdir()
                          if p.is_dir() and p.name not in TOP_LEVEL_DATA and not (p / "__init__.py").is_file())
    assert not not_packages, f"folders at ftui/'s top level that are not packages: {not_packages}"


def test_modules_stay_short():
    lengths = {p.relative_to(PACKAGE.parent).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
               for p in PACKAGE.rglob("*.py")}
    long = {name: n for name, n in sorted(lengths.items()) if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split each along the jobs it mixes): {long}"
