"""Two measures of issue 23 over acp/, bot/ and surfaces/, kept as tests so they stay true: no import
cycle between their modules, and no module over 450 lines. Strict on purpose (no allowlist): a
cycle or a long module is fixed, not excused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("acp", "bot", "surfaces")
MAX_LINES = 450


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iterative: no recursion
    limit however long a chain), each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def imported(module: str) -> Iterator[str]:
        return iter(sorted(graph.find_modules_directly_imported_by(module) & modules))

    for root in sorted(modules):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = []
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work.append((root, imported(root)))
        while work:
            module, successors = work[-1]
            successor = next(successors, None)
            if successor is not None:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, imported(successor)))
                elif successor in on_stack:
                    low[module] = min(low[module], index[successor])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_cycle_finder_reports_each_strongly_connected_component() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [
        ("p.a", "p.b"),
        ("p.b", "p.c"),
        ("p.c", "p.a"),  # a -> b -> c -> a
        ("p.c", "p.d"),
        ("p.d", "p.e"),
        ("p.e", "p.d"),  # d <-> e, reached from the first cycle but not part of it
        ("p.f", "p.a"),  # imports into a cycle without closing one
    ]:
        graph.add_import(importer=importer, imported=imported)
    modules = {f"p.{name}" for name in "abcdef"}
    assert _cycles(graph, modules) == [["p.a", "p.b", "p.c"], ["p.d", "p.e"]]


def test_no_import_cycle_between_modules() -> None:
    # grimp records imports under `if TYPE_CHECKING:` as any other: a type-only import back is
    # still a dependency a reader has to untangle.
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)
    modules = {m for m in graph.modules if m.split(".")[0] in PACKAGES}
    cycles = _cycles(graph, modules)
    assert cycles == [], "import cycles:\n" + "\n".join(
        f"  {len(cycle)} modules: {', '.join(cycle)}" for cycle in cycles
    )


def test_no_module_over_450_lines() -> None:
    long = sorted(
        (count, str(path.relative_to(ROOT)))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    )
    assert long == [], f"modules over {MAX_LINES} lines:\n" + "\n".join(
        f"  {path}: {count}" for count, path in reversed(long)
    )
