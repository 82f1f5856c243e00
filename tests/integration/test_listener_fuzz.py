"""The three listeners under `fuzz.listeners`: raw request bytes, then every invariant checked.

One bounded run (serve and its MCP listener in one process, a2a-serve in another, fuzzed at the
same time) with a fixed seed and one random seed, printed so that a failure replays with
`python -m fuzz.listeners --seed S`. The run is shared by the tests below: the first fails on any
violation that is not an open finding, the others track each open finding through the regression
input the harness sends first on every run (strict: once the server is fixed, the test says so
and its entry here must go).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import trio

from fuzz.listeners import Failure, FuzzOptions, ListenerReport, fuzz_listeners

FIXED_SEED = 20261203
#: Fuzzing time per listener and seed: with start-up, the silent peers' window and the final
#: checks, the whole run takes about 20 s.
SECONDS = 2.0


@dataclass(frozen=True)
class OpenFinding:
    """A violation found and reported, not yet fixed: its regression input (sent by every run)
    and what its failures look like when drawn inputs hit it again."""

    listener: str
    regression: str
    reason: str
    matches: Callable[[Failure], bool]


def _head_has(pattern: bytes) -> Callable[[Failure], bool]:
    """Whether the failing input's head matches `pattern`."""
    found = re.compile(pattern)
    return lambda failure: (
        failure.probe is not None
        and any(found.search(write.partition(b"\r\n\r\n")[0]) for write in failure.probe.writes)
    )


def _body_is_not_unicode(failure: Failure) -> bool:
    """Whether the failing input's body has invalid UTF-8 or a lone surrogate escape."""
    for write in failure.probe.writes if failure.probe is not None else ():
        body = write.partition(b"\r\n\r\n")[2]
        if re.search(rb"(?i)\\ud[89a-f][0-9a-f]{2}", body):
            return True
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return True
    return False


OPEN_FINDINGS: tuple[OpenFinding, ...] = (
    OpenFinding(
        "serve",
        "a WebSocket handshake to an HTTP route",
        "serve answers a WebSocket handshake to an HTTP-only route (/, /healthz, /readyz, "
        "/runs/<id>/events) with 500: its HTTPException handler reads `request.path` in a "
        "WebSocket context",
        lambda failure: (
            failure.invariant == "no 5xx"
            and _head_has(rb"(?i)\r\nupgrade:\s*websocket")(failure)
            and not _head_has(rb"^GET /runs/[^ ?]*/ws[ ?]")(failure)
        ),
    ),
    OpenFinding(
        "a2a-serve",
        "silent from the start",
        "a2a-serve (uvicorn) never closes a connection whose request head does not end",
        lambda failure: failure.invariant == "a silent peer is dropped",
    ),
    OpenFinding(
        "a2a-serve",
        "a lone surrogate echoed by the REST binding",
        "a2a-serve checks a body with parse_json_body but hands the SDK the original bytes: "
        "a lone surrogate escape the SDK echoes, or invalid UTF-8, ends in 500 / -32603",
        lambda failure: failure.invariant == "no 5xx" and _body_is_not_unicode(failure),
    ),
)
#: Regression inputs of the same finding as one above (tracked with it).
_SAME_FINDING = {
    "invalid UTF-8 on the REST binding": "a lone surrogate echoed by the REST binding",
    "a lone surrogate echoed by JSON-RPC": "a lone surrogate echoed by the REST binding",
    "invalid UTF-8 on JSON-RPC": "a lone surrogate echoed by the REST binding",
    "silent in the request line": "silent from the start",
    "silent in the head": "silent from the start",
}


@pytest.fixture(scope="module")
def fuzzed() -> list[ListenerReport]:
    seeds = (FIXED_SEED, random.SystemRandom().randrange(1, 2**31))
    print(f"fuzz.listeners seeds {seeds} (replay: python -m fuzz.listeners --seed S)")
    return trio.run(fuzz_listeners, FuzzOptions(seconds=SECONDS, seeds=seeds))


def _render(reports: list[ListenerReport]) -> str:
    return "\n".join(report.render() for report in reports)


def _open_finding(failure: Failure) -> OpenFinding | None:
    for finding in OPEN_FINDINGS:
        if finding.listener == failure.listener and finding.matches(failure):
            return finding
    return None


def test_fuzzing_finds_nothing_beyond_the_open_findings(
    fuzzed: list[ListenerReport],
) -> None:
    assert [report.name for report in fuzzed] == ["serve", "mcp", "a2a-serve"]
    for report in fuzzed:
        assert report.inputs > 50, _render(fuzzed)  # the run did fuzz
    unknown = [f for report in fuzzed for f in report.failures if _open_finding(f) is None]
    if unknown:
        pytest.fail(
            f"{len(unknown)} violations beyond the open findings:\n" + _render(fuzzed),
            pytrace=False,
        )
    print(_render(fuzzed))


@pytest.mark.parametrize(
    "finding", OPEN_FINDINGS, ids=[finding.regression for finding in OPEN_FINDINGS]
)
@pytest.mark.xfail(strict=True, reason="an open finding (see OPEN_FINDINGS)")
def test_an_open_finding_is_fixed(fuzzed: list[ListenerReport], finding: OpenFinding) -> None:
    names = {finding.regression} | {
        name for name, same in _SAME_FINDING.items() if same == finding.regression
    }
    still = [
        failure
        for report in fuzzed
        if report.name == finding.listener
        for failure in report.failures
        if failure.origin is not None and failure.origin.name in names
    ]
    assert not still, f"{finding.reason}:\n" + "\n".join(f.render() for f in still)
