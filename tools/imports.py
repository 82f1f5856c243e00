"""The import graph of the checkout, read from source: who imports whom, and at what moment.

This module owns reading imports without running them (`ast`), so the layer rules can be
checked by a test and the graph printed for people:

    python -m tools.imports            # the graph between top-level packages
    python -m tools.imports --modules  # between modules, with run-time cycles if any

An import counts whether it sits at module level or inside a function (both run at some point);
imports under `if TYPE_CHECKING:` never run and are left out. `from package import name` counts
as an import of `package.name` when that is a module of the checkout, else of `package`.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs

__all__ = [
    "INSTALLED",
    "SCANNED",
    "ImportGraph",
    "cycles",
    "read_graph",
]

ROOT: Final = Path(__file__).resolve().parents[1]
#: The packages a wheel installs; the rest of the checkout (tools, tests, fuzz) is for developers.
INSTALLED: Final = ("engine", "adapters", "web", "cli", "demo")
#: Everything read: the installed packages, then the developer tools.
SCANNED: Final = (*INSTALLED, "tools", "fuzz", "tests")


@attrs.frozen
class ImportGraph:
    """Modules of the checkout and, per module, what it imports (`internal`: modules of the
    checkout; `external`: the top-level names of everything else)."""

    internal: Mapping[str, frozenset[str]]
    external: Mapping[str, frozenset[str]]

    def packages(self) -> dict[str, set[str]]:
        """Top-level package -> the other top-level packages of the checkout it imports."""
        edges: dict[str, set[str]] = {}
        for module, targets in self.internal.items():
            top = module.split(".")[0]
            edges.setdefault(top, set()).update(
                t.split(".")[0] for t in targets if t.split(".")[0] != top
            )
        return edges


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _source_files(packages: Iterable[str]) -> Iterator[Path]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "node_modules" not in path.parts:
                yield path


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import that can run."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                if not is_package:
                    anchor = anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, [alias.name for alias in node.names]
        stack.extend(ast.iter_child_nodes(node))


def read_graph(packages: Sequence[str] = SCANNED) -> ImportGraph:
    files = {_module_name(path): path for path in _source_files(packages)}
    internal: dict[str, frozenset[str]] = {}
    external: dict[str, frozenset[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        inside: set[str] = set()
        outside: set[str] = set()
        for imported, names in _imports(tree, module, path.name == "__init__.py"):
            if imported.split(".")[0] not in SCANNED:
                outside.add(imported.split(".")[0])
                continue
            submodules = [f"{imported}.{name}" for name in names if f"{imported}.{name}" in files]
            if submodules:
                inside.update(submodules)
            if len(submodules) < len(names) or not names:
                inside.add(imported)
        inside.discard(module)
        internal[module] = frozenset(inside & files.keys())
        external[module] = frozenset(outside)
    return ImportGraph(internal, external)


def cycles(graph: ImportGraph) -> list[list[str]]:
    """Groups of modules that import each other, directly or through others (Tarjan's
    strongly connected components of size > 1). A package's `__init__` importing its own
    submodules is the normal shape; a submodule that imports its own package back (`from
    engine import X` inside `engine._actors`) closes a cycle and counts."""
    edges = {module: set(targets) for module, targets in graph.internal.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
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
                        found.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.imports", description=__doc__)
    parser.add_argument("--modules", action="store_true", help="module by module")
    args = parser.parse_args(argv)
    graph = read_graph()
    if args.modules:
        for module, targets in sorted(graph.internal.items()):
            print(f"{module} -> {', '.join(sorted(targets)) or '-'}")
    else:
        for package, imported in sorted(graph.packages().items()):
            print(f"{package:9} -> {', '.join(sorted(imported)) or '-'}")
    found = cycles(graph)
    for group in found:
        print("cycle: " + " <-> ".join(group))
    print(f"{len(found)} import cycles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
