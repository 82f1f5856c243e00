"""What a fuzz harness is, and how the runner finds and loads one.

A harness is a module `fuzz_<name>.py` in the `fuzz` package that exposes
`fuzz_one_input(data: bytes) -> None` and `SEEDS: list[bytes]`, and may expose
`DICTIONARY: list[bytes]` (tokens worth splicing into inputs). `fuzz_one_input` catches the typed
errors its code under test is allowed to raise and checks invariants on what it returns: anything
that escapes it is a real bug. Seed files committed under `fuzz/corpus_seeds/<name>/` are read too.

This module owns discovery and the import instrumentation switch; it runs nothing. Harnesses import
their code under test inside `instrumented_imports()`: in a fuzzing session under atheris that
records coverage for libFuzzer, everywhere else (unit tests, the fallback engine) it is a plain
import.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_PACKAGE",
    "Harness",
    "committed_seed_files",
    "enable_instrumentation",
    "harness_names",
    "instrumented_imports",
    "load_harness",
]

DEFAULT_PACKAGE: Final = "fuzz"
_MODULE_PREFIX: Final = "fuzz_"

# Set once, by a session process, before it imports its harness; never in the test process.
_instrumenting = False


@dataclass(frozen=True)
class Harness:
    name: str
    fuzz_one_input: Callable[[bytes], None]
    seeds: list[bytes]
    dictionary: list[bytes]


def harness_names(package: str = DEFAULT_PACKAGE) -> list[str]:
    """Names (`tool_input` for `fuzz_tool_input.py`) of the package's harnesses, sorted.

    Reads file names only: no harness, and no code under test, is imported.
    """
    return sorted(
        module.name.removeprefix(_MODULE_PREFIX)
        for module in pkgutil.iter_modules([str(_package_dir(package))])
        if module.name.startswith(_MODULE_PREFIX) and not module.ispkg
    )


def load_harness(name: str, package: str = DEFAULT_PACKAGE) -> Harness:
    """Import one harness and check that it has the shape described above."""
    module = importlib.import_module(f"{package}.{_MODULE_PREFIX}{name}")
    one_input = getattr(module, "fuzz_one_input", None)
    seeds = getattr(module, "SEEDS", None)
    dictionary = getattr(module, "DICTIONARY", [])
    if not callable(one_input):
        raise TypeError(f"{module.__name__} has no fuzz_one_input(data: bytes) function")
    if not isinstance(seeds, list) or not all(isinstance(seed, bytes) for seed in seeds):
        raise TypeError(f"{module.__name__}.SEEDS must be a list of bytes")
    if not isinstance(dictionary, list) or not all(isinstance(t, bytes) for t in dictionary):
        raise TypeError(f"{module.__name__}.DICTIONARY must be a list of bytes")
    return Harness(name=name, fuzz_one_input=one_input, seeds=seeds, dictionary=dictionary)


def committed_seed_files(name: str, package: str = DEFAULT_PACKAGE) -> list[Path]:
    """Seed inputs committed under `<package>/corpus_seeds/<name>/`, if that folder exists."""
    folder = _package_dir(package) / "corpus_seeds" / name
    if not folder.is_dir():
        return []
    return sorted(path for path in folder.iterdir() if path.is_file())


def enable_instrumentation() -> None:
    """Make `instrumented_imports()` instrument for atheris in this process from now on."""
    global _instrumenting
    _instrumenting = True


@contextlib.contextmanager
def instrumented_imports(*packages: str) -> Iterator[None]:
    """Instrument the modules of `packages` imported in this block, when fuzzing under atheris.

    Modules imported before the block are not instrumented, which is why a session imports the
    harness (and through it the code under test) only after `enable_instrumentation()`.
    """
    if not _instrumenting:
        yield
        return
    import atheris

    with atheris.instrument_imports(include=list(packages) or None):
        yield


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"no package named {package!r}")
    return Path(next(iter(spec.submodule_search_locations)))
