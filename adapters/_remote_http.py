"""What every remote target that speaks HTTP shares: credentials bound to origins, identity, and
the text a remote agent is given.

This module owns the small rules the A2A and AG-UI targets must apply the same way: a configured
credential header goes only to the agent's own origin and the origins the host explicitly trusts
(`OriginBoundAuth`, used by `http_pools`, which also gives control calls a pool of their own);
the values to redact for a credential are the header value and its token without the scheme
(`credential_secrets`); and, when the host turns it on, every request says who is asking
(`identity_headers`: the run's user, the tenant, `x-source`, and the lineage of the delegation),
like kagent (seed 004). `task_text` is what a remote agent is asked, whatever its protocol. No
I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from engine import DelegationTask

__all__ = [
    "OriginBoundAuth",
    "credential_secrets",
    "http_pools",
    "identity_headers",
    "origin",
    "task_text",
]


def origin(url: str) -> str:
    """`scheme://host[:port]`, lowercased: what a credential is bound to."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def credential_secrets(auth_header: tuple[str, str] | None) -> tuple[str, ...]:
    """Credential values to redact everywhere: the header value and its bare token."""
    if auth_header is None:
        return ()
    value = auth_header[1]
    token = value.split(" ", 1)[1] if " " in value else value
    return tuple({value, token})


class OriginBoundAuth(httpx.Auth):
    """Adds the credential header only to requests for the allowed origins."""

    def __init__(self, header: tuple[str, str], origins: frozenset[str]) -> None:
        self._header = header
        self._origins = origins

    def auth_flow(self, request: httpx.Request) -> Any:
        if origin(str(request.url)) in self._origins:
            request.headers[self._header[0]] = self._header[1]
        yield request


def http_pools(
    home_url: str,
    *,
    trusted_origins: Sequence[str],
    auth_header: tuple[str, str] | None,
    forward_headers: Mapping[str, str],
    request_timeout: float,
    http: httpx.AsyncClient | None,
) -> tuple[httpx.AsyncClient, httpx.AsyncClient]:
    """(the streaming pool, the control pool) of a remote target: the credential only for
    `home_url`'s origin and `trusted_origins`, no redirects, reads without a timeout (streams
    last as long as the task). Control calls (cancel, get, stop) get a pool of their own: queued
    behind a hundred open streams, a run's cancel cascade took ~30 ms longer (bench a2a). A
    caller-given `http` serves both (and stays the caller's to close)."""
    if http is not None:
        return http, http
    origins = frozenset({origin(home_url), *(origin(o) for o in trusted_origins)})
    auth = OriginBoundAuth(auth_header, origins) if auth_header else None

    def new_pool() -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=httpx.Timeout(request_timeout, read=None),
            headers=dict(forward_headers),
            auth=auth,
            follow_redirects=False,
        )

    return new_pool(), new_pool()


def identity_headers(task: DelegationTask, tenant: str | None) -> dict[str, str]:
    """Who is asking, for a host that forwards identity: the headers that have a value."""
    user_id = task.metadata.get("user_id")
    headers = {
        "x-user-id": str(user_id) if user_id else None,
        "x-tenant": tenant or task.metadata.get("tenant"),
        "x-source": "subagent-engine",
        "x-parent-run-id": task.run_id,
        "x-parent-tool-call-id": task.request.parent_tool_call_id,
        "x-delegation-id": task.delegation_id,
    }
    return {name: str(value) for name, value in headers.items() if value}


def task_text(task: DelegationTask) -> str:
    """The remote's user message: the objective, then the prompt, context and artifact
    references (by name and URI, never their content)."""
    request = task.request
    sections = [request.objective]
    if request.prompt:
        sections.append(request.prompt)
    if request.context:
        sections.append(f"Context:\n{request.context}")
    if request.artifacts:
        refs = "\n".join(f"- {a.name or ''} {a.uri or ''}".rstrip() for a in request.artifacts)
        sections.append(f"Artifacts:\n{refs}")
    return "\n\n".join(sections)
