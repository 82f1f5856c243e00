"""A run drawn as a live tree in a terminal: journal events in, a tree model, lines out (sans-IO).

This module owns how a run looks in a terminal and nothing of the terminal itself: it never reads
a clock, writes to a stream or asks for the terminal's size. The caller feeds it every event of a
run in journal order (`RunTree.apply`, with the time it saw the event) and asks for either

- `RunTree.frame(now, width)`: the whole tree as lines, for a terminal that is redrawn in place
  (`redraw` turns a frame into the ANSI text that replaces the previous one), or
- the notes `apply` returns: one plain line per change worth telling (a node appeared, changed
  status, said a status line or finished a line of text), for output that is only appended to
  (a pipe, a file, `NO_COLOR` logs).

The tree: the parent (the run itself) at the root; under it the parent's tool calls; under a
`delegate_to_agent` call the delegation it started (matched by `parent_tool_call_id`; one whose
call is unknown hangs from the parent); under a delegation the nested subagents its remote
reported (`subagent.nested.started`, under `nested_parent_id`). Each node has a status (starting,
streaming, running, waiting for input, done, failed, cancelled), the time it appeared and ended,
and a short last line: the last line of text it streamed, its status text, the tool it called,
its question or its result. Events of a delegation that never started are ignored, so the
subagent nodes are exactly the delegations (and nested subagents) started.

Remote text is untrusted: control characters (escape sequences included) are replaced before
anything is drawn, and every line is cut to the width given, counting wide characters as two.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator, Sequence
from typing import Any, Final

import attrs

from engine import DelegationEvent, Kind

__all__ = [
    "CANCELLED",
    "DONE",
    "FAILED",
    "RUNNING",
    "STARTING",
    "STREAMING",
    "WAITING",
    "RunTree",
    "TreeNode",
    "clean_text",
    "cut_to_width",
    "redraw",
]

STARTING: Final = "starting"
STREAMING: Final = "streaming"
#: A parent's tool call whose arguments are complete and whose result has not come.
RUNNING: Final = "running"
WAITING: Final = "waiting for input"
DONE: Final = "done"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
ENDED: Final = frozenset({DONE, FAILED, CANCELLED})

#: SGR colours per status (used only when the caller asks for colour).
_COLOURS: Final = {
    STARTING: "2",
    STREAMING: "36",
    RUNNING: "36",
    WAITING: "33;1",
    DONE: "32",
    FAILED: "31;1",
    CANCELLED: "35",
}
#: How much streamed text a node keeps to find its last line.
_TAIL: Final = 2000
_ELLIPSIS: Final = "…"


def clean_text(text: str) -> str:
    """`text` on one line with nothing a terminal would interpret: control characters (ESC,
    CR, BEL ...) and other non-printing ones become spaces, runs of spaces become one."""
    out = [
        " " if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp") else ch
        for ch in text
    ]
    return " ".join("".join(out).split())


def _width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def cut_to_width(text: str, width: int) -> str:
    """`text` (already clean) cut to at most `width` terminal columns, ending in an ellipsis
    when cut."""
    if width <= 0:
        return ""
    total = sum(_width(ch) for ch in text)
    if total <= width:
        return text
    kept: list[str] = []
    used = 0
    for ch in text:
        w = _width(ch)
        if used + w > width - 1:
            break
        kept.append(ch)
        used += w
    return "".join(kept) + _ELLIPSIS


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        cleaned = clean_text(line)
        if cleaned:
            return cleaned
    return ""


def elapsed_text(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s"


@attrs.define(eq=False)
class TreeNode:
    """One row of the tree: the parent, one of its tool calls, a delegation or a nested
    subagent (`kind`: parent, tool, subagent, nested)."""

    id: str
    kind: str
    label: str
    started_at: float
    status: str = STARTING
    ended_at: float | None = None
    last_line: str = ""
    children: list[TreeNode] = attrs.field(factory=list)
    #: Streamed text per message, its tail only (what the last line is read from).
    streams: dict[str, str] = attrs.field(factory=dict)

    def elapsed(self, now: float) -> float:
        return (self.ended_at if self.ended_at is not None else now) - self.started_at

    def walk(self, depth: int = 0) -> Iterator[tuple[int, TreeNode]]:
        yield depth, self
        for child in self.children:
            yield from child.walk(depth + 1)


class RunTree:
    """The tree of one run, built from its events (see the module's docstring)."""

    def __init__(self, parent_label: str = "parent", *, now: float = 0.0) -> None:
        self.root = TreeNode(id="", kind="parent", label=parent_label, started_at=now)
        self._tools: dict[str, TreeNode] = {}
        self._delegations: dict[str, TreeNode] = {}
        self._nested: dict[str, TreeNode] = {}
        #: The run's terminal kind once it came (`run.finished`, `run.failed`, ...).
        self.outcome: str | None = None
        #: The run's error message (`run.failed`, `run.cancelled`), if any.
        self.error: str | None = None
        self._final_text = ""
        self._parent_message = ""

    # -- reading ---------------------------------------------------------------------------

    @property
    def result_text(self) -> str:
        """What the run answered: its terminal's text, else the parent's last message."""
        return self._final_text or self._parent_message.strip()

    def subagents(self) -> list[TreeNode]:
        """The delegation and nested subagent nodes, in tree order."""
        return [node for _, node in self.root.walk() if node.kind in ("subagent", "nested")]

    # -- events in ---------------------------------------------------------------------------

    def apply(self, event: DelegationEvent, now: float) -> list[str]:
        """Fold one event into the tree (seen at `now`); the plain notes it is worth."""
        if event.delegation_id is None:
            return self._parent_event(event, now)
        delegation = self._delegations.get(event.delegation_id)
        if event.kind == Kind.STARTED:
            if delegation is not None:
                return []
            label = event.agent_key or event.agent_name or event.delegation_id
            node = TreeNode(id=event.delegation_id, kind="subagent", label=label, started_at=now)
            self._delegations[event.delegation_id] = node
            call = self._tools.get(event.parent_tool_call_id or "")
            (call or self.root).children.append(node)
            if event.text:
                node.last_line = clean_text(event.text)
            return [self._note(node, now)]
        if delegation is None:
            return []  # a delegation this tree never saw start
        if event.kind == Kind.NESTED_STARTED and event.nested_id:
            if event.nested_id in self._nested:
                return []
            above = self._nested.get(event.nested_parent_id or "", delegation)
            label = event.name or event.remote_subagent_id or event.nested_id
            node = TreeNode(id=event.nested_id, kind="nested", label=label, started_at=now)
            node.last_line = clean_text(event.text or "")
            self._nested[event.nested_id] = node
            above.children.append(node)
            return [self._note(node, now)]
        node = self._nested.get(event.nested_id or "", delegation)
        return self._progress(node, event, now)

    def _parent_event(self, event: DelegationEvent, now: float) -> list[str]:
        root, kind = self.root, event.kind
        if kind == Kind.RUN_STARTED:
            return []
        if kind in Kind.RUN_TERMINALS:
            self.outcome = kind
            if kind == Kind.RUN_FINISHED:
                self._final_text = (event.text or "").strip()
            elif event.error is not None:
                self.error = event.error.message
            elif event.text:
                self.error = event.text
            status = {Kind.RUN_FINISHED: DONE, Kind.RUN_FAILED: FAILED}.get(kind, CANCELLED)
            if self.error:
                root.last_line = clean_text(self.error)
            return self._end(root, status, now)
        if kind in (Kind.PARENT_TOOL_CALL_START, Kind.PARENT_TOOL_CALL_ARGS):
            call_id = event.tool_call_id or ""
            call = self._tools.get(call_id)
            if call is None:
                name = event.tool_name or "tool"
                call = TreeNode(id=call_id, kind="tool", label=name, started_at=now)
                self._tools[call_id] = call
                root.children.append(call)
                notes = self._set_status(root, STREAMING, now)  # the call's note: at its end
            else:
                notes = []
            if kind == Kind.PARENT_TOOL_CALL_ARGS:
                if isinstance(event.args, dict):  # the whole arguments at once
                    call.streams["args"] = json.dumps(event.args)
                else:
                    call.streams["args"] = (call.streams.get("args", "") + _args_text(event))[
                        -_TAIL:
                    ]
                call.last_line = _call_summary(call.streams["args"])
                if call.status == STARTING:
                    call.status = STREAMING
            return notes
        if kind == Kind.PARENT_TOOL_CALL_END:
            call = self._tools.get(event.tool_call_id or "")
            return [] if call is None else self._set_status(call, RUNNING, now)
        if kind == Kind.PARENT_TOOL_CALL_RESULT:
            call = self._tools.get(event.tool_call_id or "")
            if call is None:
                return []
            outcome = event.result.get("status") if isinstance(event.result, dict) else None
            failed = event.error is not None or outcome in ("failed", "rejected")
            return self._end(call, FAILED if failed else DONE, now)
        if kind == Kind.PARENT_TEXT_START:
            self._parent_message = ""
            return self._set_status(root, STREAMING, now)
        if kind in (Kind.PARENT_TEXT_DELTA, Kind.PARENT_REASONING_DELTA):
            if kind == Kind.PARENT_TEXT_DELTA:
                self._parent_message += event.delta or ""
            return self._stream(root, event, now)
        if kind in (Kind.PARENT_TEXT_END, Kind.PARENT_REASONING_END):
            return self._line_done(root, event, now)
        if kind == Kind.PARENT_CUSTOM and event.name == Kind.PARENT_STATUS_NAME:
            text = (event.raw or {}).get("text")
            if isinstance(text, str) and text.strip():
                root.last_line = clean_text(text)
                return [self._note(root, now)]
        return []

    def _progress(self, node: TreeNode, event: DelegationEvent, now: float) -> list[str]:
        kind = event.kind
        if kind in (Kind.FINISHED, Kind.NESTED_FINISHED):
            if event.text:
                node.last_line = clean_text(event.text)
            return self._end(node, DONE, now)
        if kind in (Kind.FAILED, Kind.NESTED_FAILED):
            message = event.error.message if event.error is not None else event.text
            if message:
                node.last_line = clean_text(message)
            return self._end(node, FAILED, now)
        if kind in (Kind.CANCELLED, Kind.NESTED_CANCELLED):
            if event.text:
                node.last_line = clean_text(event.text)
            return self._end(node, CANCELLED, now)
        if node.status in ENDED:
            return []
        if kind == Kind.INPUT_REQUIRED:
            node.last_line = clean_text(event.text or "")
            return self._set_status(node, WAITING, now, force_note=True)
        if kind in (Kind.TEXT_DELTA, Kind.REASONING_DELTA):
            return self._stream(node, event, now)
        if kind in (Kind.TEXT_END, Kind.REASONING_END):
            return self._line_done(node, event, now)
        if kind == Kind.STATUS:
            if event.text and event.text.strip():
                node.last_line = clean_text(event.text)
                return self._set_status(node, STREAMING, now, force_note=True)
            return self._set_status(node, STREAMING, now)
        if kind == Kind.TOOL_CALL_START:
            node.last_line = clean_text(f"calls {event.tool_name or 'a tool'}")
            return self._set_status(node, STREAMING, now, force_note=True)
        if kind == Kind.ARTIFACT and event.artifact is not None:
            node.last_line = clean_text(f"artifact {event.artifact.name}")
            return self._set_status(node, STREAMING, now, force_note=True)
        if kind.startswith("subagent."):
            return self._set_status(node, STREAMING, now)
        return []

    # -- node updates ------------------------------------------------------------------------

    def _stream(self, node: TreeNode, event: DelegationEvent, now: float) -> list[str]:
        key = f"{event.kind.rsplit('.', 1)[0]}:{event.message_id or ''}"
        text = (node.streams.get(key, "") + (event.delta or ""))[-_TAIL:]
        node.streams[key] = text
        line = _last_line(text)
        if line:
            node.last_line = line
        return self._set_status(node, STREAMING, now)

    def _line_done(self, node: TreeNode, event: DelegationEvent, now: float) -> list[str]:
        """A message ended: its last line is a note (not each delta)."""
        key = f"{event.kind.rsplit('.', 1)[0]}:{event.message_id or ''}"
        text = node.streams.pop(key, "")
        line = _last_line(text)
        if not line:
            return []
        node.last_line = line
        return [self._note(node, now)]

    def _set_status(
        self, node: TreeNode, status: str, now: float, *, force_note: bool = False
    ) -> list[str]:
        if node.status in ENDED:
            return []
        if node.status == status and not force_note:
            return []
        node.status = status
        return [self._note(node, now)]

    def _end(self, node: TreeNode, status: str, now: float) -> list[str]:
        if node.status in ENDED:
            return []
        node.status = status
        node.ended_at = now
        return [self._note(node, now)]

    def _depth(self, node: TreeNode) -> int:
        return next((depth for depth, seen in self.root.walk() if seen is node), 0)

    def _note(self, node: TreeNode, now: float) -> str:
        indent = "  " * self._depth(node)
        tail = f": {node.last_line}" if node.last_line else ""
        return f"{indent}{_title(node)} [{node.status}, {elapsed_text(node.elapsed(now))}]{tail}"

    # -- lines out ---------------------------------------------------------------------------

    def frame(self, now: float, width: int, *, colour: bool = False, height: int = 0) -> list[str]:
        """The whole tree as lines of at most `width` columns (escapes excluded); with
        `height` > 0, at most that many lines (the last says how many were left out)."""
        rows = list(self._rows(self.root, "", "", now))
        lines = [_compose(prefix, node, now, width, colour) for prefix, node in rows]
        if height > 0 and len(lines) > height:
            left = len(lines) - (height - 1)
            lines = [*lines[: height - 1], cut_to_width(f"… {left} more", width)]
        return lines

    def _rows(
        self, node: TreeNode, prefix: str, child_prefix: str, now: float
    ) -> Iterator[tuple[str, TreeNode]]:
        yield prefix, node
        for index, child in enumerate(node.children):
            last = index == len(node.children) - 1
            yield from self._rows(
                child,
                child_prefix + ("└─ " if last else "├─ "),
                child_prefix + ("   " if last else "│  "),
                now,
            )


def _title(node: TreeNode) -> str:
    return clean_text(node.label)


def _compose(prefix: str, node: TreeNode, now: float, width: int, colour: bool) -> str:
    head = f"{prefix}{_title(node)}"
    status = node.status
    timing = elapsed_text(node.elapsed(now))
    plain = f"{head}  {status}  {timing}"
    if node.last_line:
        plain += f"  {node.last_line}"
    cut = cut_to_width(plain, width)
    if not colour:
        return cut
    # Colour the status only, and only if the cut kept all of it.
    start = len(head) + 2
    if len(cut) < start + len(status) or cut[start : start + len(status)] != status:
        return cut
    sgr = _COLOURS.get(status, "0")
    return f"{cut[:start]}\x1b[{sgr}m{status}\x1b[0m{cut[start + len(status) :]}"


def _args_text(event: DelegationEvent) -> str:
    if isinstance(event.delta, str):
        return event.delta
    if isinstance(event.args, str):
        return event.args
    return ""


def _call_summary(args: str) -> str:
    """A tool call's arguments in short: a delegation's agent and objective when they parse."""
    try:
        parsed: Any = json.loads(args)
    except ValueError:
        return clean_text(args)
    if isinstance(parsed, dict) and isinstance(parsed.get("agent"), str):
        objective = parsed.get("objective")
        what = f": {objective}" if isinstance(objective, str) else ""
        return clean_text(f"→ {parsed['agent']}{what}")
    return clean_text(args)


def redraw(previous_height: int, lines: Sequence[str]) -> str:
    """The ANSI text that replaces a frame of `previous_height` lines (drawn from the start of
    a line, ending after its last line) with `lines`: cursor up, erase to the end of the
    screen, the new lines."""
    up = f"\x1b[{previous_height}A" if previous_height else ""
    body = "".join(f"{line}\x1b[K\n" for line in lines)
    return f"\r{up}\x1b[J{body}"
