"""`subagent-engine watch URL`: any run's stream, drawn live as a tree in the terminal.

This module owns the I/O of watching a run another process serves: it opens the run's stream
(`GET /runs/<id>/events?format=engine`, the engine's own events, with the viewer token as
`Authorization: Bearer`), feeds what arrives through `cli._watch_wire.EngineStream` to the same
tree `subagent-engine run` draws (`cli._tree.RunTree`, on the same screen: redrawn in place on a
terminal, appended plain lines in a pipe, a file, with `NO_COLOR` or `TERM=dumb`), and ends with
the run's result or how it ended, once the run's terminal arrives.

The URL is what a user copies (`cli._watch_wire.watch_target`); the token comes from `--token`,
else the URL's `token`, else `SUBAGENT_ENGINE_TOKEN`. A connection that drops after the stream
opened is reopened with `Last-Event-ID` (the last cursor read), at most `retries` times in a row
without an event between them, waiting what the server's `retry:` asks (at most 30 s), and each
attempt is said on stderr. Watching never changes the run: Ctrl-C stops watching only.

Exit status (`EXIT_*`; 0, 1, 3 and 130 as `subagent-engine run`): 0 the run finished and every
subagent with it; 1 it failed, or a subagent did; 2 a bad URL or no token; 3 the run was
cancelled; 4 the server refused the token (401, 403); 5 no such run, or the token is not its
(404: the server does not say which); 6 the server cannot be reached, or the stream was lost and
every reconnect failed; 7 what came back is not a run's stream (another status, not SSE, an
event that is not the engine's, a line over `MAX_LINE_BYTES`); 130 Ctrl-C. Every failure is one
line on stderr, never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Final, TextIO

import httpx
import trio

from adapters import closing_abandoned_generators
from cli._terminal import (
    EXIT_CANCELLED,
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_FINISHED,
    EXIT_INTERRUPTED,
    REDRAW_INTERVAL,
    Screen,
    alone,
    ending,
    exit_status,
    open_screen,
)
from cli._tree import RunTree, clean_text
from cli._watch_wire import BadUrl, EngineStream, StreamError, WatchTarget, watch_target

__all__ = [
    "EXIT_BAD_STREAM",
    "EXIT_CANCELLED",
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_FINISHED",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_REFUSED",
    "EXIT_UNREACHABLE",
    "TOKEN_ENV",
    "watch_main",
    "watch_run",
]

EXIT_REFUSED: Final = 4
EXIT_NOT_FOUND: Final = 5
EXIT_UNREACHABLE: Final = 6
EXIT_BAD_STREAM: Final = 7
#: The variable a viewer token is read from when neither `--token` nor the URL gives one.
TOKEN_ENV: Final = "SUBAGENT_ENGINE_TOKEN"
#: Reconnects in a row (no event read between them) before watching gives up.
RETRIES: Final = 5
#: Seconds between reconnects when the server asked for none (`retry:`).
RETRY_DELAY: Final = 1.0
#: Seconds without a byte (the server's keep-alive comes every few seconds) before the
#: connection counts as dropped.
READ_TIMEOUT: Final = 60.0
CONNECT_TIMEOUT: Final = 10.0
#: How much of a refusal's body is read for its message.
_MAX_ERROR_BODY: Final = 16 * 1024

_PROG: Final = "subagent-engine watch"


class WatchFailure(Exception):
    """Watching ended without the run's end: `status` is the exit status, the message one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _refusal(response: httpx.Response) -> str:
    """A refused request's reason: the server's `message` if its JSON body has one."""
    body = b""
    async for chunk in response.aiter_bytes():  # (an early stop: see the attempt's closing)
        body += chunk
        if len(body) > _MAX_ERROR_BODY:
            break
    try:
        message = json.loads(body[:_MAX_ERROR_BODY])["message"]
    except (ValueError, TypeError, KeyError):
        message = ""
    text = clean_text(message)[:300] if isinstance(message, str) else ""
    return f"{response.status_code}" + (f": {text}" if text else "")


def _check_answer(response: httpx.Response, reason: str) -> None:
    status = response.status_code
    if status in (401, 403):
        raise WatchFailure(EXIT_REFUSED, f"the server refused the token ({reason})")
    if status == 404:
        raise WatchFailure(EXIT_NOT_FOUND, f"no such run, or the token is not its ({reason})")
    raise WatchFailure(EXIT_BAD_STREAM, f"the server did not stream the run ({reason})")


async def watch_run(
    target: WatchTarget,
    token: str,
    screen: Screen,
    err: TextIO,
    *,
    retries: int = RETRIES,
    transport: httpx.AsyncBaseTransport | None = None,
) -> int:
    """Watch `target` to its end on `screen`; the exit status. Raises `WatchFailure`."""
    tree = RunTree(f"run {target.run_id}", now=trio.current_time())
    timeout = httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT)
    try:
        async with (
            httpx.AsyncClient(timeout=timeout, transport=transport) as http,
            trio.open_nursery() as nursery,
        ):
            await _follow(target, token, screen, err, retries, http, nursery, tree)
    except BaseExceptionGroup as group:
        raise alone(group) from None
    screen.write(ending(tree))
    return exit_status(tree, interrupted=False)


async def _follow(
    target: WatchTarget,
    token: str,
    screen: Screen,
    err: TextIO,
    retries: int,
    http: httpx.AsyncClient,
    nursery: trio.Nursery,
    tree: RunTree,
) -> None:
    stream = EngineStream()
    opened = False  # a stream was read from once: drops from then on are reconnected
    failures = 0  # reconnects in a row without an event
    if screen.live:

        async def tick() -> None:
            while True:
                screen.draw(tree, trio.current_time())
                await trio.sleep(REDRAW_INTERVAL)

        nursery.start_soon(tick)
    while tree.outcome is None:
        headers = {"authorization": f"Bearer {token}", "accept": "text/event-stream"}
        if stream.cursor is not None:
            headers["last-event-id"] = str(stream.cursor)
        why = "the server ended the stream before the run's end"
        try:
            # httpx leaves its byte streams suspended when a connection breaks mid-body: they
            # are closed as each attempt ends, not whenever the garbage collector gets to them.
            async with (
                closing_abandoned_generators(),
                http.stream(
                    "GET", target.events_url, params={"format": "engine"}, headers=headers
                ) as response,
            ):
                if response.status_code >= 500 and opened:
                    why = f"the server answered {await _refusal(response)}"
                elif response.status_code == 204:
                    raise WatchFailure(
                        EXIT_BAD_STREAM, "the server says the run is over, but its end never came"
                    )
                elif response.status_code != 200:
                    _check_answer(response, await _refusal(response))
                else:
                    kind = response.headers.get("content-type", "")
                    if not kind.startswith("text/event-stream"):
                        raise WatchFailure(
                            EXIT_BAD_STREAM,
                            f"the answer is not an event stream ({clean_text(kind)[:80]})",
                        )
                    opened = True
                    async for chunk in response.aiter_bytes():
                        for _, event in stream.feed(chunk):
                            failures = 0
                            notes = tree.apply(event, trio.current_time())
                            if not screen.live:
                                screen.notes(notes)
                        if tree.outcome is not None:
                            break
        except StreamError as exc:
            raise WatchFailure(EXIT_BAD_STREAM, f"the stream cannot be read: {exc}") from None
        except httpx.TransportError as exc:
            if not opened:
                raise WatchFailure(
                    EXIT_UNREACHABLE, f"cannot reach {target.events_url}: {_said(exc)}"
                ) from None
            why = f"the connection was lost ({_said(exc)})"
        stream.end()
        if tree.outcome is not None:
            break
        failures += 1
        if failures > retries:
            raise WatchFailure(EXIT_UNREACHABLE, f"{why}; gave up after {retries} reconnects")
        after = "the start" if stream.cursor is None else f"event {stream.cursor}"
        print(
            f"{_PROG}: {why}; reconnecting from {after} ({failures}/{retries})",
            file=err,
            flush=True,
        )
        delay = RETRY_DELAY if stream.retry_ms is None else stream.retry_ms / 1000
        await trio.sleep(delay)
    if screen.live:
        screen.draw(tree, trio.current_time())
    nursery.cancel_scope.cancel()


def _said(exc: Exception) -> str:
    return clean_text(str(exc))[:200] or type(exc).__name__


def watch_main(
    url: str,
    *,
    token: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
    force_tty: bool | None = None,
    retries: int = RETRIES,
    transport: httpx.AsyncBaseTransport | None = None,
) -> int:
    """`subagent-engine watch`: the exit status (see the module's docstring). `transport`
    replaces the network (httpx's seam: tests, embedding)."""
    out = out or sys.stdout
    err = err or sys.stderr
    env = os.environ if environ is None else environ
    try:
        target = watch_target(url)
    except BadUrl as exc:
        print(f"{_PROG}: {exc}", file=err)
        return EXIT_CONFIG
    token = token or target.token or env.get(TOKEN_ENV) or None
    if token is None:
        print(
            f"{_PROG}: no viewer token: give --token, a URL with ?token= or #token=, "
            f"or set {TOKEN_ENV}",
            file=err,
        )
        return EXIT_CONFIG
    if not token.isascii() or not token.isprintable() or " " in token or len(token) > 512:
        print(f"{_PROG}: the token is not one a server gives (printable ASCII)", file=err)
        return EXIT_CONFIG
    screen = open_screen(out, env, force_tty)
    try:
        return trio.run(
            lambda: watch_run(target, token, screen, err, retries=retries, transport=transport)
        )
    except BaseException as exc:
        failure = alone(exc)
        if isinstance(failure, WatchFailure):
            print(f"{_PROG}: {failure}", file=err)
            return failure.status
        if isinstance(failure, KeyboardInterrupt):
            print(f"{_PROG}: stopped watching (the run goes on)", file=err)
            return EXIT_INTERRUPTED
        raise
    finally:
        if screen.live:
            screen.write("\x1b[?25h")
