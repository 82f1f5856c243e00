"""A delegation's artifacts for the run's viewers: `GET /runs/<id>/artifacts/<delegation>/<id>`.

This module owns what a viewer gets for one artifact: the content its agent gave (through
`engine.Run.artifact`, the engine's one accessor; events and results carry only references),
under the run's viewer token, and the response headers that keep the content from acting on
this server's origin. It does not find runs or check tokens itself (the server's `find` does,
the same way for every run route) and keeps nothing.

Rules: ids are checked before any lookup (at most 256 printable ASCII characters, none of them
a path separator or a dot-only segment: anything else is an unknown artifact, 404); a run this
process does not run (archived, or served by another node) has no contents here (404); content
above `max_bytes` is refused with 413 `artifact_too_large`, never cut. The declared media type
is served when it is a well-formed `type/subtype` (else `application/octet-stream`), text with
`charset=utf-8`. Only plain text, Markdown, JSON and raster images are shown inline; anything else
(HTML, SVG, XML, unknown types) is an attachment. Every response says `X-Content-Type-Options:
nosniff` (Fetch standard, "X-Content-Type-Options") and carries `Content-Security-Policy:
default-src 'none'; sandbox` (CSP Level 3): even a document that a browser renders runs no
script, loads nothing, and is not of this origin.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import quote

from engine import Run

__all__ = ["ARTIFACT_MAX_BYTES", "ArtifactRefused", "artifact_response_parts", "valid_id"]

#: The largest artifact served (bytes); larger ones are 413.
ARTIFACT_MAX_BYTES: Final = 8 * 1024 * 1024
_ID: Final = re.compile(r"[A-Za-z0-9_~:@+=,.-]{1,256}")
_MEDIA_TYPE: Final = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")
_INLINE: Final = frozenset(
    {
        "text/plain",
        "text/markdown",
        "application/json",
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
    }
)
SECURITY_HEADERS: Final = (
    ("X-Content-Type-Options", "nosniff"),
    ("Content-Security-Policy", "default-src 'none'; sandbox"),
    ("Cache-Control", "private, no-store"),
    ("Referrer-Policy", "no-referrer"),
)


class ArtifactRefused(Exception):
    """Why an artifact is not served: `status` (404, 413), `code` and `message` for the body."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def valid_id(value: str) -> bool:
    """A delegation or artifact id this route looks up: printable, no separator, not `.`/`..`."""
    return bool(_ID.fullmatch(value)) and value.strip(".") != ""


def artifact_response_parts(
    run: Run | None, delegation_id: str, artifact_id: str, *, max_bytes: int = ARTIFACT_MAX_BYTES
) -> tuple[bytes, list[tuple[str, str]]]:
    """The body and headers for one artifact of `run` (None: a run this process does not
    run). Raises `ArtifactRefused`."""
    if run is None or not valid_id(delegation_id) or not valid_id(artifact_id):
        raise _unknown()
    found = run.artifact(delegation_id, artifact_id)
    if found is None:
        raise _unknown()
    reference, content = found
    if len(content) > max_bytes:
        raise ArtifactRefused(
            413,
            "artifact_too_large",
            f"The artifact has {len(content)} bytes; this server serves at most {max_bytes}.",
        )
    declared = (reference.mime_type or "").split(";", 1)[0].strip().lower()
    media_type = declared if _MEDIA_TYPE.fullmatch(declared) else "application/octet-stream"
    content_type = f"{media_type}; charset=utf-8" if media_type.startswith("text/") else media_type
    disposition = "inline" if media_type in _INLINE else "attachment"
    name = reference.name or artifact_id
    # RFC 6266 with RFC 8187's filename* (UTF-8, percent-encoded): nothing of the name is
    # ever a header token of its own.
    ascii_name = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:120] or "artifact"
    encoded = quote(name[:200], safe="")
    headers = [
        ("Content-Type", content_type),
        (
            "Content-Disposition",
            f"{disposition}; filename=\"{ascii_name}\"; filename*=UTF-8''{encoded}",
        ),
        *SECURITY_HEADERS,
    ]
    return content, headers


def _unknown() -> ArtifactRefused:
    return ArtifactRefused(404, "artifact_not_found", "No such artifact in this run.")
