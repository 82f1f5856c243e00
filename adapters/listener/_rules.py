"""What every listener of ours checks in a request before a route sees it (sans-IO).

This module owns the rules a hostile caller would probe, as pure functions of header bytes and
body bytes: which `Host` a listener answers to (a page on another site that rebinds its DNS name
to 127.0.0.1 still sends its own name), which `Origin` may drive it (a web page the user happens
to visit), how a bearer credential is read (one parser for every listener), which headers may
appear only once, what a JSON body may be (media type, depth, numbers, text) and what a stream
cursor is. A broken rule is a `Refusal`: the HTTP status, a machine-readable `error` and a
message that echoes nothing the caller sent. Nothing here does I/O or knows a framework.

Hosts. A listener answers to IP literals (a browser page whose origin is an IP address is that
address: no rebinding is possible), to `localhost`, and to the names a host configures
(`allowed_hosts`; `"*"` turns the check off). Origins. A request without `Origin` comes from a
program, not a page, and passes; a page's request passes when its origin is the listener's own
(the origin's host and port are the request's `Host`) or one the host configured
(`allowed_origins`); `Origin: null` (sandboxed frames, files) never does.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = [
    "MAX_JSON_DEPTH",
    "SINGLE_VALUED_HEADERS",
    "Refusal",
    "bearer_token",
    "check_host",
    "check_origin",
    "check_single_valued",
    "header_values",
    "is_bearer_credential",
    "is_ip_literal",
    "is_json_media_type",
    "is_loopback",
    "parse_cursor",
    "parse_json_body",
    "require_bearer",
]

#: Headers a request may carry once (RFC 9110 section 5.3: a field that is not a list must not
#: be repeated); two of them mean two parsers could each read a different one.
SINGLE_VALUED_HEADERS: Final = frozenset(
    {
        b"host",
        b"authorization",
        b"origin",
        b"content-type",
        b"content-length",
        b"last-event-id",
    }
)
#: The deepest JSON body a route reads; nothing we take from a caller nests deeper.
MAX_JSON_DEPTH: Final = 32
_CURSOR: Final = re.compile(r"[0-9]{1,18}")
#: RFC 6750 section 2.1: the characters of a bearer credential (token68).
_TOKEN68: Final = re.compile(rb"[A-Za-z0-9\-._~+/]+=*")
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")
#: The realm a refusal's `WWW-Authenticate` names (RFC 6750 section 3).
REALM: Final = "subagent-engine"
_HOST: Final = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+)(?::([0-9]{1,5}))?$")


class Refusal(Exception):
    """A request broke a rule: answer `status` with `{"error", "message"}` and stop."""

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        headers: Sequence[tuple[str, str]] = (),
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.headers = tuple(headers)
        #: More of what went wrong, as JSON (e.g. who answered a closed question).
        self.details = dict(details) if details else None

    def body(self) -> bytes:
        document: dict[str, Any] = {"error": self.error, "message": self.message}
        if self.details:
            document["details"] = self.details
        return json.dumps(document).encode()


def header_values(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    """Every value of header `name` (lowercase) in ASGI header pairs, in order."""
    return [value for key, value in headers if key.lower() == name]


def check_single_valued(headers: Iterable[tuple[bytes, bytes]]) -> None:
    """Refuse a request that repeats a header that must appear once."""
    seen: set[bytes] = set()
    for key, _ in headers:
        name = key.lower()
        if name in SINGLE_VALUED_HEADERS:
            if name in seen:
                raise Refusal(
                    400,
                    "duplicate_header",
                    f"The {name.decode('latin-1').title()} header may appear only once.",
                )
            seen.add(name)


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """Whether a bind address (or name) reaches only this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _split_host(value: str) -> tuple[str, int | None] | None:
    found = _HOST.match(value.strip())
    if found is None:
        return None
    name, port = found.group(1), found.group(2)
    return name.lower(), (int(port) if port is not None else None)


def check_host(value: bytes | None, allowed_hosts: Collection[str]) -> None:
    """Refuse a `Host` this listener does not answer to (421, RFC 9110 section 15.5.20).
    A request without one (HTTP/1.0) passes: browsers always send it."""
    if value is None or "*" in allowed_hosts:
        return
    parts = _split_host(value.decode("latin-1"))
    if parts is not None:
        name = parts[0]
        if is_ip_literal(name) or name == "localhost" or name in allowed_hosts:
            return
    raise Refusal(
        421,
        "unknown_host",
        "This server does not answer to that host name (add it to allowed_hosts to serve it).",
    )


def _authority(scheme: str, host: str) -> tuple[str, int | None] | None:
    parts = _split_host(host)
    if parts is None:
        return None
    name, port = parts
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    return name, port


def check_origin(
    origin: bytes | None, host: bytes | None, allowed_origins: Collection[str]
) -> None:
    """Refuse a page from another origin (403). `origin` and `host` are the request's
    headers; the listener's own origin is the one whose host and port are the `Host`."""
    if origin is None:
        return
    text = origin.decode("latin-1").strip()
    if text in allowed_origins and text != "null":
        return
    if text != "null" and host is not None:
        parsed = urlsplit(text)
        if parsed.scheme in ("http", "https") and parsed.netloc:
            own = _authority(parsed.scheme, host.decode("latin-1"))
            theirs = _authority(parsed.scheme, parsed.netloc)
            if own is not None and own == theirs:
                return
    raise Refusal(
        403,
        "forbidden_origin",
        "Requests from this web origin are not allowed (the server's cors_origins lists the "
        "ones that are).",
    )


def bearer_token(values: Sequence[bytes], *, realm: str = REALM) -> str | None:
    """The credential of an `Authorization: Bearer <token>` header (the scheme in any case,
    RFC 9110 section 11.1), given every value of the header; None without one. A repeated
    header, another scheme or a malformed credential is refused (400 / 401)."""
    if not values:
        return None
    if len(values) > 1:
        raise Refusal(400, "duplicate_header", "The Authorization header may appear only once.")
    scheme, _, credential = values[0].strip().partition(b" ")
    credential = credential.strip()
    if scheme.lower() != b"bearer" or not _TOKEN68.fullmatch(credential):
        raise Refusal(
            401,
            "bad_authorization",
            "The Authorization header must be 'Bearer <token>'.",
            headers=[("www-authenticate", f'Bearer realm="{realm}"')],
        )
    return credential.decode("ascii")


def require_bearer(
    values: Sequence[bytes], expected: str, *, message: str, realm: str = REALM
) -> None:
    """Refuse (401, `unauthorized`, with `message`) a request whose bearer credential is not
    `expected`, compared in constant time; `values` as for `bearer_token`."""
    presented = bearer_token(values, realm=realm)
    if presented is None or not hmac.compare_digest(presented.encode(), expected.encode()):
        raise Refusal(
            401,
            "unauthorized",
            message,
            headers=[("www-authenticate", f'Bearer realm="{realm}"')],
        )


def is_bearer_credential(value: str) -> bool:
    """Whether `value` can travel as a bearer credential (RFC 6750 section 2.1, token68)."""
    return value.isascii() and _TOKEN68.fullmatch(value.encode()) is not None


def is_json_media_type(value: bytes | None) -> bool:
    """`application/json` or any `+json` type (RFC 6839), parameters allowed."""
    if value is None:
        return False
    media = value.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
    )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json_body(body: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON document of a request body, or a 400 `Refusal` (`bad_json`, `too_deep`).
    `NaN` and `Infinity` are refused (RFC 8259 has no such numbers); text is made valid
    Unicode: a lone surrogate escape (`"\\ud800"`, which RFC 8259 section 8.2 allows on the
    wire but no UTF-8 encoder can write) becomes U+FFFD, as does invalid UTF-8."""
    try:
        text = body.decode("utf-8", errors="replace")
        document = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise Refusal(400, "too_deep", f"JSON nested deeper than {max_depth} levels.") from None
    except ValueError:
        raise Refusal(400, "bad_json", "The body is not a JSON document.") from None
    return _checked(document, max_depth)


def _clean(text: str) -> str:
    if _LONE_SURROGATE.search(text) is None:
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


def _checked(document: Any, max_depth: int) -> Any:
    """`document` with its strings (keys too) cleaned, refused if deeper than `max_depth`.
    Iterative: a document at the depth limit must not cost the stack."""
    if isinstance(document, str):
        return _clean(document)
    if not isinstance(document, dict | list):
        return document
    root: list[Any] = [document]
    # (container, depth, the container it was copied into, the key it goes under there)
    stack: list[tuple[Any, int, Any, Any]] = [(document, 1, root, 0)]
    while stack:
        node, depth, into, key = stack.pop()
        if depth > max_depth:
            raise Refusal(400, "too_deep", f"JSON nested deeper than {max_depth} levels.")
        copy: Any
        if isinstance(node, dict):
            copy = {}
            for name, value in node.items():
                name = _clean(name)
                if isinstance(value, dict | list):
                    copy[name] = None
                    stack.append((value, depth + 1, copy, name))
                else:
                    copy[name] = _clean(value) if isinstance(value, str) else value
        else:
            copy = []
            for index, value in enumerate(node):
                if isinstance(value, dict | list):
                    copy.append(None)
                    stack.append((value, depth + 1, copy, index))
                else:
                    copy.append(_clean(value) if isinstance(value, str) else value)
        into[key] = copy
    return root[0]


def parse_cursor(value: str | bytes | None) -> int | None:
    """A stream cursor (`Last-Event-ID`, `?after=`): ASCII digits only, else a 400 `Refusal`;
    None when absent or empty."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if text == "":
        return None
    if _CURSOR.fullmatch(text) is None:
        raise Refusal(400, "bad_cursor", "Last-Event-ID / after must be a cursor (an integer).")
    return int(text)
