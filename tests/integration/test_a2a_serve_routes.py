"""`a2a-serve`'s HTTP surface as the A2A conformance suite reads it: the card's caching headers,
and the two A2A prefixes served with and without a trailing slash (never a redirect).

The server is a real `subagent-engine a2a-serve` child process with the scripted parent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from email.utils import parsedate_to_datetime

import httpx
import pytest

from adapters.a2a.serving import CARD_CACHE_CONTROL
from tests.helpers.peers import ServedAgent, served_agent

A2A_HEADERS = {"Content-Type": "application/json", "A2A-Version": "1.0"}


@pytest.fixture(scope="module")
def agent() -> Iterator[ServedAgent]:
    with served_agent("--parent", "scripted") as served:
        yield served


def test_the_card_says_how_long_to_keep_it_and_since_when_it_is_valid(agent: ServedAgent) -> None:
    response = httpx.get(agent.card_url)
    assert response.status_code == 200
    assert response.headers["cache-control"] == CARD_CACHE_CONTROL
    assert "max-age=" in response.headers["cache-control"]
    modified = parsedate_to_datetime(response.headers["last-modified"])
    assert modified.timestamp() <= time.time()
    etag = response.headers["etag"]
    again = httpx.get(agent.card_url, headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.headers["last-modified"] == response.headers["last-modified"]


@pytest.mark.parametrize("suffix", ["", "/"])
def test_json_rpc_answers_with_and_without_a_trailing_slash(
    agent: ServedAgent, suffix: str
) -> None:
    call = {"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "no-such-task"}}
    response = httpx.post(f"{agent.base_url}/a2a/jsonrpc{suffix}", json=call, headers=A2A_HEADERS)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == 7
    assert body["error"]["code"] == -32001  # TaskNotFoundError


@pytest.mark.parametrize("suffix", ["", "/"])
def test_rest_answers_with_and_without_a_trailing_slash(agent: ServedAgent, suffix: str) -> None:
    response = httpx.get(
        f"{agent.base_url}/a2a/rest/tasks/no-such-task{suffix}", headers=A2A_HEADERS
    )
    assert response.status_code == 404, response.text
    assert response.json()["error"]["status"] == "NOT_FOUND"
    listed = httpx.get(f"{agent.base_url}/a2a/rest/tasks{suffix}", headers=A2A_HEADERS)
    assert listed.status_code == 200, listed.text
    assert "tasks" in listed.json()


def test_a_json_rpc_refusal_is_a_json_rpc_error(agent: ServedAgent) -> None:
    url = f"{agent.base_url}/a2a/jsonrpc"
    not_json = httpx.post(url, content=b"{'a': 1}", headers={**A2A_HEADERS})
    assert not_json.status_code == 400
    body = not_json.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["code"] == -32700  # parse error
    assert body["error"]["data"][0]["reason"] == "BAD_JSON"
    assert body["error"]["data"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    plain = httpx.post(url, content=b"{}", headers={**A2A_HEADERS, "Content-Type": "text/plain"})
    assert plain.status_code == 415
    error = plain.json()["error"]
    assert error["code"] == -32005  # ContentTypeNotSupportedError
    assert error["data"][0] == {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "CONTENT_TYPE_NOT_SUPPORTED",
        "domain": "a2a-protocol.org",
        "metadata": {},
    }
    foreign = httpx.post(url, json={}, headers={**A2A_HEADERS, "Host": "evil.example"})
    assert foreign.status_code == 421  # Misdirected Request
    assert foreign.json()["error"]["code"] == -32600  # invalid request


def test_a_rest_refusal_is_an_aip_193_error(agent: ServedAgent) -> None:
    url = f"{agent.base_url}/a2a/rest/message:send"
    plain = httpx.post(url, content=b"{}", headers={**A2A_HEADERS, "Content-Type": "text/plain"})
    assert plain.status_code == 415
    error = plain.json()["error"]
    assert (error["code"], error["status"]) == (415, "INVALID_ARGUMENT")
    assert error["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
    bad = httpx.post(url, content=b"[", headers=A2A_HEADERS)
    assert bad.status_code == 400
    assert bad.json()["error"]["details"][0]["reason"] == "BAD_JSON"


def test_other_paths_keep_the_listener_s_refusal(agent: ServedAgent) -> None:
    response = httpx.get(agent.card_url, headers={"Host": "evil.example"})
    assert response.status_code == 421
    assert isinstance(response.json()["error"], str)
