"""A terminal status for no announced task is not the end (`A2AEventMapper.feed`).

A hostile or sloppy remote may say COMPLETED (or FAILED, CANCELED, REJECTED) before it announces
its task, for a task id that does not exist, or with no task id at all, and then stream its real
task. The delegation must get the real output and end on the real terminal, once.
"""

from __future__ import annotations

import pytest
from a2a.types import Part, StreamResponse, TaskState

from adapters.a2a._mapping import A2AEventMapper
from engine import (
    DelegationIdentity,
    DelegationPolicy,
    DelegationState,
    Kind,
    Status,
    TargetUpdate,
)
from tests.helpers.a2a_builders import on_artifact, on_status, on_task, task
from tests.helpers.events import kinds

S = TaskState
TERMINALS = [
    S.TASK_STATE_COMPLETED,
    S.TASK_STATE_FAILED,
    S.TASK_STATE_CANCELED,
    S.TASK_STATE_REJECTED,
]
TERMINAL_KINDS = {Kind.FINISHED, Kind.FAILED, Kind.CANCELLED}
IDENTITY = DelegationIdentity(
    run_id="run-1", delegation_id="del-1", agent_key="remote", agent_name="R", protocol="a2a"
)


def real_stream(task_id: str = "task-1") -> list[StreamResponse]:
    return [
        on_task(task(S.TASK_STATE_SUBMITTED, task_id=task_id)),
        on_status(S.TASK_STATE_WORKING, "working", task_id=task_id, seconds=2),
        on_artifact("out", Part(text="Hello "), name="assistant-output", task_id=task_id),
        on_artifact(
            "out", Part(text="world"), name="assistant-output", append=True, task_id=task_id
        ),
        on_artifact("out", Part(text="."), append=True, last=True, task_id=task_id),
        on_status(S.TASK_STATE_COMPLETED, "done: the real end", task_id=task_id, seconds=3),
    ]


def mapped(items: list[StreamResponse], mapper: A2AEventMapper) -> list[TargetUpdate]:
    return [update for item in items for update in mapper.feed(item)]


def through_engine(items: list[StreamResponse]) -> DelegationState:
    mapper = A2AEventMapper()
    state = DelegationState(IDENTITY, DelegationPolicy(), clock=lambda: 0.0)
    for update in mapped(items, mapper):
        state.feed(update)
    return state


@pytest.mark.parametrize("state", TERMINALS)
@pytest.mark.parametrize("early_id", ["task-1", "task-other", ""])
def test_an_early_terminal_neither_ends_nor_starts_the_delegation(
    state: int, early_id: str
) -> None:
    mapper = A2AEventMapper()
    early = on_status(state, "done: too early", task_id=early_id, seconds=1)
    assert mapper.feed(early) == []
    assert mapper.ignored_unannounced == 1
    assert mapper.unconfirmed_task_id == (early_id or None)
    assert (mapper.task_id, mapper.terminal_state, mapper.status) == (None, None, None)
    updates = mapped(real_stream(), mapper)
    assert [u.kind for u in updates if u.kind in TERMINAL_KINDS] == [Kind.FINISHED]
    assert updates[-1].kind == Kind.FINISHED
    assert updates[-1].text == "done: the real end"
    assert "".join(u.delta or "" for u in updates if u.kind == Kind.TEXT_DELTA) == "Hello world."
    assert {u.remote_task_id for u in updates} == {"task-1"}


def test_the_delegation_gets_the_real_output_and_one_terminal_through_the_engine() -> None:
    early = on_status(S.TASK_STATE_COMPLETED, "done: too early", seconds=1)
    state = through_engine([early, *real_stream()])
    result = state.result
    assert result is not None and result.status == Status.COMPLETED
    assert result.summary == "done: the real end"
    assert [m.text for m in result.messages] == ["Hello world."]
    assert result.remote_task_id == "task-1"


def test_an_early_terminal_repeated_byte_for_byte_later_is_the_real_end() -> None:
    # Not remembered as seen: the same bytes once the task is announced are the end.
    end = on_status(S.TASK_STATE_COMPLETED, "done", seconds=3)
    mapper = A2AEventMapper()
    assert mapper.feed(end) == []
    mapper.feed(on_task(task()))
    assert kinds(mapper.feed(end)) == [Kind.FINISHED]


def test_a_terminal_naming_no_task_after_the_announcement_is_not_the_end() -> None:
    mapper = A2AEventMapper()
    mapper.feed(on_task(task()))
    assert mapper.feed(on_status(S.TASK_STATE_COMPLETED, "bogus", task_id="")) == []
    assert mapper.ignored_unannounced == 1
    assert mapper.unconfirmed_task_id is None  # no claim to check: the task is known
    assert kinds(mapper.feed(on_status(S.TASK_STATE_COMPLETED, "real"))) == [Kind.FINISHED]


def test_a_terminal_for_another_task_after_the_announcement_is_foreign() -> None:
    mapper = A2AEventMapper()
    mapper.feed(on_task(task()))
    assert mapper.feed(on_status(S.TASK_STATE_COMPLETED, "x", task_id="task-other")) == []
    assert mapper.ignored_foreign == 1 and mapper.terminal_state is None


def test_a_task_first_announced_by_a_status_still_ends_on_its_terminal() -> None:
    # Remotes that never send a Task: a non-terminal item announces the task, as before.
    mapper = A2AEventMapper()
    assert kinds(mapper.feed(on_status(S.TASK_STATE_WORKING, "on it"))) == [
        Kind.STARTED,
        Kind.STATUS,
    ]
    assert kinds(mapper.feed(on_status(S.TASK_STATE_COMPLETED, "done"))) == [Kind.FINISHED]
    assert mapper.ignored_unannounced == 0


def test_a_snapshot_announces_and_may_end_the_task() -> None:
    # A Task (GetTask, SubscribeToTask's first item) is the task itself, its state is the truth:
    # that is how a claim is confirmed.
    mapper = A2AEventMapper()
    assert mapper.feed(on_status(S.TASK_STATE_COMPLETED, "claim", seconds=1)) == []
    updates = mapper.snapshot(task(S.TASK_STATE_COMPLETED, "done", seconds=2))
    assert kinds(updates) == [Kind.STARTED, Kind.FINISHED]
