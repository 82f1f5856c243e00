"""One fuzzing session: a single harness, in its own process, for a bounded time.

The runner (`python -m fuzz`) starts `python -m fuzz._session NAME --workdir DIR ...` with a fresh
temporary DIR; the session writes its corpus and any failing input there and nowhere else. Under
atheris it hands the harness to libFuzzer: coverage-guided, the code under test instrumented as
the harness imports it. Without atheris it feeds the seeds, then mutated and random bytes drawn
from `random.Random(seed)`, until the time is up: weaker, but the same command still works.

Either engine ends its output with the lines the runner reads, in libFuzzer's words:
`stat::number_of_executed_units: N` and, for a failing input, `Test unit written to PATH`; a
failing input makes the process exit non-zero. The session never decides what is a bug: whatever
escapes the harness's `fuzz_one_input` is one.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import random
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Final

from fuzz._harness import (
    DEFAULT_PACKAGE,
    Harness,
    committed_seed_files,
    enable_instrumentation,
    load_harness,
)

__all__ = ["main"]

#: Exit status of a session whose harness failed on an input (libFuzzer's own default).
FAILED_INPUT_EXIT: Final = 77

# Generic JSON and encoding trouble, mixed into the fallback's mutations next to each harness's
# own DICTIONARY; libFuzzer finds such tokens itself from comparisons.
_FALLBACK_TOKENS: Final = [
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b":",
    b",",
    b"null",
    b"true",
    b"false",
    b"0",
    b"-1",
    b"1.5",
    b"1e999",
    b"NaN",
    b"Infinity",
    b'"\\u0000"',
    b'"\\ud800"',
    b"\\",
    b"\xff",
    b"\xc3\xa9",
    b"\xed\xa0\x80",
]
# libFuzzer's default when the corpus holds nothing larger.
_MAX_INPUT_BYTES: Final = 4096
_RECENT_INPUTS: Final = 64


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz._session")
    parser.add_argument("name")
    parser.add_argument("--package", default=DEFAULT_PACKAGE)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--engine", choices=["atheris", "random"], required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--input-timeout", type=int, default=10)
    args = parser.parse_args(argv)

    corpus_dir = args.workdir / "corpus"
    artifacts_dir = args.workdir / "artifacts"
    corpus_dir.mkdir(parents=True, exist_ok=True)
    artifacts_dir.mkdir(parents=True, exist_ok=True)

    if args.engine == "atheris":
        # Before the harness import, so the code under test is instrumented as it is loaded.
        enable_instrumentation()
    harness = load_harness(args.name, args.package)
    corpus = _seed_corpus(harness, args.package, corpus_dir)

    if args.engine == "atheris":
        return _run_atheris(harness, corpus_dir, artifacts_dir, args)
    return _run_fallback(harness, corpus, artifacts_dir, args)


def _seed_corpus(harness: Harness, package: str, corpus_dir: Path) -> list[bytes]:
    """Write SEEDS and the committed seed files into the session's own corpus folder.

    Copied rather than pointed at: libFuzzer adds the inputs it finds to its corpus folder, and
    the committed folder must not change.
    """
    corpus = list(harness.seeds)
    corpus += [path.read_bytes() for path in committed_seed_files(harness.name, package)]
    for i, data in enumerate(corpus):
        (corpus_dir / f"seed-{i:04d}").write_bytes(data)
    return corpus


def _run_atheris(
    harness: Harness, corpus_dir: Path, artifacts_dir: Path, args: argparse.Namespace
) -> int:
    import atheris

    libfuzzer_args = [
        sys.argv[0],
        str(corpus_dir),
        f"-max_total_time={max(1, round(args.seconds))}",
        f"-seed={args.seed}",
        f"-timeout={args.input_timeout}",
        f"-artifact_prefix={artifacts_dir}/",
        f"-error_exitcode={FAILED_INPUT_EXIT}",
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
    ]
    if harness.dictionary:
        dictionary = corpus_dir.parent / "tokens.dict"
        dictionary.write_text("".join(f'"{_dict_escape(t)}"\n' for t in harness.dictionary))
        libfuzzer_args.append(f"-dict={dictionary}")
    atheris.Setup(libfuzzer_args, harness.fuzz_one_input)
    atheris.Fuzz()  # exits the process itself
    return 0


def _dict_escape(token: bytes) -> str:
    return "".join(chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\x{b:02x}" for b in token)


class _SlowInput(Exception):
    """One input ran longer than --input-timeout: a hang is a bug too."""


def _run_fallback(
    harness: Harness, corpus: list[bytes], artifacts_dir: Path, args: argparse.Namespace
) -> int:
    rng = random.Random(args.seed)
    tokens = harness.dictionary + _FALLBACK_TOKENS
    recent: list[bytes] = []
    deadline = time.monotonic() + args.seconds
    executed = 0
    print(f"INFO: fallback engine (atheris not used), seed {args.seed}", flush=True)

    def inputs() -> Iterator[bytes]:
        yield from corpus
        while time.monotonic() < deadline:
            data = _mutated(rng, corpus, recent, tokens)
            recent.append(data)
            if len(recent) > _RECENT_INPUTS:
                recent.pop(rng.randrange(len(recent)))
            yield data

    for data in inputs():
        executed += 1
        try:
            with _input_time_limit(args.input_timeout):
                harness.fuzz_one_input(data)
        except Exception as exc:
            kind = "timeout" if isinstance(exc, _SlowInput) else "crash"
            path = artifacts_dir / f"{kind}-{hashlib.sha1(data).hexdigest()}"
            path.write_bytes(data)
            print(f"\n=== Uncaught Python exception ({kind}): ===", file=sys.stderr)
            traceback.print_exc()
            print(f"Test unit written to {path}", flush=True)
            _print_stats(executed)
            return FAILED_INPUT_EXIT
    _print_stats(executed)
    return 0


def _print_stats(executed: int) -> None:
    sys.stderr.flush()
    print(f"stat::number_of_executed_units: {executed}", flush=True)


@contextlib.contextmanager
def _input_time_limit(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: FrameType | None) -> None:
        raise _SlowInput(f"input ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _mutated(
    rng: random.Random, corpus: list[bytes], recent: list[bytes], tokens: list[bytes]
) -> bytes:
    """A few byte-level edits of a seed or a recent input; now and then plain random bytes."""
    if rng.random() < 0.05 or not corpus:
        return rng.randbytes(rng.randrange(64))
    pool = recent if recent and rng.random() < 0.5 else corpus
    data = bytearray(rng.choice(pool))
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data) + 1)
        edit = rng.randrange(7)
        if edit == 0 and data:
            data[at % len(data)] ^= 1 << rng.randrange(8)
        elif edit == 1 and data:
            data[at % len(data)] = rng.randrange(256)
        elif edit == 2:
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif edit == 3 and data:
            del data[at : at + rng.randint(1, 16)]
        elif edit == 4:
            data[at:at] = rng.choice(tokens)
        elif edit == 5 and data:
            start = rng.randrange(len(data))
            data[at:at] = data[start : start + rng.randint(1, 32)]
        elif edit == 6:
            other = rng.choice(corpus)
            data[at:] = other[rng.randrange(len(other) + 1) :]
    return bytes(data[:_MAX_INPUT_BYTES])


if __name__ == "__main__":
    sys.exit(main())
