"""Where A2A becomes engine updates: one remote task's stream, snapshots and replies (sans-IO).

`A2AEventMapper` translates what an A2A 1.0 agent says about one delegated task (`StreamResponse`
items of a stream or a resubscription, `Task` snapshots from `GetTask`, the reply of a
non-streaming `SendMessage`) into protocol-neutral `TargetUpdate`s. It performs no I/O, never
awaits and imports no Trio: the session in `adapters.a2a._target` moves bytes and calls it.

It owns the protocol-level guards the engine cannot see, because they need A2A's own fields:
the task id (events about another task are ignored and counted), exact repeats of an event
(ignored and counted), stale status snapshots (an older `status.timestamp` never overrides a
newer one), what a snapshot adds to what was already seen (only new artifact parts, new text and
changed statuses are emitted), and well-formedness (a payload it cannot read raises
`DelegationError(malformed_remote_payload)`, never another exception). It must not repeat the
rules of `engine._delegation.DelegationState`, which consumes its output: that one synthesizes a
missing start, keeps exactly one terminal, opens and closes text messages, folds unchanged
statuses and counts artifacts and their bytes against the policy.

Theory of operation. The first item that names a task id teaches the mapper its task (and context)
and yields `subagent.started` carrying the task's first status; a terminal status update never
does: one that arrives before the task was announced (or names no task) is only a claim, ignored
and counted, because a remote may say "completed" first and then stream its real task (the
caller confirms a claim with `GetTask` if its stream ends without a real end). Statuses map by
`TaskState`;
interrupted states become `subagent.input_required`, terminal ones `finished`, `failed` (with a
typed `remote_failed` / `remote_rejected` error) or `cancelled`. A status message's text is the
update's `text`, never a text delta: only what the remote streams as assistant output becomes
`subagent.text.*` (artifacts named in `text_artifact_names`, and agent `Message`s; a `Message`
while no task exists is a direct reply and also finishes the delegation). Every other
artifact becomes an `ArtifactRef` by URI with the byte size of the chunk, its content never put
into an update. Duplicates are recognised by the hash of the item's deterministic serialization
within a window that resets when the task's state changes (a repeat after a change is a new
transition, not a duplicate); an appended artifact chunk is only a duplicate of the item right
before it, because the same text chunk twice ("\\n", "\\n") is ordinary streamed content.
After an answer to an input request, `resume()` forgets the last status so that the same
question asked again is heard again.

Nested questions. An interrupted status whose message says it asks (metadata
`{"subagentEngine": {"kind": "question"}}`, as `subagent-engine a2a-serve` writes for a
question of one of its own delegations) and carries the question as a data part
(`adapters.a2a._serve_mapping.question_data`) keeps who asks: the update's `response_schema`
and `auth_url` come from it, and `remote_lineage` is the remote's lineage (its delegation id,
then its nested subagents down to the asker), so that the engine's question names the asker
below this delegation; `raw["question"]` keeps the remote's question id, delegation, agent and
asker (bounded), and `remote_question_id` the id an answer names (`answer_metadata`). Anything
else in that part that is not of the expected type is ignored, never a malformed payload: the
question is still asked, with what could be read.

Holding text (`hold_text=True`, for a caller that can release it later). A streamed text chunk
of an artifact already open, that is not its last, yields nothing: its text is held, and joined
with the chunks of the same artifact that follow into one delta, given out by `release()` or in
front of the updates of the next item that yields any (a status, another artifact's text, the
last chunk, a snapshot). Text is only ever merged, never reordered, dropped or invented: an item
that yields updates leaves nothing held, so held text is always older than anything the caller
has not emitted yet. The caller must `release()` before it stops feeding (the stream's end, an
error, a cancel); `adapters.a2a._target` releases when its stream waits for the network, which
coalesces what one read of the wire carried, as the engine's lanes would under back-pressure.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any, Final
from urllib.parse import quote

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    SendMessageResponse,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf import (  # type: ignore[import-untyped, unused-ignore]
    json_format,
    struct_pb2,
)
from google.protobuf import message as proto_message  # type: ignore[import-untyped, unused-ignore]

from engine import ArtifactRef, DelegationError, ErrorCode, Kind, TargetUpdate

__all__ = ["DEFAULT_TEXT_ARTIFACT_NAMES", "A2AEventMapper", "answer_metadata", "status_of"]

#: Artifact names that carry the remote's streamed assistant text.
DEFAULT_TEXT_ARTIFACT_NAMES: Final = frozenset({"assistant-output", "assistant_output", "response"})

#: Distinct items remembered for duplicate detection, and artifacts tracked for snapshot diffs.
DEDUPE_WINDOW: Final = 1024
TRACKED_ARTIFACTS: Final = 4096
TRACKED_MESSAGES: Final = 1024
#: Remote metadata and status data parts larger than this (as JSON) are not carried.
MAX_CARRIED_JSON_BYTES: Final = 4096
#: A remote failure message is cut to this many characters.
MAX_ERROR_CHARS: Final = 500
#: The metadata key and kind by which a status says it asks a question (camelCase, as A2A's
#: JSON; written by `adapters.a2a._serve_mapping`).
QUESTION_METADATA_KEY: Final = "subagentEngine"
QUESTION_KIND: Final = "question"
#: A nested question's lineage: at most this many ids (the nearest the asker kept), each at
#: most this many characters; a longer id is left out of it.
MAX_REMOTE_LINEAGE: Final = 64
MAX_REMOTE_ID_CHARS: Final = 256
#: The largest response schema carried from a remote's question (as JSON bytes).
MAX_REMOTE_SCHEMA_BYTES: Final = 64 * 1024

_STATUS_OF: Final[dict[int, str]] = {
    TaskState.TASK_STATE_SUBMITTED: "submitted",
    TaskState.TASK_STATE_WORKING: "working",
    TaskState.TASK_STATE_INPUT_REQUIRED: "input_required",
    TaskState.TASK_STATE_AUTH_REQUIRED: "auth_required",
    TaskState.TASK_STATE_COMPLETED: "completed",
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "cancelled",
    TaskState.TASK_STATE_REJECTED: "rejected",
}
_KNOWN_STATES: Final = frozenset(TaskState.values())
_INTERRUPTED: Final = frozenset({"input_required", "auth_required"})
_TERMINAL: Final = frozenset({"completed", "failed", "cancelled", "rejected"})
_DEFAULT_FAILURE: Final = {
    "failed": (ErrorCode.REMOTE_FAILED, "The remote agent reported that the task failed."),
    "rejected": (ErrorCode.REMOTE_REJECTED, "The remote agent rejected the task."),
}


def status_of(state: int) -> str:
    """The engine's status string for an A2A `TaskState` (`unknown` for unspecified or new ones)."""
    return _STATUS_OF.get(state, "unknown")


class _RecentKeys:
    """A bounded set of recent keys, forgetting the oldest first."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def __contains__(self, key: bytes) -> bool:
        return key in self._keys

    def add(self, key: bytes) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self._limit:
            self._keys.popitem(last=False)

    def clear(self) -> None:
        self._keys.clear()


class _ArtifactProgress:
    """What was emitted of one artifact: its parts (as a running digest) or, for text, its text."""

    __slots__ = ("closed", "digest", "is_text", "parts", "ref", "text_chars", "text_digest")

    def __init__(self, *, is_text: bool) -> None:
        self.is_text = is_text
        self.ref: ArtifactRef | None = None  # as last emitted: later chunks often omit the name
        self.closed = False
        self.parts = 0
        self.digest = hashlib.sha256()
        self.text_chars = 0
        self.text_digest = hashlib.sha256()

    def reset(self) -> None:
        self.closed = False
        self.parts = 0
        self.digest = hashlib.sha256()
        self.text_chars = 0
        self.text_digest = hashlib.sha256()

    def add_parts(self, parts: Iterable[Part]) -> None:
        for part in parts:
            self.parts += 1
            self.digest.update(_part_key(part))

    def add_text(self, text: str) -> None:
        self.text_chars += len(text)
        self.text_digest.update(text.encode("utf-8"))

    def extended_by(self, text: str) -> bool:
        """Whether `text` starts with all the text emitted so far."""
        if len(text) < self.text_chars:
            return False
        head = hashlib.sha256(text[: self.text_chars].encode("utf-8"))
        return head.digest() == self.text_digest.digest()


class A2AEventMapper:
    """Translates one delegation's A2A traffic into `TargetUpdate`s. Not thread-safe.

    Every method returns the updates to emit, in order (often none), or raises
    `DelegationError(malformed_remote_payload)` for an item it cannot read; it raises nothing else.
    `task_id` / `context_id` are what the remote said first; `terminal_state` is set once a
    terminal status was mapped. Counters say what was ignored, and why.
    """

    def __init__(
        self,
        *,
        text_artifact_names: Iterable[str] = DEFAULT_TEXT_ARTIFACT_NAMES,
        card_fingerprint: str | None = None,
        streaming: bool = True,
        hold_text: bool = False,
    ) -> None:
        self.text_artifact_names = frozenset(text_artifact_names)
        #: Hold streamed text back until `release()` or the next item that yields updates
        #: (see the module docstring). The caller that sets it must call `release()`.
        self.hold_text = hold_text
        self._held: list[str] = []
        self._held_artifact = ""
        #: False for an agent that is polled: its assistant output arrives whole in snapshots,
        #: and turning it into text deltas would invent streaming the remote never did. It is
        #: then an artifact reference, and its text the summary when the remote gives none.
        self.streaming = streaming
        self._output_text: list[str] = []
        self.card_fingerprint = card_fingerprint
        self.task_id: str | None = None
        self.context_id: str | None = None
        #: The last status mapped (`working`, `input_required`, ...), None before any.
        self.status: str | None = None
        self.terminal_state: str | None = None
        #: Items about another task than `task_id`.
        self.ignored_foreign = 0
        #: Exact repeats of an item already seen (see the module docstring for the window).
        self.ignored_duplicates = 0
        #: Statuses older (by `status.timestamp`) than one already mapped.
        self.ignored_stale = 0
        #: Terminal statuses for no announced task (see `feed`).
        self.ignored_unannounced = 0
        #: The task id the last of those named while no task was announced: a claim that a
        #: caller whose stream ended without a real terminal may check (`GetTask`).
        self.unconfirmed_task_id: str | None = None
        self._started = False
        self._status_seen: tuple[str, str | None] | None = None
        self._status_time: tuple[int, int] | None = None
        self._recent = _RecentKeys(DEDUPE_WINDOW)
        #: The last appended item: (its parts' texts, the item, its bytes once computed).
        self._previous: tuple[list[str], StreamResponse, bytes | None] | None = None
        self._artifacts: OrderedDict[str, _ArtifactProgress] = OrderedDict()
        self._messages = _RecentKeys(TRACKED_MESSAGES)
        self._anonymous_messages = 0
        #: The remote's id of the question its last interrupted status asked (see the module
        #: docstring), None if it named none: what an answer says it answers.
        self.remote_question_id: str | None = None

    # -- public surface -----------------------------------------------------------------------

    def feed(self, response: StreamResponse) -> list[TargetUpdate]:
        """Updates for one item of a `SendStreamingMessage` or `SubscribeToTask` stream.

        A terminal status update is the end only for the announced task: one that comes before
        any item named the task, or that names no task, yields nothing (a remote may claim the
        end first and then stream its real task; see `unconfirmed_task_id`)."""
        if not isinstance(response, StreamResponse):
            raise _malformed(f"expected a StreamResponse, got {type(response).__name__}")
        which = response.WhichOneof("payload")
        if which == "artifact_update":
            event = response.artifact_update
            if event.append:
                return self._appended(response, event)
        elif which is None:
            raise _malformed("a stream item has no payload (task, message or update)")
        elif which not in ("task", "message", "status_update"):
            raise _malformed(f"a stream item has an unknown payload {which!r}")
        task_id = _task_id_of(response, which)
        if self._foreign(task_id):
            return []
        if which == "status_update" and self._unannounced_terminal(response.status_update):
            return []
        key = hashlib.blake2b(response.SerializeToString(deterministic=True), digest_size=16)
        digest = key.digest()
        # Only an appended item is compared with the one before it, and no other item is
        # byte-equal to an appended one.
        self._previous = None
        if digest in self._recent:
            self.ignored_duplicates += 1
            return []
        if which == "task":
            out = self._task(response.task)
        elif which == "message":
            out = self._message(response.message)
        elif which == "status_update":
            out = self._status_update(response.status_update)
        else:
            out = self._artifact_update(response.artifact_update)
        # After the mapping: a state change clears the window, then this item joins it.
        self._recent.add(digest)
        return self._after_held(out)

    def snapshot(self, task: Task) -> list[TargetUpdate]:
        """Updates for a `Task` read with `GetTask` (or first sent by `SubscribeToTask`).

        Only what the snapshot adds is emitted: artifacts or parts not seen yet, text beyond what
        was streamed, a status different from the last one (and not older than it). The task's
        `history` is not replayed: it mixes the caller's own messages with earlier status
        messages, so turning it into text would invent output the remote never streamed.
        """
        if not isinstance(task, Task):
            raise _malformed(f"expected a Task, got {type(task).__name__}")
        if self._foreign(task.id):
            return []
        return self._after_held(self._task(task))

    def from_send_response(
        self, response: SendMessageResponse | StreamResponse | Task | Message
    ) -> list[TargetUpdate]:
        """Updates for the reply of a non-streaming `SendMessage`: a Task, or a direct Message.

        A direct reply (a `Message` with no task) is the whole interaction: its text is emitted
        as one message and the delegation finishes. The a2a-sdk client hands non-streaming
        replies over as `StreamResponse`s; those go through `feed`.
        """
        if isinstance(response, StreamResponse):
            return self.feed(response)
        if isinstance(response, SendMessageResponse):
            which = response.WhichOneof("payload")
            if which == "task":
                return self.snapshot(response.task)
            if which == "message":
                return self._reply(response.message)
            raise _malformed("a SendMessage reply has neither a task nor a message")
        if isinstance(response, Task):
            return self.snapshot(response)
        if isinstance(response, Message):
            return self._reply(response)
        raise _malformed(f"expected a SendMessage reply, got {type(response).__name__}")

    @property
    def holding(self) -> bool:
        """Whether streamed text is held back (`hold_text`), waiting for `release()`."""
        return bool(self._held)

    def release(self) -> list[TargetUpdate]:
        """The text held back, as one delta (none if nothing is held)."""
        if not self._held:
            return []
        text = "".join(self._held)
        self._held.clear()
        return [self._text_update(Kind.TEXT_DELTA, self._held_artifact, text)]

    def _after_held(self, out: list[TargetUpdate]) -> list[TargetUpdate]:
        """`out` after the text held back, which arrived before the item `out` comes from."""
        if self._held and out:
            return self.release() + out
        return out

    def resume(self) -> None:
        """An answer to an input request was sent: the remote's next statuses are news.

        Call it when continuing the task; a remote that asks the same question again right away
        (same state, same text, same bytes) is then heard again instead of being folded away.
        """
        self._status_seen = None
        self._recent.clear()
        self._previous = None

    def _reply(self, message: Message) -> list[TargetUpdate]:
        if self._foreign(message.task_id):
            return []
        return self._after_held(self._message(message))

    # -- guards -------------------------------------------------------------------------------

    def _foreign(self, task_id: str) -> bool:
        """Whether an item is about another task than the one learned (no id: it is ours)."""
        if task_id and self.task_id is not None and task_id != self.task_id:
            self.ignored_foreign += 1
            return True
        return False

    def _unannounced_terminal(self, event: TaskStatusUpdateEvent) -> bool:
        """Whether a status update is a terminal state for no announced task: sent before any
        item named the task, or naming no task at all. It is not the end (a remote's real task
        may stream on after it); it is counted and its task id kept as a claim to check
        (`unconfirmed_task_id`), never learned, mapped or remembered as seen."""
        if not event.HasField("status") or status_of(event.status.state) not in _TERMINAL:
            return False
        if self._started and event.task_id:
            return False  # for the announced task (another task's was ignored before)
        self.ignored_unannounced += 1
        if event.task_id and not self._started:
            self.unconfirmed_task_id = event.task_id
        return True

    def _learn(
        self,
        out: list[TargetUpdate],
        task_id: str,
        context_id: str,
        status: TaskStatus | None = None,
    ) -> None:
        """Learn the ids; the first item naming a task opens the delegation with its status."""
        if context_id and self.context_id is None:
            self.context_id = context_id
        if task_id and self.task_id is None:
            self.task_id = task_id
        if self.task_id is None or self._started:
            return
        self._started = True
        name = None
        if status is not None:
            name = self.status = status_of(status.state)
            if name not in _INTERRUPTED and name not in _TERMINAL:
                # `subagent.started` carries the first status: a plain repeat of it adds nothing.
                self._status_seen = (name, None)
        out.append(self._update(Kind.STARTED, status=name, card_fingerprint=self.card_fingerprint))

    # -- items --------------------------------------------------------------------------------

    def _appended(
        self, response: StreamResponse, event: TaskArtifactUpdateEvent
    ) -> list[TargetUpdate]:
        """An appended artifact chunk: the bulk of a stream, so its common case is kept short.

        It is a duplicate only of the item right before it (the window of recent digests is not
        involved): items whose parts' texts differ are not identical, so their bytes are compared
        only when the texts match. A chunk of a text artifact already seen, once the task and its
        context are known, is mapped here directly; anything else takes the general path.
        """
        if self._foreign(event.task_id):
            return []
        artifact = event.artifact
        texts = [part.text for part in artifact.parts]  # "" for a part whose content is not text
        data = None
        previous = self._previous
        if previous is not None and previous[0] == texts:
            data = response.SerializeToString(deterministic=True)
            before = previous[2] or previous[1].SerializeToString(deterministic=True)
            if data == before:
                self.ignored_duplicates += 1
                return []
        self._previous = (texts, response, data)
        artifact_id = artifact.artifact_id
        progress = self._artifacts.get(artifact_id)
        if (
            progress is None
            or not progress.is_text
            or not self._started
            or (self.context_id is None and event.context_id)
        ):
            # `_learn` and `_progress` have work to do.
            return self._after_held(self._artifact_update(event))
        self._artifacts.move_to_end(artifact_id)
        if (
            self.hold_text
            and not event.last_chunk
            and self.context_id is not None
            and (not self._held or self._held_artifact == artifact_id)
        ):
            # Held: the update would carry the same ids when released (both are known). Text
            # of another artifact than the one held is not held: an item that yields updates
            # leaves nothing held, so held text is never newer than updates still to be emitted.
            for text in texts:
                if text:
                    progress.closed = False
                    progress.add_text(text)
                    self._held.append(text)
            self._held_artifact = artifact_id
            return []
        out = self.release()
        for text in texts:
            if text:
                progress.closed = False
                progress.add_text(text)
                out.append(self._text_update(Kind.TEXT_DELTA, artifact_id, text))
        if event.last_chunk and not progress.closed:
            progress.closed = True
            out.append(self._text_update(Kind.TEXT_END, artifact_id))
        return out

    def _task(self, task: Task) -> list[TargetUpdate]:
        if not task.id:
            raise _malformed("a task has no id")
        out: list[TargetUpdate] = []
        status = task.status if task.HasField("status") else None
        self._learn(out, task.id, task.context_id, status)
        for artifact in task.artifacts:
            # Before the status: a terminal status ends the delegation, its artifacts come first.
            out.extend(self._artifact_snapshot(artifact))
        if status is not None:
            out.extend(self._status(status))
        return out

    def _status_update(self, event: TaskStatusUpdateEvent) -> list[TargetUpdate]:
        if not event.HasField("status"):
            raise _malformed("a status update has no status")
        out: list[TargetUpdate] = []
        self._learn(out, event.task_id, event.context_id, event.status)
        out.extend(self._status(event.status))
        return out

    def _status(self, status: TaskStatus) -> list[TargetUpdate]:
        """The update for one status, unless it is stale or repeats the last one."""
        name = status_of(status.state)
        if status.HasField("timestamp"):
            when = (status.timestamp.seconds, status.timestamp.nanos)
            stale = self._status_time is not None and when < self._status_time
            if stale and name not in _TERMINAL:  # nothing supersedes a terminal state
                self.ignored_stale += 1
                return []
            if not stale:
                self._status_time = when
        message = status.message if status.HasField("message") else None
        text = _message_text(message) if message is not None else None
        if (name, text) == self._status_seen and name not in _TERMINAL:
            return []
        if name != self.status:
            self._recent.clear()  # a repeat after a state change is a new transition
        self.status = name
        self._status_seen = (name, text)
        fields: dict[str, Any] = {
            "status": name,
            "remote_message_id": (message.message_id or None) if message is not None else None,
            "raw": _status_raw(status, message),
        }
        if name in _INTERRUPTED:
            asked = _remote_question(message) if message is not None else None
            self.remote_question_id = None
            if asked is not None:
                self.remote_question_id = asked.pop("questionId", None)
                fields["response_schema"] = asked.pop("responseSchema", None)
                fields["auth_url"] = asked.pop("authUrl", None)
                fields["remote_lineage"] = tuple(asked.pop("lineage", ()))
                if self.remote_question_id is not None:
                    asked["questionId"] = self.remote_question_id
                fields["raw"] = {**(fields["raw"] or {}), "question": asked}
            return [self._update(Kind.INPUT_REQUIRED, text=text, **fields)]
        if name == "completed":
            self.terminal_state = name
            if not text and self._output_text:
                text = "".join(self._output_text)
            return [self._update(Kind.FINISHED, text=text, **fields)]
        if name == "cancelled":
            self.terminal_state = name
            return [self._update(Kind.CANCELLED, text=text, **fields)]
        if name in _DEFAULT_FAILURE:
            self.terminal_state = name
            code, default = _DEFAULT_FAILURE[name]
            error = DelegationError(
                code=code, message=_truncate(text) if text else default, remote_status=name
            )
            return [self._update(Kind.FAILED, error=error, **fields)]
        return [self._update(Kind.STATUS, text=text, **fields)]

    def _message(self, message: Message) -> list[TargetUpdate]:
        """An agent message: one text message. One with no task is a direct reply, the end."""
        out: list[TargetUpdate] = []
        self._learn(out, message.task_id, message.context_id)
        if message.role == Role.ROLE_USER:
            return out
        if message.message_id:
            key = message.message_id.encode("utf-8")
            if key in self._messages:
                self.ignored_duplicates += 1
                return out
            self._messages.add(key)
        text = _message_text(message)
        if text is not None:
            self._anonymous_messages += int(not message.message_id)
            message_id = message.message_id or f"a2a-message-{self._anonymous_messages}"
            common: dict[str, Any] = {"message_id": message_id, "remote_message_id": message_id}
            out.append(self._update(Kind.TEXT_START, role="assistant", **common))
            out.append(self._update(Kind.TEXT_DELTA, delta=text, **common))
            out.append(self._update(Kind.TEXT_END, **common))
        if self.task_id is None:
            self.terminal_state = "completed"
            out.append(self._update(Kind.FINISHED, status="completed"))
        return out

    # -- artifacts ----------------------------------------------------------------------------

    def _artifact_update(self, event: TaskArtifactUpdateEvent) -> list[TargetUpdate]:
        if not event.HasField("artifact"):
            raise _malformed("an artifact update has no artifact")
        artifact = event.artifact
        if not artifact.artifact_id:
            raise _malformed("an artifact update's artifact has no id")
        out: list[TargetUpdate] = []
        self._learn(out, event.task_id, event.context_id)
        progress = self._progress(artifact)
        if progress.is_text:
            out.extend(self._text_chunk(artifact, progress, event.append, event.last_chunk))
            return out
        if not event.append:
            progress.reset()
        progress.add_parts(artifact.parts)
        out.append(self._artifact(artifact, progress, artifact.parts, append=event.append))
        return out

    def _artifact_snapshot(self, artifact: Artifact) -> list[TargetUpdate]:
        """What a snapshot's artifact adds to what was emitted of it (all of it if new)."""
        if not artifact.artifact_id:
            raise _malformed("a task's artifact has no id")
        known = artifact.artifact_id in self._artifacts
        progress = self._progress(artifact)
        parts = list(artifact.parts)
        if not self.streaming and artifact.name in self.text_artifact_names:
            self._output_text = [_parts_text(parts)]  # a snapshot holds the whole artifact
        if progress.is_text:
            return self._text_whole(artifact, progress, _parts_text(parts))
        if known and progress.parts <= len(parts):
            prefix = hashlib.sha256()
            for part in parts[: progress.parts]:
                prefix.update(_part_key(part))
            if prefix.digest() == progress.digest.digest():
                new = parts[progress.parts :]
                if not new:
                    return []
                progress.add_parts(new)
                return [self._artifact(artifact, progress, new, append=True)]
        progress.reset()
        progress.add_parts(parts)
        return [self._artifact(artifact, progress, parts, append=False)]

    def _progress(self, artifact: Artifact) -> _ArtifactProgress:
        """The artifact's progress. Whether it is text is decided on first sight: later chunks
        of the same id often omit the name."""
        progress = self._artifacts.get(artifact.artifact_id)
        if progress is None:
            output = artifact.name in self.text_artifact_names
            progress = _ArtifactProgress(is_text=output and self.streaming)
            self._artifacts[artifact.artifact_id] = progress
            while len(self._artifacts) > TRACKED_ARTIFACTS:
                self._artifacts.popitem(last=False)
        self._artifacts.move_to_end(artifact.artifact_id)
        return progress

    def _text_chunk(
        self, artifact: Artifact, progress: _ArtifactProgress, append: bool, last: bool
    ) -> list[TargetUpdate]:
        if append:
            out: list[TargetUpdate] = []
            for part in artifact.parts:
                if part.WhichOneof("content") == "text" and part.text:
                    progress.closed = False
                    progress.add_text(part.text)
                    out.append(self._text_update(Kind.TEXT_DELTA, artifact.artifact_id, part.text))
        else:
            out = self._text_whole(artifact, progress, _parts_text(artifact.parts))
        if last and not progress.closed:
            progress.closed = True
            out.append(self._text_update(Kind.TEXT_END, artifact.artifact_id))
        return out

    def _text_whole(
        self, artifact: Artifact, progress: _ArtifactProgress, text: str
    ) -> list[TargetUpdate]:
        """The whole text of a text artifact (a replacing chunk, a snapshot): emit what is new.

        A text that extends what was emitted (servers that resend the text so far) yields only
        its new end; a text that contradicts it cannot be unsaid, so the message so far is closed
        and the new text is emitted as a message of its own (same id, opened again).
        """
        out: list[TargetUpdate] = []
        if progress.text_chars and not progress.extended_by(text):
            if not progress.closed:
                out.append(self._text_update(Kind.TEXT_END, artifact.artifact_id))
            progress.reset()
        new = text[progress.text_chars :]
        if new:
            progress.closed = False
            progress.add_text(new)
            out.append(self._text_update(Kind.TEXT_DELTA, artifact.artifact_id, new))
        return out

    def _text_update(self, kind: str, artifact_id: str, delta: str | None = None) -> TargetUpdate:
        return TargetUpdate(
            kind=kind,
            delta=delta,
            role="assistant",
            message_id=artifact_id,
            remote_message_id=artifact_id,
            remote_artifact_id=artifact_id,
            remote_task_id=self.task_id,
            remote_context_id=self.context_id,
        )

    def _artifact(
        self,
        artifact: Artifact,
        progress: _ArtifactProgress,
        parts: Sequence[Part],
        *,
        append: bool,
    ) -> TargetUpdate:
        """An artifact chunk by reference: what it is and how many bytes it carried, no content.

        An appended chunk inherits what it leaves out (name, media type, URI...) from the
        artifact as emitted before, because the engine keeps the latest reference it was given.
        """
        artifact_id = artifact.artifact_id
        before = progress.ref if append else None
        uri = next(
            (p.url for p in artifact.parts if p.WhichOneof("content") == "url" and p.url), None
        )
        if uri is None and before is not None:
            uri = before.uri
        if uri is None:
            task = quote(self.task_id or "-", safe="")
            uri = f"a2a://{task}/artifacts/{quote(artifact_id, safe='')}"
        metadata = _carried(artifact.metadata) if artifact.HasField("metadata") else None
        ref = ArtifactRef(
            id=artifact_id,
            name=artifact.name or (before.name if before else None),
            description=artifact.description or (before.description if before else None),
            mime_type=_mime_type(artifact.parts) or (before.mime_type if before else None),
            uri=uri,
            metadata=metadata if metadata is not None else (before.metadata if before else None),
        )
        progress.ref = ref
        return self._update(
            Kind.ARTIFACT,
            name=ref.name,
            artifact=ref,
            artifact_bytes=sum(_part_bytes(p) for p in parts),
            artifact_append=append,
            artifact_data=_inline_content(parts),
            remote_artifact_id=artifact_id,
        )

    # -- building updates ---------------------------------------------------------------------

    def _update(self, kind: str, **fields: Any) -> TargetUpdate:
        return TargetUpdate(
            kind=kind,
            remote_task_id=self.task_id,
            remote_context_id=self.context_id,
            **fields,
        )


# -- reading parts ----------------------------------------------------------------------------


def _malformed(problem: str) -> DelegationError:
    return DelegationError(
        code=ErrorCode.MALFORMED_REMOTE_PAYLOAD,
        message=f"The remote A2A agent sent a malformed payload: {problem}.",
    )


def _task_id_of(response: StreamResponse, which: str) -> str:
    if which == "task":
        return response.task.id
    if which == "message":
        return response.message.task_id
    if which == "status_update":
        return response.status_update.task_id
    return response.artifact_update.task_id


def _message_text(message: Message) -> str | None:
    """A message's text parts joined by newlines (as a2a-sdk's helpers do); None if none."""
    texts = [p.text for p in message.parts if p.WhichOneof("content") == "text" and p.text]
    return "\n".join(texts) if texts else None


def _parts_text(parts: Sequence[Part]) -> str:
    """The text of an artifact's parts: chunks of one stream, concatenated."""
    return "".join(p.text for p in parts if p.WhichOneof("content") == "text")


def _part_key(part: Part) -> bytes:
    data = bytes(part.SerializeToString(deterministic=True))
    return len(data).to_bytes(8, "big") + data


def _part_bytes(part: Part) -> int:
    """Content bytes a part carries inline (a URL part's content lives elsewhere)."""
    which = part.WhichOneof("content")
    if which == "text":
        return len(part.text.encode("utf-8"))
    if which == "raw":
        return len(part.raw)
    if which == "data":
        return _json_size(part.data) or part.data.ByteSize()
    return 0


def _inline_content(parts: Sequence[Part]) -> bytes | None:
    """The content a chunk carries inline, for the engine to keep within its artifact bound (it
    never goes into an event or a result): text as UTF-8, raw bytes as they are, a data part as
    its JSON; parts joined in order. None when no part carries content inline (URL parts)."""
    pieces: list[bytes] = []
    for part in parts:
        which = part.WhichOneof("content")
        if which == "text":
            pieces.append(part.text.encode("utf-8", "surrogatepass"))
        elif which == "raw":
            pieces.append(part.raw)
        elif which == "data":
            text = _json_text(part.data)
            if text is not None:
                pieces.append(text.encode("utf-8", "surrogatepass"))
    return b"".join(pieces) if pieces else None


def _first_url(parts: Sequence[Part]) -> str | None:
    return next((p.url for p in parts if p.WhichOneof("content") == "url" and p.url), None)


def _mime_type(parts: Sequence[Part]) -> str | None:
    """The media type of the first file or data part, else of the first part that names one."""
    for part in parts:
        if part.WhichOneof("content") in ("raw", "url", "data"):
            if part.media_type:
                return part.media_type
            if part.WhichOneof("content") == "data":
                return "application/json"
    return next((p.media_type for p in parts if p.media_type), None)


def _json_size(message: proto_message.Message) -> int | None:
    text = _json_text(message)
    return None if text is None else len(text.encode("utf-8"))


def _json_text(message: proto_message.Message) -> str | None:
    """Compact JSON of a Struct/Value, or None if it has none (NaN, infinities, too deep)."""
    try:
        value = json_format.MessageToDict(message)
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (ValueError, RecursionError):
        return None


def _carried(struct: struct_pb2.Struct) -> dict[str, Any] | None:
    """Remote metadata small enough to carry along, else a marker saying why it was left out."""
    if not struct.fields:
        return None
    text = _json_text(struct)
    if text is None:
        return {"omitted": "not_json"}
    size = len(text.encode("utf-8"))
    if size > MAX_CARRIED_JSON_BYTES:
        return {"omitted": "too_large", "bytes": size}
    value = json.loads(text)
    return value if isinstance(value, dict) else None


def _status_raw(status: TaskStatus, message: Message | None) -> dict[str, Any] | None:
    """The small remote details a status has beyond its state and text, kept raw."""
    raw: dict[str, Any] = {}
    if status.state not in _KNOWN_STATES:
        raw["state"] = int(status.state)
    if message is not None:
        data = [p for p in message.parts if p.WhichOneof("content") == "data"]
        if data:
            values = [_json_text(p.data) for p in data]
            size = sum(len(v.encode("utf-8")) for v in values if v is not None)
            if None in values or size > MAX_CARRIED_JSON_BYTES:
                raw["status_data_omitted"] = len(data)
            else:
                raw["status_data"] = [json.loads(v) for v in values if v is not None]
    return raw or None


def _remote_question(message: Message) -> dict[str, Any] | None:
    """What a status message that asks a question says of it (see the module docstring), or
    None if it is no such message: `questionId`, `delegationId`, `agentKey`, `agentName`,
    `asker`, `reason` (bounded ids), `lineage` (a list of them), `responseSchema` (an object),
    `authUrl` (an http(s) URL), each only when present and well-typed."""
    if QUESTION_METADATA_KEY not in message.metadata:
        return None
    ours = message.metadata[QUESTION_METADATA_KEY]
    if not isinstance(ours, struct_pb2.Struct) or not _is_question(ours):
        return None
    part = next(
        (
            p
            for p in message.parts
            if p.WhichOneof("content") == "data"
            and p.data.WhichOneof("kind") == "struct_value"
            and _is_question(p.data.struct_value)
        ),
        None,
    )
    if part is None:
        return None
    try:
        value = json_format.MessageToDict(part.data.struct_value)
    except (ValueError, RecursionError):
        return None
    asked: dict[str, Any] = {}
    for key in ("questionId", "delegationId", "agentKey", "agentName", "asker", "reason"):
        item = value.get(key)
        if isinstance(item, str) and item and len(item) <= MAX_REMOTE_ID_CHARS:
            asked[key] = item
    lineage = value.get("lineage")
    if isinstance(lineage, list):
        ids = [i for i in lineage if isinstance(i, str) and i and len(i) <= MAX_REMOTE_ID_CHARS]
        asked["lineage"] = ids[-MAX_REMOTE_LINEAGE:]
    schema = value.get("responseSchema")
    if isinstance(schema, dict) and schema:
        size = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode())
        if size <= MAX_REMOTE_SCHEMA_BYTES:
            asked["responseSchema"] = schema
    auth_url = value.get("authUrl")
    if isinstance(auth_url, str) and auth_url.startswith(("https://", "http://")):
        asked["authUrl"] = auth_url[:2048]
    return asked


def _is_question(struct: struct_pb2.Struct) -> bool:
    return "kind" in struct and struct["kind"] == QUESTION_KIND


def answer_metadata(question_id: str | None) -> dict[str, Any]:
    """The metadata of an answer message naming the remote question it answers (so that a
    remote that asked another meanwhile refuses it rather than taking it as that one's)."""
    return {QUESTION_METADATA_KEY: {"questionId": question_id}} if question_id else {}


def _truncate(text: str) -> str:
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return text[: MAX_ERROR_CHARS - 1] + "…"
