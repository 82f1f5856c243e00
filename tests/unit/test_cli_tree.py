"""The terminal tree of `subagent-engine run` (`cli._tree`), fed constructed event sequences.

Each test builds the events a run journals (parent text, its `delegate_to_agent` calls, the
delegations under them, nested subagents, input waits, failures) and reads the tree back as
frame lines, plain notes and node states. A property then feeds arbitrary sequences: rendering
never fails, no line is wider than asked or carries a control character, and the subagent
nodes are exactly the delegations and nested subagents started.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cli._tree import (
    CANCELLED,
    DONE,
    FAILED,
    RUNNING,
    STARTING,
    STREAMING,
    WAITING,
    RunTree,
    clean_text,
    cut_to_width,
    redraw,
)
from engine import DelegationError, DelegationEvent, Kind


def ev(kind: str, **fields: Any) -> DelegationEvent:
    return DelegationEvent(kind=kind, run_id="run-1", **fields)


def sub(kind: str, delegation: str, **fields: Any) -> DelegationEvent:
    return ev(kind, delegation_id=delegation, agent_key=delegation.removeprefix("d-"), **fields)


def call(tool_call_id: str, agent: str) -> list[DelegationEvent]:
    return [
        ev(Kind.PARENT_TOOL_CALL_START, tool_call_id=tool_call_id, tool_name="delegate_to_agent"),
        ev(
            Kind.PARENT_TOOL_CALL_ARGS,
            tool_call_id=tool_call_id,
            delta=f'{{"agent": "{agent}", "objective": "look"}}',
        ),
        ev(Kind.PARENT_TOOL_CALL_END, tool_call_id=tool_call_id),
    ]


def feed(tree: RunTree, events: list[DelegationEvent], start: float = 0.0) -> list[str]:
    notes: list[str] = []
    for step, event in enumerate(events):
        notes += tree.apply(event, start + step)
    return notes


def two_delegations() -> list[DelegationEvent]:
    return [
        ev(Kind.RUN_STARTED),
        ev(Kind.PARENT_TEXT_START, message_id="m1"),
        ev(Kind.PARENT_TEXT_DELTA, message_id="m1", delta="Asking two."),
        ev(Kind.PARENT_TEXT_END, message_id="m1"),
        *call("c1", "research"),
        *call("c2", "review"),
        sub(Kind.STARTED, "d-research", parent_tool_call_id="c1", status="working"),
        sub(Kind.STARTED, "d-review", parent_tool_call_id="c2", status="working"),
        sub(Kind.STATUS, "d-review", text="Reading the design"),
        sub(Kind.TEXT_DELTA, "d-research", message_id="r1", delta="first line\nsecond "),
        sub(Kind.TEXT_DELTA, "d-research", message_id="r1", delta="line grows"),
    ]


def test_parallel_delegations_hang_under_their_own_calls() -> None:
    tree = RunTree("parent (scripted)")
    feed(tree, two_delegations())
    lines = tree.frame(now=20.0, width=200)
    assert lines[0].startswith("parent (scripted)  streaming")
    assert lines[1].startswith("├─ delegate_to_agent  running") and "→ research" in lines[1]
    assert lines[2].startswith("│  └─ research  streaming") and "second line grows" in lines[2]
    assert lines[3].startswith("└─ delegate_to_agent  running") and "→ review" in lines[3]
    assert lines[4].startswith("   └─ review  streaming") and "Reading the design" in lines[4]
    assert [node.label for node in tree.subagents()] == ["research", "review"]


def test_statuses_and_elapsed_time_follow_the_delegation() -> None:
    tree = RunTree()
    feed(tree, two_delegations()[:-4])
    research = tree.subagents()[0]
    assert research.status == STARTING
    tree.apply(sub(Kind.TEXT_DELTA, "d-research", message_id="r", delta="x"), 30.0)
    assert research.status == STREAMING
    tree.apply(sub(Kind.INPUT_REQUIRED, "d-research", text="Which year?"), 31.0)
    assert (research.status, research.last_line) == (WAITING, "Which year?")
    assert "waiting for input" in tree.frame(now=32.0, width=200)[2]
    tree.apply(sub(Kind.STATUS, "d-research", status="working"), 33.0)
    assert research.status == STREAMING
    tree.apply(sub(Kind.FINISHED, "d-research", status="completed", text="Found it."), 40.0)
    assert (research.status, research.last_line, research.ended_at) == (DONE, "Found it.", 40.0)
    # The elapsed time stops when the node ends: from its start to 40.
    assert f"{40.0 - research.started_at:.1f}s" in tree.frame(now=99.0, width=200)[2]
    tree.apply(sub(Kind.TEXT_DELTA, "d-research", message_id="r", delta="late"), 41.0)
    assert research.status == DONE  # nothing moves an ended node


def test_a_failed_delegation_and_a_failed_run() -> None:
    tree = RunTree()
    feed(tree, two_delegations())
    error = DelegationError(code="remote_failed", message="The remote said no.")
    notes = tree.apply(sub(Kind.FAILED, "d-review", error=error), 50.0)
    review = tree.subagents()[1]
    assert (review.status, review.last_line) == (FAILED, "The remote said no.")
    assert notes == ["    review [failed, 39.0s]: The remote said no."]
    tree.apply(
        ev(Kind.PARENT_TOOL_CALL_RESULT, tool_call_id="c2", result={"status": "failed"}), 51.0
    )
    assert tree.root.children[1].status == FAILED
    tree.apply(sub(Kind.CANCELLED, "d-research", text="run cancelled"), 52.0)
    assert tree.subagents()[0].status == CANCELLED
    failure = DelegationError(code="internal_error", message="The parent agent failed: boom")
    tree.apply(ev(Kind.RUN_FAILED, error=failure), 53.0)
    assert (tree.outcome, tree.error) == (Kind.RUN_FAILED, "The parent agent failed: boom")
    assert tree.root.status == FAILED


def test_the_result_text_is_the_parents_last_message() -> None:
    tree = RunTree()
    feed(
        tree,
        [
            *two_delegations(),
            ev(Kind.PARENT_TOOL_CALL_RESULT, tool_call_id="c1", result={"status": "completed"}),
            ev(Kind.PARENT_TEXT_START, message_id="m2"),
            ev(Kind.PARENT_TEXT_DELTA, message_id="m2", delta="Both "),
            ev(Kind.PARENT_TEXT_DELTA, message_id="m2", delta="answered.\n- a\n- b"),
            ev(Kind.PARENT_TEXT_END, message_id="m2"),
            ev(Kind.RUN_FINISHED),
        ],
    )
    assert tree.result_text == "Both answered.\n- a\n- b"
    assert tree.root.children[0].status == DONE and tree.root.children[1].status == RUNNING
    assert (tree.outcome, tree.root.status) == (Kind.RUN_FINISHED, DONE)


def test_nested_subagents_hang_under_their_parent() -> None:
    tree = RunTree()
    feed(
        tree,
        [
            *call("c1", "planner"),
            sub(Kind.STARTED, "d-planner", parent_tool_call_id="c1"),
            sub(Kind.NESTED_STARTED, "d-planner", nested_id="d-planner/a", name="searcher"),
            sub(
                Kind.NESTED_STARTED,
                "d-planner",
                nested_id="d-planner/b",
                nested_parent_id="d-planner/a",
                name="reader",
            ),
            sub(Kind.TEXT_DELTA, "d-planner", nested_id="d-planner/b", delta="reading page 2"),
            sub(Kind.NESTED_FINISHED, "d-planner", nested_id="d-planner/b", text="read"),
            sub(Kind.TEXT_DELTA, "d-planner", message_id="p", delta="planning"),
        ],
    )
    lines = tree.frame(now=10.0, width=200)
    assert lines[1].startswith("└─ delegate_to_agent")
    assert lines[2].startswith("   └─ planner  streaming") and lines[2].endswith("planning")
    assert lines[3].startswith("      └─ searcher  starting")
    assert lines[4].startswith("         └─ reader  done") and lines[4].endswith("read")
    assert [node.kind for node in tree.subagents()] == ["subagent", "nested", "nested"]


def test_events_of_a_delegation_never_started_are_ignored() -> None:
    tree = RunTree()
    assert tree.apply(sub(Kind.TEXT_DELTA, "d-ghost", delta="boo"), 1.0) == []
    assert tree.apply(sub(Kind.FINISHED, "d-ghost"), 2.0) == []
    assert tree.subagents() == [] and len(tree.frame(now=3.0, width=80)) == 1


def test_a_delegation_without_a_known_call_hangs_from_the_parent() -> None:
    tree = RunTree()
    tree.apply(sub(Kind.STARTED, "d-x", parent_tool_call_id="unknown"), 1.0)
    assert tree.frame(now=2.0, width=80)[1].startswith("└─ x  starting")


def test_very_long_lines_are_cut_to_the_width() -> None:
    tree = RunTree()
    feed(tree, two_delegations())
    tree.apply(sub(Kind.TEXT_DELTA, "d-review", message_id="v", delta="word " * 500), 20.0)
    tree.apply(sub(Kind.STATUS, "d-research", text="界" * 300), 21.0)
    for width in (10, 40, 79):
        lines = tree.frame(now=30.0, width=width)
        assert all(len(line) <= width for line in lines)
        assert lines[-1].endswith("…")
        wide = lines[2]  # research: wide characters count two columns
        assert sum(2 if ch == "界" else 1 for ch in wide) <= width
    assert cut_to_width("abc", 3) == "abc" and cut_to_width("abcd", 3) == "ab…"
    assert cut_to_width("界界", 3) == "界…" and cut_to_width("x", 0) == ""


def test_escape_sequences_in_remote_text_are_never_drawn() -> None:
    tree = RunTree()
    feed(tree, two_delegations())
    hostile = "\x1b[2J\x1b]0;pwned\x07 clear\rscreen\u202e"
    tree.apply(sub(Kind.STATUS, "d-review", text=hostile), 20.0)
    drawn = "\n".join(tree.frame(now=21.0, width=200))
    assert "\x1b" not in drawn and "\x07" not in drawn and "\r" not in drawn
    assert "\u202e" not in drawn
    assert clean_text(hostile) == "[2J ]0;pwned clear screen"


def test_colour_marks_the_status_only() -> None:
    tree = RunTree()
    feed(tree, two_delegations())
    lines = tree.frame(now=20.0, width=200, colour=True)
    assert "\x1b[36mstreaming\x1b[0m" in lines[0]
    plain = tree.frame(now=20.0, width=200)
    assert [line.replace("\x1b[36m", "").replace("\x1b[0m", "") for line in lines] == plain


def test_a_frame_taller_than_the_terminal_says_what_it_left_out() -> None:
    tree = RunTree()
    for index in range(30):
        tree.apply(sub(Kind.STARTED, f"d-{index}"), float(index))
    lines = tree.frame(now=40.0, width=80, height=10)
    assert len(lines) == 10 and lines[-1] == "… 22 more"


def test_plain_notes_tell_changes_not_every_delta() -> None:
    tree = RunTree()
    notes = feed(tree, two_delegations())
    assert notes[:2] == ["parent [streaming, 1.0s]", "parent [streaming, 3.0s]: Asking two."]
    # Each note tells the node's own elapsed time: the call started at step 4, ended at 6.
    assert "  delegate_to_agent [running, 2.0s]: → research: look" in notes
    assert "    research [starting, 0.0s]" in notes
    assert "    review [streaming, 1.0s]: Reading the design" in notes
    assert not any("second line grows" in note for note in notes)  # deltas: no note
    ended = tree.apply(sub(Kind.TEXT_END, "d-research", message_id="r1"), 20.0)
    assert ended == ["    research [streaming, 10.0s]: second line grows"]


def test_redraw_moves_up_over_the_previous_frame_and_erases_it() -> None:
    assert redraw(0, ["a", "b"]) == "\r\x1b[Ja\x1b[K\nb\x1b[K\n"
    assert redraw(2, ["c"]) == "\r\x1b[2A\x1b[Jc\x1b[K\n"


# -- any sequence ---------------------------------------------------------------------------

DELEGATIONS = ("d-a", "d-b", "d-c")
NESTED = ("n1", "n2", None)
TEXTS = st.text(max_size=300) | st.sampled_from(["\x1b[31m", "界" * 90, "a\nb\r\nc", ""])


@st.composite
def events(draw: st.DrawFn) -> DelegationEvent:
    kind = draw(
        st.sampled_from(
            sorted(
                {
                    value
                    for name, value in vars(Kind).items()
                    if name.isupper() and isinstance(value, str)
                }
            )
        )
    )
    delegation = draw(st.sampled_from((*DELEGATIONS, None)))
    nested = draw(st.sampled_from(NESTED))
    text = draw(TEXTS)
    fields: dict[str, Any] = {
        "delegation_id": delegation,
        "agent_key": draw(st.sampled_from(("research", None, "\x1b[1mx"))),
        "parent_tool_call_id": draw(st.sampled_from(("c1", "c2", None))),
        "tool_call_id": draw(st.sampled_from(("c1", "c2", None))),
        "message_id": draw(st.sampled_from(("m1", None))),
        "nested_id": nested and f"{delegation}/{nested}",
        "nested_parent_id": draw(st.sampled_from((None, f"{delegation}/n1"))),
        "name": draw(st.sampled_from((None, "searcher", Kind.PARENT_STATUS_NAME))),
        "text": text,
        "delta": draw(TEXTS),
        "raw": {"text": text},
        "args": draw(st.sampled_from((None, {"agent": "a"}, "{"))),
        "result": draw(st.sampled_from((None, {"status": "failed"}, "x"))),
        "error": draw(st.sampled_from((None, DelegationError(code="x", message=text)))),
    }
    return ev(kind, **fields)


@settings(max_examples=300, deadline=None)
@given(st.lists(events(), max_size=60), st.integers(min_value=0, max_value=120))
def test_any_sequence_renders_and_counts_the_subagents_started(
    sequence: list[DelegationEvent], width: int
) -> None:
    tree = RunTree()
    for step, event in enumerate(sequence):
        for note in tree.apply(event, float(step)):
            assert "\x1b" not in note and "\n" not in note
        for line in tree.frame(now=float(step), width=width, height=12):
            assert len(line) <= max(width, 0) and "\x1b" not in line and "\n" not in line
    started = {e.delegation_id for e in sequence if e.kind == Kind.STARTED and e.delegation_id}
    nested = {
        e.nested_id
        for index, e in enumerate(sequence)
        if e.kind == Kind.NESTED_STARTED
        and e.nested_id
        and e.delegation_id  # an event without one is the parent's, as for STARTED above
        and any(
            s.kind == Kind.STARTED and s.delegation_id == e.delegation_id for s in sequence[:index]
        )
    }
    nodes = tree.subagents()
    assert len([n for n in nodes if n.kind == "subagent"]) == len(started)
    assert len([n for n in nodes if n.kind == "nested"]) == len(nested)
    assert len(nodes) == len(started) + len(nested)
