"""`subagent-engine a2a-serve --parent conformance`: the A2A TCK's scripted agent, served by the
same server as the real parents, answers each message as its `messageId` prefix asks.

A real child process on 127.0.0.1, called over JSON-RPC and HTTP+JSON with plain HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.helpers.peers import ServedAgent, served_agent

HEADERS = {"Content-Type": "application/json", "A2A-Version": "1.0"}


@pytest.fixture(scope="module")
def agent() -> Iterator[ServedAgent]:
    with served_agent("--parent", "conformance") as served:
        yield served


def message(message_id: str, task_id: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "role": "ROLE_USER",
        "parts": [{"text": "conformance"}],
        "messageId": message_id,
    }
    if task_id:
        found["taskId"] = task_id
    return found


def rpc(agent: ServedAgent, method: str, params: dict[str, Any]) -> dict[str, Any]:
    call = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = httpx.post(f"{agent.base_url}/a2a/jsonrpc", json=call, headers=HEADERS)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def send(agent: ServedAgent, message_id: str, task_id: str | None = None) -> dict[str, Any]:
    body = rpc(agent, "SendMessage", {"message": message(message_id, task_id)})
    assert "result" in body, body
    result: dict[str, Any] = body["result"]
    return result


def test_the_card_and_health_name_the_conformance_agent(agent: ServedAgent) -> None:
    card = httpx.get(agent.card_url).json()
    assert [i["protocolBinding"] for i in card["supportedInterfaces"]] == ["JSONRPC", "HTTP+JSON"]
    assert agent.health()["parent"] == "conformance"


def test_complete_and_artifact_prefixes(agent: ServedAgent) -> None:
    task = send(agent, "tck-complete-task-1")["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["status"]["message"]["parts"] == [{"text": "Hello from TCK"}]
    data = send(agent, "tck-artifact-data-1")["task"]
    assert data["artifacts"][0]["parts"] == [{"data": {"key": "value", "count": 42.0}}]
    url = send(agent, "tck-artifact-file-url-1")["task"]
    assert url["artifacts"][0]["parts"][0]["url"] == "https://example.com/output.txt"
    file = send(agent, "tck-artifact-file-1")["task"]
    assert file["artifacts"][0]["parts"][0]["filename"] == "output.txt"


def test_a_message_response_is_a_message_not_a_task(agent: ServedAgent) -> None:
    result = send(agent, "tck-message-response-1")
    assert result["message"]["parts"] == [{"text": "Direct message response"}]
    assert "task" not in result


def test_input_required_stays_open_until_a_follow_up_completes_it(agent: ServedAgent) -> None:
    task = send(agent, "tck-input-required-1")["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    again = send(agent, "tck-input-required-2", task["id"])["task"]
    assert (again["id"], again["status"]["state"]) == (task["id"], "TASK_STATE_INPUT_REQUIRED")
    assert again["contextId"] == task["contextId"]
    done = send(agent, "tck-complete-task-2", task["id"])["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"


def test_an_open_task_can_be_cancelled(agent: ServedAgent) -> None:
    task = send(agent, "tck-input-required-3")["task"]
    body = rpc(agent, "CancelTask", {"id": task["id"]})
    assert body["result"]["status"]["state"] == "TASK_STATE_CANCELED", body


def test_a_chunked_stream_over_http_json(agent: ServedAgent) -> None:
    events = []
    with httpx.stream(
        "POST",
        f"{agent.base_url}/a2a/rest/message:stream",
        json={"message": message("tck-stream-artifact-chunked-1")},
        headers={**HEADERS, "Accept": "text/event-stream"},
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
    chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert [c["artifact"]["parts"][0]["text"] for c in chunks] == ["chunk-1 ", "chunk-2"]
    assert chunks[-1].get("lastChunk") is True and chunks[-1].get("append") is True
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
