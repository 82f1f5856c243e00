"""The three listeners under `fuzz.listeners`: raw request bytes, then every invariant checked.

One bounded run: serve (and, in its process, the MCP listener) and a2a-serve, fuzzed at the same
time, each first sent the harness's regression inputs (the bytes that found its bugs so far),
then a fixed seed's inputs and a random seed's, printed so that a failure replays with
`python -m fuzz.listeners --seed S`.
"""

from __future__ import annotations

import random

import pytest
import trio

from fuzz.listeners import FuzzOptions, fuzz_listeners

FIXED_SEED = 20261203
#: Fuzzing time per listener and seed: with start-up, the silent peers' window and the final
#: checks, the whole run takes about 20 s.
SECONDS = 2.0


def test_the_listeners_hold_their_invariants_under_fuzzing() -> None:
    seeds = (FIXED_SEED, random.SystemRandom().randrange(1, 2**31))
    print(f"fuzz.listeners seeds {seeds} (replay: python -m fuzz.listeners --seed S)")
    reports = trio.run(fuzz_listeners, FuzzOptions(seconds=SECONDS, seeds=seeds))
    text = "\n".join(report.render() for report in reports)
    print(text)
    assert [report.name for report in reports] == ["serve", "mcp", "a2a-serve"], text
    for report in reports:
        assert report.inputs > 20, text  # the run did fuzz
    failures = sum(len(report.failures) for report in reports)
    if failures:
        pytest.fail(f"{failures} violated invariants (seeds {seeds}):\n{text}", pytrace=False)
