"""Who may import whom, read from the source (`tools.imports`): the layers stay visible.

- `engine/` imports no protocol SDK, no web framework and nothing else of the checkout;
- `adapters/` import the engine and each other's public names, never `web`, `cli` or `demo`;
- `web/` (the bundled server) never imports the command line or the demo;
- nothing installed imports the developer tools (`tools`, `tests`, `fuzz`);
- outside tests and fuzz harnesses, a private module (`_name`) is imported only from inside the
  package that owns it;
- no group of modules imports each other at run time (imports inside functions included).
"""

from __future__ import annotations

import pytest

from tools.imports import INSTALLED, ImportGraph, cycles, read_graph

#: Distributions (by top-level import name) that speak a protocol or serve the web.
PROTOCOL_AND_WEB: frozenset[str] = frozenset(
    {
        "a2a",
        "ag_ui",
        "google",
        "h11",
        "httpx",
        "httpx2",
        "hypercorn",
        "mcp",
        "mcp_types",
        "pydantic",
        "quart",
        "quart_trio",
        "starlette",
        "trio_websocket",
        "uvicorn",
        "werkzeug",
    }
)
#: Which top-level packages of the checkout each one may import.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "engine": frozenset(),
    "adapters": frozenset({"engine"}),
    "web": frozenset({"engine", "adapters"}),
    "demo": frozenset({"engine", "adapters", "web"}),
    "cli": frozenset({"engine", "adapters", "web", "demo"}),
    "tools": frozenset({"engine", "adapters", "web", "cli", "demo"}),
    "fuzz": frozenset({"engine", "adapters", "web"}),
}


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return read_graph()


def test_the_engine_imports_no_protocol_sdk_and_no_web_framework(graph: ImportGraph) -> None:
    engine_modules = [m for m in graph.external if m.split(".")[0] == "engine"]
    assert len(engine_modules) > 10
    offenders = {
        module: sorted(graph.external[module] & PROTOCOL_AND_WEB)
        for module in engine_modules
        if graph.external[module] & PROTOCOL_AND_WEB
    }
    assert offenders == {}


def test_each_package_imports_only_the_layers_below_it(graph: ImportGraph) -> None:
    packages = graph.packages()
    assert set(MAY_IMPORT) <= set(packages)
    offenders = {
        package: sorted(targets - MAY_IMPORT[package])
        for package, targets in packages.items()
        if package in MAY_IMPORT and targets - MAY_IMPORT[package]
    }
    assert offenders == {}


def test_private_modules_are_imported_only_inside_their_package(graph: ImportGraph) -> None:
    offenders = []
    for module, targets in graph.internal.items():
        if module.split(".")[0] in ("tests", "fuzz"):
            continue  # white-box tests and harnesses reach into what they test
        for target in targets:
            parts = target.split(".")
            private = next((i for i, part in enumerate(parts) if part.startswith("_")), None)
            if private is None:
                continue
            owner = ".".join(parts[:private])
            if module != owner and not module.startswith(owner + "."):
                offenders.append(f"{module} -> {target}")
    assert sorted(offenders) == []


def test_no_modules_import_each_other_at_run_time(graph: ImportGraph) -> None:
    assert cycles(graph) == []


def test_the_installed_packages_are_the_ones_a_wheel_ships() -> None:
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(name.rstrip("*") for name in include) == sorted(INSTALLED)


def test_a_cycle_is_found_through_a_function_level_import() -> None:
    """The checker itself can fail: two modules importing each other (one of them inside a
    function) form a cycle, and so does a submodule importing its own package back."""
    graph = ImportGraph(
        internal={
            "web.server": frozenset({"web.config"}),
            "web.config": frozenset({"web.server"}),
            "engine": frozenset({"engine._actors"}),
            "engine._actors": frozenset({"engine._events"}),
            "engine._events": frozenset(),
            "adapters.a2a": frozenset({"adapters.a2a._target"}),
            "adapters.a2a._target": frozenset({"adapters.a2a"}),
        },
        external={},
    )
    assert sorted(cycles(graph)) == [
        ["adapters.a2a", "adapters.a2a._target"],
        ["web.config", "web.server"],
    ]


def test_the_engine_traces_through_the_opentelemetry_api_only() -> None:
    """The host picks the SDK and the exporter (`web.telemetry` for the bundled server); the
    engine names only the API, which records nothing until a provider is given."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "engine"
    used = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            used.update(name for name in names if name.split(".")[0] == "opentelemetry")
    assert used, "the engine's spans are made through opentelemetry's API"
    assert not {
        name for name in used if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))
    }
