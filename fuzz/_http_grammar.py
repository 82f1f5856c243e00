"""Hostile HTTP/1.1 requests for the listener fuzzer, drawn from a seeded RNG by a small grammar.

This module owns what `fuzz.listeners` sends: one `Probe` per input, the bytes of each write
and what the runner should do after them (read the answers, cut the connection, go silent).
It is sans-IO: it opens no socket and keeps no state between inputs, so input `i` of a seed is
the same probe whenever it is drawn again (given the same `Surface`: port, run ids, tokens).

The grammar starts from requests a listener serves (`Surface.routes`: method, path, the JSON
body the route reads) and breaks one layer at a time, each kind of input a function below:
the request line (RFC 9112 section 3), the header block (section 5: field syntax, obs-fold,
bare CR, size), message framing (section 6: Content-Length against Transfer-Encoding, chunked
coding), the fields our request guard reads (Host, Origin, Authorization, Content-Type,
Last-Event-ID), bodies (size, JSON nesting, numbers and escapes RFC 8259 leaves to the
parser), paths, upgrades (RFC 6455 WebSocket handshakes and frames, h2c and the HTTP/2
connection preface of RFC 9113 section 3.4), pipelining, and the way a connection ends.
"""

from __future__ import annotations

import base64
import json
import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, TypeVar

__all__ = [
    "KINDS",
    "Probe",
    "Request",
    "Route",
    "Surface",
    "draw_probe",
    "regressions",
    "run_input_body",
]

_T = TypeVar("_T")

#: What the runner does once a probe's writes are sent.
READ: Final = "read"  # read the answers (until they are all in, the server closes, or quiet)
HALF_CLOSE: Final = "half-close"  # shut our side for writing (EOF), then read
CUT: Final = "cut"  # close at once, without reading
RESET: Final = "reset"  # close with a TCP reset (SO_LINGER 0)
SILENT_HEAD: Final = "silent-head"  # stay silent mid-head: the server must drop us
SILENT_BODY: Final = "silent-body"  # stay silent mid-body (observed, not judged)

_RUN_INPUT: Final = {"messages": [{"id": "u", "role": "user", "content": "hi"}]}


def run_input_body() -> bytes:
    """The `RunAgentInput` of a normal run: one user message."""
    return json.dumps(_RUN_INPUT).encode()


@dataclass(frozen=True)
class Route:
    """One route of a listener: `{run}` and `{task}` in `path` stand for a known id."""

    method: str
    path: str
    #: The JSON the route reads: "run", "answer", "jsonrpc", "a2a-message", "mcp", or "".
    body: str = ""
    websocket: bool = False
    #: Whether a 2xx answer starts a run (the server admits a bounded number).
    starts_run: bool = False


@dataclass(frozen=True)
class Surface:
    """What the generator knows of one listener."""

    name: str
    port: int
    routes: tuple[Route, ...]
    #: The largest request body the listener reads.
    body_limit: int
    #: The bearer token every call needs (a2a-serve with --token-env), or None.
    bearer: str | None = None
    #: (run id, viewer token) of runs the harness started (serve; the MCP listener's run paths).
    runs: tuple[tuple[str, str], ...] = ()
    #: Ids of A2A tasks the harness started.
    tasks: tuple[str, ...] = ()

    @property
    def authority(self) -> bytes:
        return b"127.0.0.1:%d" % self.port


@dataclass
class Request:
    """One HTTP/1.1 request, encoded by `encode()`: framing headers are added for the body
    unless `framing` is "none" or the headers already frame it."""

    method: bytes
    target: bytes
    version: bytes = b"HTTP/1.1"
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    framing: str = "length"  # "length" | "chunked" | "none"
    line_end: bytes = b"\r\n"

    def encode(self) -> bytes:
        end = self.line_end
        lines = [b"%s %s %s" % (self.method, self.target, self.version)]
        names = {name.lower() for name, _ in self.headers}
        headers = list(self.headers)
        framed = b"content-length" in names or b"transfer-encoding" in names
        if not framed and self.framing == "length" and (self.body or self.method == b"POST"):
            headers.append((b"Content-Length", b"%d" % len(self.body)))
        elif not framed and self.framing == "chunked":
            headers.append((b"Transfer-Encoding", b"chunked"))
        lines += [name + b": " + value for name, value in headers]
        head = end.join(lines) + end + end
        body = _chunked(self.body) if self.framing == "chunked" else self.body
        return head + body


@dataclass(frozen=True)
class Probe:
    """One fuzz input: what to write, and what to expect of the answers."""

    kind: str
    writes: tuple[bytes, ...]
    #: Methods of the complete requests written, in order (HEAD answers carry no body).
    methods: tuple[bytes, ...] = ()
    #: Requests the server should answer; 0 when the bytes are garbage (read until it closes).
    answers: int = 1
    then: str = READ
    #: Bytes to send once the server switched protocols (101): WebSocket frames, HTTP/2 frames.
    after_upgrade: bytes = b""
    #: True when a 2xx answer may have started a run.
    may_start_run: bool = False

    @property
    def size(self) -> int:
        return sum(len(write) for write in self.writes) + len(self.after_upgrade)


# --- vocabulary ------------------------------------------------------------------------------

METHODS: Final = (b"GET", b"POST", b"HEAD", b"OPTIONS", b"TRACE", b"CONNECT", b"PUT", b"DELETE")
ODD_METHODS: Final = (
    b"PATCH",
    b"PROPFIND",
    b"get",
    b"G\x00T",
    b"GE T",
    b"\xc3\xa9GET",
    b"M" * 300,
    b"",
    b"GET\t",
    b"BREW",
    b"PRI",
    b"post",
    b"-",
)
VERSIONS: Final = (
    b"HTTP/1.0",
    b"HTTP/1.2",
    b"HTTP/2.0",
    b"HTTP/3",
    b"HTTP/9.9",
    b"HTTP/1.10",
    b"HTTP/01.1",
    b"HTTP/1",
    b"http/1.1",
    b"HTTP/1.1 extra",
    b"HTTPS/1.1",
    b"HTTP/-1.1",
    b"HTTP/1.1\x00",
    b"HTTP/" + b"9" * 500 + b".1",
    b"",
)
#: Field values that are hard to parse or to echo (RFC 9110 section 5.5 allows obs-text).
ODD_VALUES: Final = (
    b"",
    b" ",
    b"\x00",
    b"a\x00b",
    b"a\rb",
    b"a\nb",
    b"\x7f",
    b"\xff\xfe",
    "café".encode(),
    "日本語".encode(),
    "é".encode("latin-1"),
    b"\xed\xa0\x80",  # a surrogate in UTF-8 form
    b"\xc0\xaf",  # overlong "/"
    b"\t\t",
    b";,;,",
    b'"',
    b"%00",
    b"x" * 4000,
)
ODD_NAMES: Final = (
    b"X Space",
    b"X\x00Null",
    b"",
    b" X-Leading",
    b"X-Trailing ",
    "Ñame".encode(),
    b"X:Colon",
    b"(\x01)",
    b"X\tTab",
    b"Content-Length ",  # whitespace before the colon: RFC 9112 section 5.1 says reject
    b"Host ",
    b"Transfer-Encoding ",
)
ODD_HOSTS: Final = (
    b"evil.example",
    b"evil.example:80",
    b"localhost.evil.example",
    b"127.0.0.1.nip.io",
    b"0x7f000001",
    b"2130706433",
    b"127.1",
    b"[::1]",
    b"[::ffff:127.0.0.1]",
    b"LOCALHOST",
    b"localhost.",
    b"",
    b" ",
    b"user@127.0.0.1",
    b"127.0.0.1/path",
    b"127.0.0.1:99999",
    b"127.0.0.1:-1",
    b"[127.0.0.1]",
    b"[::1",
    "l\u043ecalhost".encode(),  # a Cyrillic o
    b"xn--lcalhost-9wg",
    b"a" * 300,
)
ODD_ORIGINS: Final = (
    b"http://evil.example",
    b"https://evil.example",
    b"null",
    b"http://127.0.0.1",  # no port: another origin than 127.0.0.1:PORT
    b"http://localhost:1",
    b"file://",
    b"chrome-extension://abc",
    b"http://127.0.0.1:%d.evil.example",
    b"*",
    b"",
    b"http://[::1]",
    "http://é.example".encode(),
    b"http://127.0.0.1:%d",  # the listener's own origin
    b"HTTP://127.0.0.1:%d",
)
#: Transfer-Encoding values that are not exactly "chunked" (RFC 9112 section 6.1).
ODD_TRANSFER_CODINGS: Final = (
    b"gzip, chunked",
    b"chunked, gzip",
    b"identity",
    b"chunked ",
    b" chunked",
    b"CHUNKED",
    b"xchunked",
    b"chunked;q=1",
    b"chunked\x00",
)
#: Content-Length values that are not 1*DIGIT (RFC 9110 section 8.6), or too large for 64 bits.
ODD_LENGTHS: Final = (
    b"-1",
    b"+5",
    b"0x10",
    b"1e3",
    b"18446744073709551617",
    b"99999999999999999999999",
    b" 5 ",
    b"5 5",
    b"",
    "\u0661".encode(),  # an Arabic-Indic one
)
CONTENT_TYPES: Final = (
    b"application/json",
    b"application/json; charset=utf-8",
    b"application/json; charset=latin-1",
    b"APPLICATION/JSON",
    b"application/vnd.a2a+json",
    b"application/merge-patch+json",
    b"text/plain",
    b"text/plain; charset=utf-8",
    b"application/x-www-form-urlencoded",
    b"multipart/form-data; boundary=xyz",
    b"multipart/form-data",
    b"application/octet-stream",
    b"text/html",
    b"application/jsonx",
    b"json",
    b"",
    b"application/json\x00",
    b"*/*",
)
#: Cursor values for Last-Event-ID and ?after= (only ASCII digits are cursors).
CURSORS: Final = (
    "0",
    "1",
    "3",
    "-1",
    "+1",
    " 1",
    "1 ",
    "1.0",
    "0x10",
    "1e3",
    "¹",
    "²³",
    "١٢",  # Arabic-Indic digits: str.isdigit() and int() accept them
    "\uff11\uff12",  # fullwidth digits
    "9" * 18,
    "9" * 19,
    "9" * 5000,
    str(2**63),
    str(2**64 + 1),
    "",
    "null",
    "\x00",
    "1\x001",
)
JSONRPC_METHODS: Final = (
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "CancelTask",
    "SubscribeToTask",
    "ListTasks",
    "GetExtendedAgentCard",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "message/send",
    "tasks/get",
    "",
    "nope",
    "__proto__",
)
MCP_METHODS: Final = (
    "initialize",
    "tools/list",
    "tools/call",
    "notifications/initialized",
    "notifications/cancelled",
    "ping",
    "resources/list",
)


def _pick(rng: random.Random, items: Sequence[_T]) -> _T:
    return items[rng.randrange(len(items))]


def _chunked(body: bytes, size: int = 4096) -> bytes:
    pieces = [
        b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size])
        for i in range(0, len(body), size)
    ]
    return b"".join(pieces) + b"0\r\n\r\n"


# --- JSON bodies -------------------------------------------------------------------------------

#: Strings that are hard to carry: escapes a UTF-8 encoder cannot write, controls, bidi, long.
_NASTY_STRINGS: Final = (
    "",
    " ",
    "\x00",
    "\ud800",
    "\udfff",
    "a\ud83db",
    "\u202e",
    "\ufeff",
    "😀" * 10,
    "../../etc/passwd",
    "<script>",
    "x" * 70_000,
    "%s%n",
    "\\",
    "\n\r",
)


def _nasty_value(rng: random.Random, depth: int = 0) -> object:
    roll = rng.randrange(10)
    if roll == 0 and depth < 3:
        return [_nasty_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    if roll == 1 and depth < 3:
        return {_pick(rng, ("a", "", "\ud800", "id")): _nasty_value(rng, depth + 1)}
    if roll == 2:
        return _pick(rng, (0, -1, 2**63, -(2**63) - 1, 1.5, 10**30))
    if roll == 3:
        return _pick(rng, (None, True, False))
    return _pick(rng, _NASTY_STRINGS)


def _dumps(document: object) -> bytes:
    # ensure_ascii keeps lone surrogates as \\ud800 escapes, as a peer would send them.
    return json.dumps(document, ensure_ascii=True).encode()


def _message(rng: random.Random) -> dict[str, object]:
    message: dict[str, object] = {
        "messageId": _pick(rng, ("m-1", "", "\ud800", "x" * 300)),
        "role": _pick(rng, ("ROLE_USER", "ROLE_AGENT", "user", "", 7)),
        "parts": _pick(
            rng,
            (
                [{"text": "hello"}],
                [],
                [{"text": _nasty_value(rng)}],
                [{"data": {"a": _nasty_value(rng)}}],
                [{"url": "file:///etc/passwd", "mediaType": "text/plain"}],
                [{"raw": "AAAA", "filename": "x.bin"}],
                [{"text": "a"}] * 50,
                [{}],
                "text",
            ),
        ),
    }
    if rng.random() < 0.3:
        message[_pick(rng, ("contextId", "taskId", "metadata", "extensions", "unknown"))] = (
            _nasty_value(rng)
        )
    return message


def _route_document(rng: random.Random, route: Route, surface: Surface) -> object:
    """A document the route reads: mostly well formed, with one field made odd now and then."""
    kind = route.body
    if kind == "run":
        document: dict[str, object] = json.loads(json.dumps(_RUN_INPUT))
        if rng.random() < 0.5:
            name = _pick(rng, ("threadId", "runId", "forwardedProps", "messages", "state", "tools"))
            document[name] = _pick(
                rng,
                (
                    _nasty_value(rng),
                    {"mode": _pick(rng, ("hidden", "custom", "loud", "", 1))},
                    [{"role": "user", "content": [{"text": "hi"}, 3, None]}],
                    [{"role": "user", "content": "x" * (64 * 1024 + 1)}],
                    "t" * 129,
                ),
            )
        return document
    if kind == "answer":
        document = {"delegationId": _pick(rng, ("d-1", "", "x" * 201)), "text": "yes"}
        if rng.random() < 0.5:
            document[_pick(rng, ("text", "data", "delegationId", "extra"))] = _nasty_value(rng)
        return document
    if kind == "jsonrpc":
        task = _pick(rng, surface.tasks) if surface.tasks and rng.random() < 0.7 else "nope"
        params = _pick(
            rng,
            (
                {"message": _message(rng)},
                {"message": _message(rng), "configuration": {"historyLength": -1}},
                {"message": _message(rng), "configuration": {"returnImmediately": True}},
                {"id": task},
                {"id": task, "historyLength": _pick(rng, (-1, 0, 2**40, "1"))},
                {"taskId": task},
                {},
                [],
                None,
                _nasty_value(rng),
            ),
        )
        document = {
            "jsonrpc": _pick(rng, ("2.0", "2.0", "2.0", "1.0", 2, None)),
            "id": _pick(rng, (1, "a", None, 1.5, {"x": 1}, [], 2**70)),
            "method": _pick(rng, JSONRPC_METHODS),
            "params": params,
        }
        if rng.random() < 0.1:
            del document[_pick(rng, ("jsonrpc", "id", "method", "params"))]
        return document
    if kind == "a2a-message":
        document = {"message": _message(rng)}
        if rng.random() < 0.3:
            document["configuration"] = {
                _pick(rng, ("historyLength", "acceptedOutputModes", "blocking")): (
                    _nasty_value(rng)
                )
            }
        return document
    if kind == "mcp":
        method = _pick(rng, MCP_METHODS)
        return {
            "jsonrpc": "2.0",
            "id": 1,
            "method": method,
            "params": {
                "name": "delegate_to_agent",
                "arguments": {"agent": "research", "objective": _nasty_value(rng)},
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "fuzz", "version": "0"},
            },
        }
    return _nasty_value(rng)


def _deep(rng: random.Random) -> bytes:
    levels = _pick(rng, (33, 1000, 100_000))
    if rng.random() < 0.5:
        return b"[" * levels + b"]" * (levels if rng.random() < 0.5 else 0)
    return b'{"a":' * levels + b"1" + b"}" * (levels if rng.random() < 0.5 else 0)


def _odd_json(rng: random.Random, base: bytes) -> bytes:
    """A body that stresses the JSON reader: RFC 8259 leaves numbers' range and what an
    escaped lone surrogate means to the parser (sections 6 and 8.2)."""
    choices: tuple[Callable[[], bytes], ...] = (
        lambda: _deep(rng),
        lambda: base.replace(b'"hi"', b'"\\ud800"').replace(b'"m-1"', b'"\\udc00x"'),
        lambda: b'{"messages": NaN}',
        lambda: b'{"a": Infinity, "b": -Infinity}',
        lambda: b'{"a": 1e999999}',
        lambda: b'{"a": ' + b"9" * rng.choice((4300, 4301, 50_000)) + b"}",
        lambda: b'{"a": -0, "a": 1}',
        lambda: b"\xef\xbb\xbf" + base,  # a BOM, which RFC 8259 section 8.1 says not to add
        lambda: base[: rng.randrange(len(base) + 1)],
        lambda: base + b" trailing",
        lambda: base + base,
        lambda: b"\xff\xfe" + base,
        lambda: base.replace(b'"hi"', b'"\xed\xa0\x80"'),
        lambda: base.replace(b'"hi"', b'"\xc3"'),
        lambda: b"",
        lambda: b"   \r\n ",
        lambda: b"null",
        lambda: b"[]",
        lambda: b'"just a string"',
        lambda: b"1",
        lambda: b'{"\\u0000": "\\u0000"}',
        lambda: b"{" + b",".join(b'"k%d":%d' % (i, i) for i in range(20_000)) + b"}",
        lambda: b"[" + b",".join([b"{}"] * 50_000) + b"]",
        lambda: b'{"a": "' + b"\\u" * 10 + b'"}',
        lambda: b'{"a": "\\uD800\\uD800\\uDFFF"}',
    )
    return _pick(rng, choices)()


def _json_body(rng: random.Random, route: Route, surface: Surface, allow_runs: bool) -> bytes:
    base = _dumps(_route_document(rng, route, surface))
    body = base if rng.random() < 0.5 else _odd_json(rng, base)
    if route.starts_run and not allow_runs:
        body = _no_run(body)
    return body


def _no_run(body: bytes) -> bytes:
    """A body that cannot start a run: anything but a JSON object is refused (400). Read as
    the server reads it: invalid UTF-8 becomes U+FFFD rather than a refusal."""
    try:
        document = json.loads(body.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return body
    return b"[" + body + b"]" if isinstance(document, dict) else body


# --- requests ------------------------------------------------------------------------------------


def _path(rng: random.Random, route: Route, surface: Surface) -> bytes:
    run_id, token = _pick(rng, surface.runs) if surface.runs else ("run-nope", "t")
    if rng.random() < 0.15:
        run_id = _pick(rng, ("run-nope", "", "..", "run-" + "a" * 300, "%2e%2e", "run-ä"))
    task = _pick(rng, surface.tasks) if surface.tasks and rng.random() < 0.8 else "nope"
    path = route.path.replace("{run}", run_id).replace("{task}", task)
    query: list[str] = []
    if "/events" in path or "/ws" in path:
        if rng.random() < 0.8:
            query.append(
                f"token={token if rng.random() < 0.8 else _pick(rng, ('', 'x', token.upper()))}"
            )
        if rng.random() < 0.3:
            query.append(f"after={_pick(rng, CURSORS)}")
        if rng.random() < 0.2:
            query.append(f"mode={_pick(rng, ('hidden', 'custom', 'inline', 'loud', ''))}")
        if rng.random() < 0.2:
            query.append(f"format={_pick(rng, ('engine', 'agui', 'xml', ''))}")
    elif route.starts_run and rng.random() < 0.1:
        query.append(f"mode={_pick(rng, ('hidden', 'loud'))}")
    target = path + ("?" + "&".join(query) if query else "")
    return target.encode("utf-8", "surrogatepass")


def _headers(
    rng: random.Random, surface: Surface, *, body: bool, route: Route | None = None
) -> list[tuple[bytes, bytes]]:
    headers = [(b"Host", surface.authority)]
    if body:
        headers.append((b"Content-Type", b"application/json"))
    if surface.bearer is not None and rng.random() < 0.85:
        headers.append((b"Authorization", b"Bearer " + surface.bearer.encode()))
    elif surface.runs and route is not None and "{run}" in route.path and rng.random() < 0.5:
        headers.append((b"Authorization", b"Bearer " + _pick(rng, surface.runs)[1].encode()))
    if surface.name == "a2a-serve" and rng.random() < 0.9:
        headers.append((b"A2A-Version", _pick(rng, (b"1.0", b"1.0", b"0.3", b"", b"2"))))
    if route is not None and route.body == "mcp":
        headers.append((b"Accept", b"application/json, text/event-stream"))
    if rng.random() < 0.1:
        headers.append((b"Connection", _pick(rng, (b"close", b"keep-alive", b"upgrade"))))
    return headers


def _request(
    rng: random.Random, surface: Surface, allow_runs: bool, route: Route | None = None
) -> tuple[Request, Route]:
    """A request a route would serve (its own method, its JSON, the right Host)."""
    route = route or _pick(rng, surface.routes)
    body = b""
    if route.method == "POST":
        body = _json_body(rng, route, surface, allow_runs) if route.body else b""
    request = Request(
        method=route.method.encode(),
        target=_path(rng, route, surface),
        headers=_headers(rng, surface, body=bool(body) or route.method == "POST", route=route),
        body=body,
    )
    return request, route


def _probe(
    kind: str, request: Request, route: Route | None = None, *, then: str = READ, answers: int = 1
) -> Probe:
    return Probe(
        kind=kind,
        writes=(request.encode(),),
        methods=(request.method,),
        answers=answers,
        then=then,
        may_start_run=bool(route and route.starts_run and request.method == b"POST"),
    )


def _set_header(request: Request, name: bytes, value: bytes) -> None:
    request.headers = [(n, v) for n, v in request.headers if n.lower() != name.lower()]
    request.headers.append((name, value))


# --- the kinds of input --------------------------------------------------------------------------


def plain(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """A request a route serves, sometimes with the method of another route."""
    request, route = _request(rng, surface, allow_runs)
    if rng.random() < 0.3:
        request.method = _pick(rng, METHODS)
        if request.method == b"CONNECT":
            request.target = _pick(rng, (surface.authority, request.target))
    return _probe("plain", request, route)


def request_line(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """RFC 9112 section 3: method SP request-target SP HTTP-version, and everything else."""
    request, route = _request(rng, surface, allow_runs)
    host = b"Host: " + surface.authority
    roll = rng.randrange(12)
    if roll == 0:
        request.method = _pick(rng, ODD_METHODS)
    elif roll == 1:
        request.version = _pick(rng, VERSIONS)
    elif roll == 2:  # HTTP/0.9: a simple request; to HTTP/1.1 it is a head that never ends
        return Probe("http/0.9", (b"GET " + request.target + b"\r\n",), then=SILENT_HEAD)
    elif roll == 3:  # the HTTP/2 connection preface (RFC 9113 section 3.4), then garbage or frames
        data = H2_PREFACE + _pick(rng, (b"", b"garbage", b"\x00" * 64, b"\r\n\r\n"))
        return Probe("h2-preface", (data,), answers=0)
    elif roll == 4:
        request.target = _pick(
            rng,
            (
                b"*",
                b"http://evil.example" + request.target,
                b"http://" + surface.authority + request.target,
                b"//" + request.target,
                surface.authority,
                b"",
                b"/a b",
                b"/\x00",
                request.target + b"#frag",
            ),
        )
    elif roll == 5:
        line = b"%s  %s  %s" % (request.method, request.target, request.version)
        return Probe("request-line", (line + b"\r\n" + host + b"\r\n\r\n",), answers=1)
    elif roll == 6:
        request.line_end = b"\n"
    elif roll == 7:
        line = request.method + b" " + request.target
        return Probe("request-line", (line + b"\r\n" + host + b"\r\n\r\n",), answers=1)
    elif roll == 8:  # leading empty lines (RFC 9112 section 2.2 says ignore at least one)
        return Probe("request-line", (b"\r\n" * rng.randrange(1, 5) + request.encode(),))
    elif roll == 9:
        return Probe("request-line", (b"\t" + request.encode(),), answers=1)
    elif roll == 10:
        request.method = b"CONNECT"
        request.target = _pick(rng, (surface.authority, b"evil.example:443", b"/", b"[::1]:1"))
    else:
        request.method = _pick(rng, (b"TRACE", b"OPTIONS", b"HEAD", b"CONNECT"))
    return _probe("request-line", request, route, answers=1)


def huge_head(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """Beyond the 16 KiB header block: a long target, one long field, many fields."""
    request, route = _request(rng, surface, allow_runs)
    roll = rng.randrange(5)
    if roll == 0:
        request.target = b"/" + b"a" * _pick(rng, (16 * 1024, 70_000, 1 << 20))
    elif roll == 1:
        request.headers.append((b"X-Big", b"v" * _pick(rng, (16 * 1024, 100_000))))
    elif roll == 2:
        count = _pick(rng, (100, 1000, 5000))
        request.headers += [(b"X-H%d" % i, b"v") for i in range(count)]
    elif roll == 3:
        request.headers += [(b"Cookie", b"c=" + b"x" * 1000) for _ in range(20)]
    else:  # just under the limit
        request.headers.append((b"X-Fill", b"f" * (16 * 1024 - 400 - len(request.target))))
    return _probe("huge-head", request, route, answers=1)


def odd_fields(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """RFC 9112 section 5: field names and values with bytes the grammar forbids, bare CR,
    obs-fold (section 5.2), and no colon at all."""
    request, route = _request(rng, surface, allow_runs)
    roll = rng.randrange(6)
    if roll == 0:
        request.headers.insert(
            rng.randrange(len(request.headers) + 1), (_pick(rng, ODD_NAMES), b"v")
        )
    elif roll == 1:
        request.headers.append((b"X-Odd", _pick(rng, ODD_VALUES)))
    elif roll == 2:
        name, value = _pick(rng, request.headers)
        request.headers.append((name, value + b"\r\n " + _pick(rng, (b"folded", b"", b"\t"))))
        request.headers = [(n, v) for n, v in request.headers if (n, v) != (name, value)]
    elif roll == 3:
        request.headers.append((b"X-NoColon" + _pick(rng, (b"", b" value")), b""))
        raw = request.encode().replace(b"X-NoColon: ", b"X-NoColon", 1)
        return Probe("odd-fields", (raw,), answers=1)
    elif roll == 4:
        index = rng.randrange(len(request.headers))
        name, value = request.headers[index]
        request.headers[index] = (
            name,
            _pick(rng, (value + b"\x00", b" " + value + b" ", value + b"\r")),
        )
    else:
        request.headers.append((b"X-Utf8", _pick(rng, ODD_VALUES[8:12])))
        request.headers.append((b"Last-Event-ID", _pick(rng, CURSORS).encode("utf-8")))
    return _probe("odd-fields", request, route, answers=1)


def duplicates(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """Single-valued fields twice (RFC 9110 section 5.3): two parsers may each read one."""
    request, route = _request(rng, surface, allow_runs)
    name = _pick(
        rng,
        (
            b"Host",
            b"Authorization",
            b"Content-Length",
            b"Content-Type",
            b"Origin",
            b"Last-Event-ID",
            b"Transfer-Encoding",
        ),
    )
    values = {
        b"Host": (surface.authority, b"evil.example", b"localhost:%d" % surface.port),
        b"Authorization": (
            b"Bearer " + (surface.bearer or "x").encode(),
            b"Bearer wrong-token-wrong-token",
            b"bearer " + (surface.bearer or "y").encode(),
        ),
        b"Content-Length": (
            b"%d" % len(request.body),
            b"0",
            b"%d" % (len(request.body) + 5),
            b"%d, %d" % (len(request.body), len(request.body)),
        ),
        b"Content-Type": (b"application/json", b"text/plain"),
        b"Origin": (b"http://127.0.0.1:%d" % surface.port, b"http://evil.example"),
        b"Last-Event-ID": (b"1", b"2", "²".encode()),
        b"Transfer-Encoding": (b"chunked", b"identity", b"gzip"),
    }[name]
    for _ in range(rng.randrange(2, 4)):
        request.headers.append(
            (name.swapcase() if rng.random() < 0.3 else name, _pick(rng, values))
        )
    if name == b"Host" and rng.random() < 0.3:
        request.headers = [(n, v) for n, v in request.headers if n.lower() != b"host"]
    # A repeated Content-Length may declare more than is sent (then the server waits).
    return _probe("duplicates", request, route, answers=0 if name == b"Content-Length" else 1)


def framing(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """RFC 9112 section 6: Content-Length against Transfer-Encoding (6.3: a request with both
    must be treated as an error or the length ignored), odd lengths, broken chunked coding."""
    request, route = _request(rng, surface, allow_runs)
    if request.method != b"POST":
        request.method = b"POST"
    body = request.body or b'{"a":1}'
    head = Request(
        request.method, request.target, request.version, list(request.headers), b"", "none"
    )
    roll = rng.randrange(8)
    if roll == 0:  # both: the chunked body disagrees with the length
        head.headers += [
            (b"Content-Length", b"%d" % rng.randrange(0, 50)),
            (b"Transfer-Encoding", b"chunked"),
        ]
        tail = _chunked(body)
    elif roll == 1:
        head.headers.append((b"Transfer-Encoding", _pick(rng, ODD_TRANSFER_CODINGS)))
        tail = _chunked(body)
    elif roll == 2:
        head.headers.append((b"Content-Length", _pick(rng, ODD_LENGTHS)))
        tail = body
    elif roll == 3:  # bad chunk sizes and framing
        head.headers.append((b"Transfer-Encoding", b"chunked"))
        tail = _pick(
            rng,
            (
                b"zz\r\n" + body + b"\r\n0\r\n\r\n",
                b"-5\r\n" + body + b"\r\n0\r\n\r\n",
                b"fffffffffffffffffff\r\n" + body,
                b"%x\r\n%s0\r\n\r\n" % (len(body), body),  # no CRLF after the data
                b"%x;ext=\x00\r\n%s\r\n0\r\n\r\n" % (len(body), body),
                b"%x\n%s\n0\n\n" % (len(body), body),
                b"%x\r\n%s\r\n0\r\nX-Trailer: t\r\nHost: evil\r\n\r\n" % (len(body), body),
                b"1\r\n{\r\n" * 2000 + b"0\r\n\r\n",
                b"0x%x\r\n%s\r\n0\r\n\r\n" % (len(body), body),
                b"%x \r\n%s\r\n0\r\n\r\n" % (len(body), body),
                b"%X\r\n%s\r\n0\r\n\r\n" % (len(body), body),
                b"0\r\n\r\n" + b"garbage",
                b"%x;" % len(body) + b"e" * 20_000 + b"\r\n" + body + b"\r\n0\r\n\r\n",
            ),
        )
    elif roll == 4:  # a declared length longer than what follows: then we go quiet
        head.headers.append((b"Content-Length", b"%d" % (len(body) + rng.randrange(1, 1000))))
        return Probe("framing", (head.encode() + body,), answers=0, then=SILENT_BODY)
    elif roll == 5:  # shorter than what follows: the rest is read as the next request
        head.headers.append((b"Content-Length", b"%d" % rng.randrange(0, len(body))))
        tail = body
    elif roll == 6:  # a body on a GET
        head.method = b"GET"
        head.headers.append((b"Content-Length", b"%d" % len(body)))
        tail = body
        return Probe("framing", (head.encode() + tail,), methods=(b"GET",), answers=1)
    else:  # chunked on HTTP/1.0 (RFC 9112 section 6.1: not for 1.0)
        head.version = b"HTTP/1.0"
        head.headers.append((b"Transfer-Encoding", b"chunked"))
        tail = _chunked(body)
    return Probe(
        "framing", (head.encode() + tail,), answers=0, may_start_run=route.starts_run and allow_runs
    )


def expect_continue(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """RFC 9110 section 10.1.1: Expect: 100-continue, with the body at once, later, or never."""
    request, route = _request(rng, surface, allow_runs)
    request.method = b"POST"
    if not request.body:
        request.body = _json_body(rng, route, surface, allow_runs) if route.body else b"{}"
    request.headers.append(
        (b"Expect", _pick(rng, (b"100-continue", b"100-Continue", b"200-ok", b"")))
    )
    encoded = request.encode()
    head, _, body = encoded.partition(b"\r\n\r\n")
    roll = rng.randrange(3)
    if roll == 0:
        return Probe("expect", (encoded,), methods=(b"POST",), may_start_run=route.starts_run)
    if roll == 1:
        return Probe(
            "expect", (head + b"\r\n\r\n", body), methods=(b"POST",), may_start_run=route.starts_run
        )
    return Probe("expect", (head + b"\r\n\r\n",), answers=0, then=SILENT_BODY if body else READ)


def guard_fields(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """What the request guard reads: Host (DNS rebinding), Origin (cross-site pages),
    Content-Type (cross-site simple requests), and bearer credentials (RFC 6750)."""
    request, route = _request(rng, surface, allow_runs)
    roll = rng.randrange(4)
    if roll == 0:
        _set_header(request, b"Host", _pick(rng, ODD_HOSTS))
    elif roll == 1:
        origin = _pick(rng, ODD_ORIGINS)
        request.headers.append((b"Origin", origin.replace(b"%d", b"%d" % surface.port)))
    elif roll == 2:
        request.method = b"POST"
        if not request.body:
            request.body = b"a=1&b=2" if rng.random() < 0.5 else b"{}"
        _set_header(request, b"Content-Type", _pick(rng, CONTENT_TYPES))
        if route.starts_run and not allow_runs:
            request.body = _no_run(request.body)
    else:
        token = surface.bearer or (surface.runs[0][1] if surface.runs else "t" * 43)
        _set_header(
            request,
            b"Authorization",
            _pick(
                rng,
                (
                    b"Bearer " + token.lower().encode(),
                    b"Bearer " + token.upper().encode(),
                    b"bearer " + token.encode(),
                    b"BEARER  " + token.encode(),
                    b"Bearer",
                    b"Bearer ",
                    b"Bearer " + token.encode() + b" extra",
                    b"Bearer " + token[:-1].encode(),
                    b"Basic " + base64.b64encode(b"u:" + token.encode()),
                    b"Bearer \xff\xfe",
                    b"Bearer " + "é".encode() * 20,
                    b"Bearer " + b"A" * 10_000,
                    b"Bearer " + token.encode() + b"\x00",
                    b"Bearer a=b=c",
                    b"Bearer =",
                ),
            ),
        )
    return _probe("guard", request, route)


def cursors(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """Stream cursors: only ASCII digits are cursors; `int()` also takes other digits."""
    streams = [r for r in surface.routes if "/events" in r.path or r.path.endswith("/tasks/{task}")]
    route = _pick(rng, streams or list(surface.routes))
    request, _ = _request(rng, surface, allow_runs, route)
    value = _pick(rng, CURSORS).encode("utf-8")
    if rng.random() < 0.5:
        request.headers.append((b"Last-Event-ID", value))
    else:
        sep = b"&" if b"?" in request.target else b"?"
        request.target += (
            sep + b"after=" + value + (b"&historyLength=" + value if rng.random() < 0.3 else b"")
        )
    return _probe("cursor", request, route)


def odd_paths(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """Targets: long, encoded slashes and dots, NUL, raw non-ASCII, static-looking paths."""
    request, route = _request(rng, surface, allow_runs)
    request.target = _pick(
        rng,
        (
            b"/" + b"a" * 5000,
            b"/runs/" + b"x" * 5000 + b"/events",
            b"/runs%2f" + request.target.lstrip(b"/"),
            b"/runs/..%2f..%2fetc%2fpasswd/events",
            b"/static/../../etc/passwd",
            b"/static/%2e%2e/%2e%2e/etc/passwd",
            b"/static/index.html",
            b"/./healthz",
            b"//healthz",
            b"/healthz/",
            b"/HEALTHZ",
            b"/healthz%00",
            b"/%ff%fe",
            b"/\xc3\xa9",
            b"/\xff",
            b"/healthz?" + b"&".join(b"a%d=%d" % (i, i) for i in range(5000)),
            b"/healthz?%",
            b"/healthz?a=%zz",
            b"/runs/%F0%9F%98%80/events",
            b"\\healthz",
            b"/a2a/rest/tasks/%2e%2e",
            b"/a2a/rest/" + b"t/" * 2000,
            b"/.well-known/agent-card.json/..",
            b"/.well-known/agent-card.json?x=" + b"y" * 8000,
            b"/a2a/rest/message:send/extra",
            b"/a2a/rest/tenant/message:send",
            b"/runs/run-x/mcp/../../healthz",
            b"/runs/%00/mcp",
            request.target + b"%",
            request.target.replace(b"/", b"%2F"),
        ),
    )
    if rng.random() < 0.3:
        request.method = _pick(rng, METHODS)
    if route.starts_run and not allow_runs:
        request.body = _no_run(request.body)
        _set_header(request, b"Content-Length", b"%d" % len(request.body))
    return _probe("path", request, route)


def methods(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """HEAD, OPTIONS, TRACE, CONNECT and others on every route."""
    request, route = _request(rng, surface, allow_runs)
    request.method = _pick(rng, METHODS + ODD_METHODS[:3])
    if request.method in (b"GET", b"HEAD", b"OPTIONS", b"TRACE") and rng.random() < 0.7:
        request.body = b""
        request.headers = [(n, v) for n, v in request.headers if n.lower() != b"content-type"]
    if request.method == b"TRACE":
        request.headers.append((b"Max-Forwards", b"0"))
    if request.method == b"OPTIONS":
        request.headers += [
            (b"Origin", b"http://evil.example"),
            (b"Access-Control-Request-Method", b"POST"),
        ]
    if route.starts_run and not allow_runs:
        request.body = _no_run(request.body)
    return _probe("method", request, route)


def huge_body(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """Bodies over (and at) the listener's limit, by Content-Length or chunked, JSON or not."""
    posts = [r for r in surface.routes if r.method == "POST"] or list(surface.routes)
    route = _pick(rng, posts)
    request, _ = _request(rng, surface, allow_runs, route)
    request.method = b"POST"
    size = _pick(
        rng,
        (
            surface.body_limit + 1,
            surface.body_limit + 4096,
            surface.body_limit - 64,
            2 * surface.body_limit,
        ),
    )
    filler = _pick(rng, (b" ", b"a", b"\xff"))
    shape = rng.randrange(3)
    if shape == 0:
        body = b'{"messages":[{"id":"u","role":"user","content":"' + filler * size + b'"}]}'
    elif shape == 1:
        body = b"[" + b"1," * (size // 2) + b"1]"
    else:
        body = b" " * size + b"{}"
    if route.starts_run and not allow_runs:
        body = b"[" + body + b"]"
    request.body = body
    request.framing = _pick(rng, ("length", "chunked"))
    if rng.random() < 0.3:  # declare it, send nothing: the server may refuse before reading
        request.headers.append((b"Content-Length", b"%d" % size))
        head = request.encode().split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
        # Over the limit it is refused before a byte of it is read; under it, the server waits.
        then = READ if size > surface.body_limit else SILENT_BODY
        return Probe("huge-body", (head,), methods=(b"POST",), then=then)
    return _probe("huge-body", request, route)


def json_bodies(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """The route's JSON made hostile: deep, lone surrogates, NaN, huge numbers, broken UTF-8."""
    posts = [r for r in surface.routes if r.body] or list(surface.routes)
    route = _pick(rng, posts)
    request, _ = _request(rng, surface, allow_runs, route)
    request.method = b"POST"
    request.body = _odd_json(rng, _dumps(_route_document(rng, route, surface)))
    if route.starts_run and not allow_runs:
        request.body = _no_run(request.body)
    if rng.random() < 0.2:
        _set_header(request, b"Content-Type", _pick(rng, CONTENT_TYPES))
    if rng.random() < 0.2:
        request.framing = "chunked"
    return _probe("json", request, route)


# --- upgrades --------------------------------------------------------------------------------

H2_PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_WS_KEY: Final = b"dGhlIHNhbXBsZSBub25jZQ=="


def ws_frame(
    opcode: int, payload: bytes, *, fin: bool = True, mask: bool = True, length: int | None = None
) -> bytes:
    """One RFC 6455 section 5.2 frame (a client's frames are masked)."""
    first = (0x80 if fin else 0) | (opcode & 0x0F)
    size = len(payload) if length is None else length
    if size < 126:
        head = bytes([first, (0x80 if mask else 0) | size])
    elif size < 1 << 16:
        head = bytes([first, (0x80 if mask else 0) | 126]) + struct.pack("!H", size)
    else:
        head = bytes([first, (0x80 if mask else 0) | 127]) + struct.pack("!Q", size)
    if not mask:
        return head + payload
    key = b"\x01\x02\x03\x04"
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def _ws_frames(rng: random.Random) -> bytes:
    frames: tuple[Callable[[], bytes], ...] = (
        lambda: ws_frame(0x1, b"hello"),
        lambda: ws_frame(0x1, b"\xff\xfe"),  # invalid UTF-8: close 1007
        lambda: ws_frame(0x1, b"hello", mask=False),  # unmasked: close 1002
        lambda: ws_frame(0x2, b"\x00" * 70_000),  # over the 64 KiB message bound: 1009
        lambda: ws_frame(0x9, b"ping"),
        lambda: ws_frame(0x9, b"p" * 200),  # a control frame over 125 bytes: 1002
        lambda: ws_frame(0x8, struct.pack("!H", 1000)),
        lambda: ws_frame(0x8, struct.pack("!H", 999) + b"\xff"),  # bad code, bad reason
        lambda: ws_frame(0x8, b"x"),
        lambda: ws_frame(0x3, b"reserved opcode"),
        lambda: ws_frame(0x1, b"frag", fin=False) + ws_frame(0x0, b"ment"),
        lambda: ws_frame(0x0, b"continuation without a start"),
        lambda: ws_frame(0x1, b"x", length=1 << 62)[:14],  # an absurd length, then nothing
        lambda: b"".join(ws_frame(0x1, b"m%d" % i) for i in range(40)),  # over the burst
        lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))),
        lambda: b"GET / HTTP/1.1\r\n\r\n",
    )
    return b"".join(_pick(rng, frames)() for _ in range(rng.randrange(1, 4)))


def websocket(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """RFC 6455 section 4.1 handshakes, valid and broken, to every path; frames in the same
    write as the handshake or after the 101."""
    ws_routes = [r for r in surface.routes if r.websocket]
    route = (
        _pick(rng, ws_routes) if ws_routes and rng.random() < 0.6 else _pick(rng, surface.routes)
    )
    request, _ = _request(rng, surface, False, route)
    request.method = b"GET"
    request.body = b""
    request.headers = [
        (n, v) for n, v in request.headers if n.lower() not in (b"content-type", b"content-length")
    ]
    fields = [
        (b"Upgrade", b"websocket"),
        (b"Connection", b"Upgrade"),
        (b"Sec-WebSocket-Key", _WS_KEY),
        (b"Sec-WebSocket-Version", b"13"),
    ]
    if rng.random() < 0.4:  # break one of them
        index = rng.randrange(len(fields))
        name, _ = fields[index]
        broken = {
            b"Upgrade": (b"WebSocket", b"websocket, h2c", b"", b"websockets"),
            b"Connection": (b"keep-alive, Upgrade", b"close", b"", b"upgrade"),
            b"Sec-WebSocket-Key": (b"", b"short", b"!" * 24, _WS_KEY + _WS_KEY),
            b"Sec-WebSocket-Version": (b"8", b"", b"13, 8", b"99999999999999999999"),
        }[name]
        replacement = _pick(rng, (*broken, None))
        if replacement is None:
            del fields[index]
        else:
            fields[index] = (name, replacement)
    if rng.random() < 0.2:
        fields.append((b"Sec-WebSocket-Protocol", _pick(rng, (b"chat", b"", b"\xff", b"a, a"))))
    if rng.random() < 0.2:
        fields.append(
            (
                b"Origin",
                _pick(
                    rng, (b"http://evil.example", b"http://127.0.0.1:%d" % surface.port, b"null")
                ),
            )
        )
    if rng.random() < 0.2:
        request.method = _pick(rng, (b"POST", b"HEAD", b"OPTIONS"))
    if rng.random() < 0.1:
        request.version = b"HTTP/1.0"
    request.headers += fields
    head = request.encode()
    if request.method == b"POST" and rng.random() < 0.5:
        head = head.replace(b"Content-Length: 0", b"Content-Length: 5") + b"hello"
    frames = _ws_frames(rng)
    roll = rng.randrange(3)
    if roll == 0:  # frame or body bytes in the same write as the handshake
        return Probe("websocket", (head + frames,), methods=(request.method,), answers=1)
    if roll == 1:
        return Probe("websocket", (head,), methods=(request.method,), after_upgrade=frames)
    return Probe("websocket", (head,), methods=(request.method,))


def h2_client_frames(rng: random.Random, surface: Surface) -> bytes:
    """An HTTP/2 client's first bytes: the preface, SETTINGS and one request (RFC 9113), built
    with the h2 library, sometimes corrupted."""
    import h2.config
    import h2.connection

    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    route = _pick(rng, surface.routes)
    path = _path(rng, route, surface)
    headers = [
        (b":method", route.method.encode()),
        (b":path", path),
        (b":scheme", b"http"),
        (b":authority", surface.authority),
    ]
    if surface.bearer is not None:
        headers.append((b"authorization", b"Bearer " + surface.bearer.encode()))
    body = run_input_body() if route.method == "POST" and not route.starts_run else b"[]"
    if route.method == "POST":
        headers.append((b"content-type", b"application/json"))
    try:
        connection.send_headers(1, headers, end_stream=route.method != "POST")
        if route.method == "POST":
            connection.send_data(1, body, end_stream=True)
    except Exception:  # an h2 refusal of our own headers: send the preface alone
        pass
    data = connection.data_to_send()
    if rng.random() < 0.3 and data:
        position = rng.randrange(len(data))
        data = data[:position] + bytes([rng.randrange(256)]) + data[position + 1 :]
    return data


def h2c(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """`Upgrade: h2c` (RFC 7540 section 3.2, removed by RFC 9113 but still served by some),
    with the HTTP/2 preface after it in the same write or not at all."""
    request, _ = _request(rng, surface, False)
    request.method = b"GET" if rng.random() < 0.7 else request.method
    if request.method == b"GET":
        request.body = b""
    settings = base64.urlsafe_b64encode(b"\x00\x03\x00\x00\x00\x64").rstrip(b"=")
    request.headers += [
        (b"Connection", _pick(rng, (b"Upgrade, HTTP2-Settings", b"Upgrade", b"HTTP2-Settings"))),
        (b"Upgrade", _pick(rng, (b"h2c", b"h2c", b"h2", b"h2c, websocket"))),
        (b"HTTP2-Settings", _pick(rng, (settings, b"", b"!!!", b"A" * 5000))),
    ]
    frames = h2_client_frames(rng, surface) if rng.random() < 0.5 else b""
    if rng.random() < 0.5:
        return Probe("h2c", (request.encode() + frames,), methods=(request.method,))
    return Probe(
        "h2c", (request.encode(),), methods=(request.method,), after_upgrade=frames or H2_PREFACE
    )


def h2_prior_knowledge(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """The HTTP/2 connection preface and frames with no upgrade (RFC 9113 section 3.3)."""
    return Probe("h2", (h2_client_frames(rng, surface),), answers=0)


# --- connections -----------------------------------------------------------------------------


def pipelined(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """Several requests in one write (RFC 9112 section 9.3.2), some of them broken."""
    requests: list[bytes] = []
    sent_methods: list[bytes] = []
    complete = True
    may_start = False
    for _ in range(rng.randrange(2, 7)):
        request, route = _request(rng, surface, allow_runs)
        may_start = may_start or route.starts_run
        if rng.random() < 0.2:
            broken = _pick(
                rng,
                (
                    b"BROKEN\r\n\r\n",
                    request.encode()[: rng.randrange(1, 40)],
                    b"GET / HTTP/1.1\r\nHost: "
                    + surface.authority
                    + b"\r\nContent-Length: x\r\n\r\n",
                ),
            )
            requests.append(broken)
            complete = False
            continue
        if rng.random() < 0.3:
            request.method = b"HEAD" if request.method == b"GET" else request.method
        requests.append(request.encode())
        if complete:
            sent_methods.append(request.method)
    return Probe(
        "pipeline",
        (b"".join(requests),),
        methods=tuple(sent_methods),
        answers=len(sent_methods) if complete else 0,
        may_start_run=may_start and allow_runs,
    )


def endings(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """A connection cut mid-request (FIN or reset), or a peer that writes a few bytes and goes
    silent, mid-head or mid-body."""
    request, _ = _request(rng, surface, allow_runs)
    encoded = request.encode()
    cut_at = rng.randrange(1, len(encoded)) if len(encoded) > 1 else 1
    head_end = encoded.find(b"\r\n\r\n") + 4
    roll = rng.randrange(5)
    if roll == 0:
        return Probe("cut", (encoded[:cut_at],), answers=0, then=CUT)
    if roll == 1:
        return Probe("reset", (encoded[:cut_at],), answers=0, then=RESET)
    if roll == 2:
        return Probe("half-close", (encoded[:cut_at],), answers=0, then=HALF_CLOSE)
    if roll == 3:  # a few bytes of the head, then silence
        return Probe(
            "slow-head",
            (encoded[: rng.randrange(0, max(1, head_end - 4))],),
            answers=0,
            then=SILENT_HEAD,
        )
    if request.body and len(encoded) > head_end + 1:
        at = rng.randrange(head_end, len(encoded) - 1)
        return Probe("slow-body", (encoded[:at],), answers=0, then=SILENT_BODY)
    return Probe("slow-head", (encoded[: max(1, head_end - 2)],), answers=0, then=SILENT_HEAD)


def garbage(rng: random.Random, surface: Surface, allow_runs: bool) -> Probe:
    """Random bytes, or a valid request with bytes flipped, inserted or deleted."""
    if rng.random() < 0.3:
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2000)))
        return Probe("garbage", (noise,), answers=0)
    request, _ = _request(rng, surface, False)
    data = bytearray(request.encode())
    for _ in range(rng.randrange(1, 8)):
        position = rng.randrange(len(data))
        roll = rng.randrange(3)
        if roll == 0:
            data[position] = rng.randrange(256)
        elif roll == 1:
            data[position:position] = _pick(
                rng, (b"\r", b"\n", b"\x00", b" ", b":", b"\r\n", b"\xff", b"%")
            )
        else:
            del data[position]
    return Probe("mutated", (bytes(data),), answers=0)


# --- regression inputs -----------------------------------------------------------------------


def regressions(surface: Surface) -> list[tuple[str, Probe]]:
    """Named inputs sent first by every run: peers that go silent at each point of a request,
    and inputs that found a bug once (each still a case worth sending every time)."""
    authority = surface.authority
    host = b"Host: " + authority + b"\r\n"
    auth = b"Authorization: Bearer %s\r\n" % surface.bearer.encode() if surface.bearer else b""
    posts = [route for route in surface.routes if route.body]
    body_path = _path(random.Random(0), posts[0], surface) if posts else b"/"
    ws_routes = [route for route in surface.routes if route.websocket]
    ws_path = _path(random.Random(0), ws_routes[0], surface) if ws_routes else b"/"
    handshake = (
        b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: " + _WS_KEY + b"\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )

    def post(path: bytes, body: bytes, *, then: str = READ) -> Probe:
        head = b"POST " + path + b" HTTP/1.1\r\n" + host + auth
        head += b"Content-Type: application/json\r\nA2A-Version: 1.0\r\n"
        head += b"Accept: application/json, text/event-stream\r\n"
        return Probe(
            "regression",
            (head + b"Content-Length: %d\r\n\r\n" % len(body) + body,),
            methods=(b"POST",),
            then=then,
        )

    found = [
        ("silent from the start", Probe("regression", (b"",), answers=0, then=SILENT_HEAD)),
        (
            "silent in the request line",
            Probe("regression", (b"GET /hea",), answers=0, then=SILENT_HEAD),
        ),
        (
            "silent in the head",
            Probe(
                "regression", (b"GET /healthz HTTP/1.1\r\n" + host,), answers=0, then=SILENT_HEAD
            ),
        ),
        (
            "silent in the body",
            Probe(
                "regression",
                (
                    post(body_path, b"{}")
                    .writes[0]
                    .replace(b"Content-Length: 2", b"Content-Length: 100"),
                ),
                answers=0,
                then=SILENT_BODY,
            ),
        ),
        # Hypercorn 0.18 raised out of the connection (and ended the server) on frame bytes
        # sent with the handshake.
        (
            "frame bytes in the handshake's write",
            Probe(
                "regression",
                (
                    b"GET "
                    + ws_path
                    + b" HTTP/1.1\r\n"
                    + host
                    + auth
                    + handshake
                    + b"\x81\x85garbagebytes",
                ),
                methods=(b"GET",),
            ),
        ),
        ("JSON 100,000 levels deep", post(body_path, b"[" * 100_000)),
    ]
    if surface.name == "serve":
        found.append(
            (
                "a WebSocket handshake to an HTTP route",
                Probe(
                    "regression",
                    (b"GET /healthz HTTP/1.1\r\n" + host + handshake,),
                    methods=(b"GET",),
                ),
            )
        )
    if surface.name == "a2a-serve":
        message = b'{"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "%s"}]%s}'
        found += [
            (
                "a lone surrogate echoed by the REST binding",
                post(
                    b"/a2a/rest/message:send",
                    b'{"message": ' + message % (b"x", b', "metadata": "\\ud800"') + b"}",
                ),
            ),
            (
                "invalid UTF-8 on the REST binding",
                post(b"/a2a/rest/message:send", b'{"message": ' + message % (b"\xff", b"") + b"}"),
            ),
            (
                "a lone surrogate echoed by JSON-RPC",
                post(
                    b"/a2a/jsonrpc",
                    b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": '
                    + message % (b"x", b', "metadata": "\\ud800"')
                    + b"}}",
                ),
            ),
            (
                "invalid UTF-8 on JSON-RPC",
                post(
                    b"/a2a/jsonrpc",
                    b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "\xff"}}',
                ),
            ),
        ]
    return found


#: Each kind of input with its weight in the draw.
KINDS: Final[tuple[tuple[Callable[[random.Random, Surface, bool], Probe], int], ...]] = (
    (plain, 12),
    (request_line, 6),
    (huge_head, 3),
    (odd_fields, 6),
    (duplicates, 5),
    (framing, 6),
    (expect_continue, 3),
    (guard_fields, 8),
    (cursors, 4),
    (odd_paths, 5),
    (methods, 6),
    (huge_body, 2),
    (json_bodies, 8),
    (websocket, 6),
    (h2c, 2),
    (h2_prior_knowledge, 2),
    (pipelined, 5),
    (endings, 5),
    (garbage, 6),
)
_TOTAL_WEIGHT: Final = sum(weight for _, weight in KINDS)


def draw_probe(seed: int, listener: str, index: int, surface: Surface, allow_runs: bool) -> Probe:
    """Input `index` of `seed` for `listener`: the same probe every time for the same surface."""
    rng = random.Random(f"{seed}/{listener}/{index}")
    roll = rng.randrange(_TOTAL_WEIGHT)
    for kind, weight in KINDS:
        if roll < weight:
            probe = kind(rng, surface, allow_runs)
            break
        roll -= weight
    if not allow_runs and probe.may_start_run:
        probe = replace(probe, may_start_run=False)
    return probe
