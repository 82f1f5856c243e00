"""Builders of the a2a-sdk's protobuf messages, as a remote A2A agent sends them.

`task`, `on_task`, `on_status` and `on_artifact` make the stream items a client reads
(`StreamResponse`); every id and context defaults to one task (`task-1` in `ctx-1`), so a test
names only what it is about. `user_request` is what a client sends: a user's text, with a fresh
message id, to a new task or (with `task_id`, `context_id`) a follow-up on an existing one.
"""

from __future__ import annotations

import uuid
from typing import Any

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf import json_format, struct_pb2


def status(
    state: int, text: str | None = None, *, message_id: str = "", seconds: int | None = None
) -> TaskStatus:
    result = TaskStatus(state=state)  # type: ignore[arg-type]
    if text is not None:
        result.message.CopyFrom(
            Message(message_id=message_id, role=Role.ROLE_AGENT, parts=[Part(text=text)])
        )
    if seconds is not None:
        result.timestamp.seconds = seconds
    return result


def task(
    state: int = TaskState.TASK_STATE_SUBMITTED,
    text: str | None = None,
    *,
    task_id: str = "task-1",
    artifacts: list[Artifact] | None = None,
    seconds: int | None = None,
) -> Task:
    return Task(
        id=task_id,
        context_id="ctx-1",
        status=status(state, text, seconds=seconds),
        artifacts=artifacts or [],
    )


def on_task(value: Task) -> StreamResponse:
    return StreamResponse(task=value)


def on_status(
    state: int,
    text: str | None = None,
    *,
    task_id: str = "task-1",
    message_id: str = "",
    seconds: int | None = None,
) -> StreamResponse:
    return StreamResponse(
        status_update=TaskStatusUpdateEvent(
            task_id=task_id,
            context_id="ctx-1",
            status=status(state, text, message_id=message_id, seconds=seconds),
        )
    )


def on_artifact(
    artifact_id: str,
    *parts: Part,
    name: str = "",
    append: bool = False,
    last: bool = False,
    task_id: str = "task-1",
    description: str = "",
    metadata: dict[str, Any] | None = None,
) -> StreamResponse:
    artifact = Artifact(artifact_id=artifact_id, name=name, description=description, parts=parts)
    if metadata is not None:
        artifact.metadata.update(metadata)
    return StreamResponse(
        artifact_update=TaskArtifactUpdateEvent(
            task_id=task_id, context_id="ctx-1", artifact=artifact, append=append, last_chunk=last
        )
    )


def agent_message(text: str, *, message_id: str = "m-1", task_id: str = "task-1") -> Message:
    return Message(
        message_id=message_id,
        task_id=task_id,
        context_id="ctx-1" if task_id else "",
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
    )


def data_part(value: Any, media_type: str = "") -> Part:
    part = Part(media_type=media_type)
    part.data.CopyFrom(json_format.ParseDict(value, struct_pb2.Value()))
    return part


def user_request(text: str, *, task_id: str = "", context_id: str = "") -> SendMessageRequest:
    """A user's message as a client sends it, with a fresh message id."""
    return SendMessageRequest(
        message=Message(
            role=Role.ROLE_USER,
            message_id=str(uuid.uuid4()),
            task_id=task_id,
            context_id=context_id,
            parts=[Part(text=text)],
        )
    )
