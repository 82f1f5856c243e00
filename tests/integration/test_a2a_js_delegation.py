"""The same delegation paths against a second A2A implementation (@a2a-js/sdk on Node)."""

from __future__ import annotations

from typing import Any

from engine import ErrorCode, Kind, RemoteCancel, Status
from tests.helpers.agents import a2a_agent
from tests.helpers.events import events_of
from tests.helpers.runs import delegate


async def test_js_agent_streams_text_and_completes(a2a_js_server: Any) -> None:
    result, entries = await delegate(a2a_agent(a2a_js_server.card_url("stream")))
    assert result.status == Status.COMPLETED, result
    events = events_of(entries, result.delegation_id)
    text = "".join(e.delta for e in events if e.kind == Kind.TEXT_DELTA)
    assert text == "Hello from a2a-js."
    assert result.summary == "done: js"
    assert [e.kind for e in events].count(Kind.FINISHED) == 1


async def test_js_agent_failure_is_structured(a2a_js_server: Any) -> None:
    result, _ = await delegate(a2a_agent(a2a_js_server.card_url("fail")))
    assert result.status == Status.FAILED
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_FAILED
    assert "failed: js" in result.error.message


async def test_js_agent_timeout_cancels_the_remote_task(a2a_js_server: Any) -> None:
    result, _ = await delegate(a2a_agent(a2a_js_server.card_url("hang")), timeout_seconds=1)
    assert result.error is not None and result.error.code == ErrorCode.REMOTE_TIMEOUT
    assert result.remote_cancel == RemoteCancel.CONFIRMED
    cancels = a2a_js_server.cancels_for(result.remote_task_id)
    assert len(cancels) == 1
    assert cancels[0]["tenant"] == "acme"
    assert cancels[0]["metadata"]["delegation_id"] == result.delegation_id
