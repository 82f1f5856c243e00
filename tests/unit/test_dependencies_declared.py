"""Every third-party module the code imports comes from a distribution pyproject.toml declares.

A module that arrives only as some other package's dependency works until that package drops it,
so each import must name its own distribution: the installed packages (engine, adapters, web,
cli, demo) in `[project] dependencies`, except `engine.testing` (the kits a store or target author
runs in their own tests), which may also use the `testing` extra, and `adapters.redis_archive`,
which may also use the `redis` extra; the uninstalled tooling (tools, tests, fuzz) uses those or
the `dev` extra. The check reads every `import` statement with `ast`,
maps each module to the distribution that installed it with `importlib.metadata`, and compares
names normalised as in https://packaging.python.org/en/latest/specifications/name-normalization/.

`./dev` installs from requirements-dev.lock, not from the ranges: the lock must pin every declared
requirement at a version the range admits, or it is stale (`./dev lock` refreshes it).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import os
import re
import sys
import tomllib
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from tools.imports import INSTALLED, SCANNED

ROOT = Path(__file__).resolve().parents[2]
TOOLING = tuple(name for name in SCANNED if name not in INSTALLED)
FIRST_PARTY = frozenset(SCANNED)
KITS = ROOT / "engine" / "testing"
REDIS_ARCHIVE = ROOT / "adapters" / "redis_archive"
LOCK = ROOT / "requirements-dev.lock"


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(requirements: Iterable[str]) -> set[str]:
    """The distribution names of PEP 508 requirement strings (extras and versions dropped)."""
    return {normalise(Requirement(requirement).name) for requirement in requirements}


def python_files(folder: Path, skip: Collection[Path]) -> list[Path]:
    """The .py files under `folder`, not descending into `skip` or npm's node_modules."""
    found = []
    for directory, subdirectories, files in os.walk(folder):
        here = Path(directory)
        subdirectories[:] = [
            name for name in subdirectories if name != "node_modules" and here / name not in skip
        ]
        found += [here / name for name in files if name.endswith(".py")]
    return sorted(found)


def imported_modules(
    folders: Iterable[Path], skip: Collection[Path] = ()
) -> Iterator[tuple[str, Path]]:
    """(dotted module, file) for every absolute third-party import under the folders.

    The file is named from the repository's root (`adapters/a2a/_card.py`), or outside it
    from the folder's parent on. Folders in `skip` are left out.
    """
    for folder in folders:
        base = ROOT if folder.is_relative_to(ROOT) else folder.parent
        for path in python_files(folder, skip):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    # `from opentelemetry import trace`: the name may be a module of a
                    # namespace package that several distributions share.
                    modules = [f"{node.module}.{alias.name}" for alias in node.names]
                else:
                    continue
                for module in modules:
                    top = module.partition(".")[0]
                    if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                        yield module, path.relative_to(base)


@functools.cache
def files_of(distribution: str) -> frozenset[str]:
    """The paths a distribution installed, as its RECORD lists them (`google/protobuf/...`)."""
    files = importlib.metadata.distribution(distribution).files or ()
    return frozenset(str(file) for file in files)


def distribution_of(module: str, owners: Mapping[str, list[str]]) -> str | None:
    """The distribution that installed `module`; None when none did.

    A namespace package (`google.protobuf`, `google.api`) is shared by several distributions:
    the one whose files hold the module's own directory or file is the one it comes from.
    """
    candidates = sorted(set(owners.get(module.partition(".")[0], ())))
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    parts = module.split(".")
    for depth in range(len(parts), 1, -1):
        stem = "/".join(parts[:depth])
        holders = [
            name
            for name in candidates
            if stem + ".py" in files_of(name)
            or any(file.startswith(stem + "/") for file in files_of(name))
        ]
        if len(holders) == 1:
            return holders[0]
    raise AssertionError(f"{module} is in {candidates}; cannot tell which one it comes from")


def undeclared(
    folders: Iterable[Path], allowed: set[str], skip: Collection[Path] = ()
) -> list[str]:
    """One line per import whose distribution is not among `allowed` (normalised names)."""
    owners = importlib.metadata.packages_distributions()
    problems = []
    for module, where in imported_modules(folders, skip):
        distribution = distribution_of(module, owners)
        if distribution is None:
            problems.append(f"{where}: {module} is installed by no distribution")
        elif normalise(distribution) not in allowed:
            problems.append(f"{where}: {module} comes from {distribution}, not declared")
    return sorted(set(problems))


def requirement_lines(extra: str | None = None) -> list[str]:
    """`[project] dependencies` as written, or an extra's (empty if there is no such extra)."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        table = tomllib.load(file)["project"]
    if extra is None:
        return list(table["dependencies"])
    return list(table.get("optional-dependencies", {}).get(extra, []))


def requirements(extra: str | None = None) -> set[str]:
    """The distributions `[project] dependencies` declares, or an extra (empty if absent)."""
    return declared(requirement_lines(extra))


def stale_pins(wanted: Iterable[str], lock_text: str) -> list[str]:
    """What a requirements-format lock misses of `wanted` (PEP 508 strings).

    A universal lock may pin one package twice, under exclusive environment markers (one
    version for older Pythons, another for newer): every pin must lie within the range.
    """
    pins: dict[str, list[Version]] = {}
    for line in lock_text.splitlines():
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if match:
            pins.setdefault(normalise(match.group(1)), []).append(Version(match.group(2)))
    problems = []
    for text in wanted:
        requirement = Requirement(text)
        versions = pins.get(normalise(requirement.name), [])
        if not versions:
            problems.append(f"{requirement.name} is not in the lock")
        problems += [
            f"{requirement.name} is locked at {version}, outside {requirement.specifier}"
            for version in versions
            if not requirement.specifier.contains(version, prereleases=True)
        ]
    return problems


def test_installed_packages_import_only_declared_dependencies() -> None:
    problems = undeclared(
        (ROOT / name for name in INSTALLED), requirements(), skip=[KITS, REDIS_ARCHIVE]
    )
    assert not problems, "\n".join(["add these to [project] dependencies:", *problems])


def test_the_redis_archive_imports_only_dependencies_of_the_package_or_the_redis_extra() -> None:
    problems = undeclared([REDIS_ARCHIVE], requirements() | requirements("redis"))
    assert not problems, "\n".join(["add these to the redis extra:", *problems])


def test_the_testing_kits_import_only_dependencies_of_the_package_or_the_testing_extra() -> None:
    problems = undeclared([KITS], requirements() | requirements("testing"))
    assert not problems, "\n".join(["add these to the testing extra:", *problems])


def test_tooling_imports_only_dependencies_of_the_package_or_the_dev_extra() -> None:
    problems = undeclared((ROOT / name for name in TOOLING), requirements() | requirements("dev"))
    assert not problems, "\n".join(["add these to the dev extra:", *problems])


def test_an_import_served_only_by_another_packages_dependency_is_reported(tmp_path: Path) -> None:
    # httpcore arrives with httpx; google.protobuf shares the google namespace with other
    # distributions and must still be told apart.
    (tmp_path / "module.py").write_text(
        "import httpcore\n"
        "from google.protobuf import json_format\n"
        "from engine import Engine\n"
        "import json\n"
        "def late():\n"
        "    import no_such_module_anywhere\n",
        encoding="utf-8",
    )
    assert undeclared([tmp_path], declared(["httpx>=0.28,<0.29", "protobuf>=7"])) == [
        f"{tmp_path.name}/module.py: httpcore comes from httpcore, not declared",
        f"{tmp_path.name}/module.py: no_such_module_anywhere is installed by no distribution",
    ]
    assert undeclared([tmp_path], declared(["httpcore", "protobuf", "missing"])) == [
        f"{tmp_path.name}/module.py: no_such_module_anywhere is installed by no distribution",
    ]


def test_the_lock_pins_every_declared_requirement_within_its_range() -> None:
    with (ROOT / "pyproject.toml").open("rb") as file:
        extras = tomllib.load(file)["project"].get("optional-dependencies", {})
    wanted = requirement_lines() + [line for extra in extras for line in requirement_lines(extra)]
    problems = stale_pins(wanted, LOCK.read_text(encoding="utf-8"))
    assert not problems, "\n".join(["requirements-dev.lock is stale: run ./dev lock", *problems])


def test_a_lock_missing_a_requirement_or_pinning_outside_its_range_is_stale() -> None:
    lock = (
        "# a comment\n"
        "trio==0.35.0 \\\n"
        "    --hash=sha256:00\n"
        "numpy==2.4.6 ; python_full_version < '3.12' \\\n"
        "numpy==2.5.5 ; python_full_version >= '3.12' \\\n"
    )
    assert stale_pins(["trio>=0.35,<0.36", "numpy>=2.4,<3"], lock) == []
    assert stale_pins(["trio>=0.36", "numpy<2.5", "attrs>=25", "Numpy[extra]>=2"], lock) == [
        "trio is locked at 0.35.0, outside >=0.36",
        "numpy is locked at 2.5.5, outside <2.5",
        "attrs is not in the lock",
    ]
