"""What a parent model reads of a delegation's result: lean, said once, within a budget (sans-IO).

This module owns the parent model's view of a `DelegationResult`. A tool result lands in the
parent model's context window (Claude Code caps one MCP tool result near 25k tokens), so the view
follows three rules:

- Said once. The delegation's output (`delegation_output`) is its summary and all its messages
  (whole: the result keeps every message uncut), each text at most once: texts are compared
  with surrounding whitespace trimmed (and the summary's clip mark "…" removed); of two equal
  texts the later one stays (so a summary that repeats the final message is shown as that
  message); a text contained in a longer one is left out. Containment is looked for among the
  summary and the last `CONTAINMENT_WINDOW` (64) messages, where remotes repeat themselves (a
  final message restating what streamed, a summary restating the final message), so the cost
  stays linear however many messages a delegation has; equal texts are said once anywhere.
  A summary that stays beside messages comes first, marked `Summary:`. Artifact references
  follow, one line each.
- Within a budget. The rendered text and the JSON of the structured view are each at most
  `budget` characters (`DelegationPolicy.max_result_chars`, 16,000 by default: ~4-5k tokens,
  and the two together stay well under the cap even if a parent reads both). The frame (ids,
  status, error) comes first and is clipped field by field; the output fills what is left.
- Nothing dropped silently. When the output does not fit, the view shows its first `shown`
  characters and says where the rest is: `next_offset`, the `OutputReference` (a URI and a
  tool), and how to ask for it. `output_page(output, offset, limit)` returns the output from any
  offset, so reading from `next_offset` gives exactly the missing text.

The structured view is the result with `summary`, `messages` and `raw_task` replaced by `output`
(the same shown text, its size, `truncated`, `next_offset` and the reference) and `artifacts`
limited to those whose lines are shown: text and structure say the same thing.
"""

from __future__ import annotations

import json
from typing import Any, Final

import attrs

from engine._results import (
    DEFAULT_MAX_RESULT_CHARS,
    MIN_RESULT_CHARS,
    DelegationError,
    DelegationResult,
    ErrorCode,
    ResultMessage,
)
from engine._wire import to_jsonable

__all__ = [
    "CONTAINMENT_WINDOW",
    "DEFAULT_MAX_RESULT_CHARS",
    "MIN_RESULT_CHARS",
    "OutputPage",
    "OutputReference",
    "ParentView",
    "delegation_output",
    "output_texts",
    "output_page",
    "parent_view",
]

#: How many of the last messages (with the summary) are compared for containment.
CONTAINMENT_WINDOW: Final = 64
#: How far back from the budget's edge a cut looks for a line or word boundary.
_BOUNDARY_WINDOW: Final = 200
#: Field clips of the frame: normal, then tight when the normal frame leaves no room.
_CLIPS: Final = ((600, 200), (120, 64))
_CLIP_MARK: Final = "…"


@attrs.frozen(kw_only=True)
class OutputReference:
    """Where the rest of a delegation's output can be read: a resource `uri` and a `tool` that
    takes the delegation id and an offset."""

    uri: str
    tool: str


@attrs.frozen(kw_only=True)
class ParentView:
    """The lean result of one delegation: `text` (what the model reads), `structured` (the same,
    as JSON values), and how much of the output they show (`shown` of `total` characters;
    `next_offset` is None when everything is shown)."""

    text: str
    structured: dict[str, Any]
    shown: int
    total: int
    next_offset: int | None


@attrs.frozen(kw_only=True)
class OutputPage:
    """`text` is `output[offset:next_offset or total]`; `next_offset` is None at the end."""

    text: str
    offset: int
    next_offset: int | None
    total: int


def _norm(text: str) -> str:
    text = text.strip()
    return text[: -len(_CLIP_MARK)].rstrip() if text.endswith(_CLIP_MARK) else text


def output_texts(result: DelegationResult) -> list[str]:
    """The summary and messages that stay after the said-once rule, in order, as shown."""
    candidates: list[tuple[str, str, bool]] = []
    if result.summary:
        candidates.append((_norm(result.summary), result.summary.strip(), True))
    for message in result.messages:
        candidates.append((_norm(message.text), _message_text(message), False))
    last_of = {norm: i for i, (norm, _, _) in enumerate(candidates)}
    window_start = len(candidates) - CONTAINMENT_WINDOW
    # Distinct texts of the summary and the window: one of them inside another is left out.
    compared = list(
        dict.fromkeys(
            norm
            for i, (norm, _, is_summary) in enumerate(candidates)
            if norm and (is_summary or i >= window_start)
        )
    )
    contained = {
        norm for norm in compared if any(norm in other and norm != other for other in compared)
    }
    kept: list[tuple[str, bool]] = []
    for i, (norm, shown, is_summary) in enumerate(candidates):
        if norm and last_of[norm] == i and norm not in contained:
            kept.append((shown, is_summary))
    if len(kept) > 1:
        return [f"Summary: {text}" if is_summary else text for text, is_summary in kept]
    return [text for text, _ in kept]


def _message_text(message: ResultMessage) -> str:
    text = message.text.strip()
    return text if message.role in ("assistant", "agent") else f"[{message.role}] {text}"


def _artifact_line(result: DelegationResult, index: int) -> str:
    artifact = result.artifacts[index]
    label = artifact.name or artifact.id or f"artifact {index + 1}"
    details = [d for d in (artifact.mime_type, _size(artifact.size_bytes)) if d]
    line = f"- {label}" + (f" ({', '.join(details)})" if details else "")
    return line + (f" at {artifact.uri}" if artifact.uri else "")


def _size(size_bytes: int | None) -> str:
    return f"{size_bytes} bytes" if size_bytes is not None else ""


def _output_with_artifact_ends(result: DelegationResult) -> tuple[str, list[int]]:
    texts = output_texts(result)
    output = "\n\n".join(texts)
    ends: list[int] = []
    if result.artifacts:
        output += ("\n\n" if output else "") + "Artifacts:"
        for index in range(len(result.artifacts)):
            output += "\n" + _artifact_line(result, index)
            ends.append(len(output))
    return output, ends


def delegation_output(result: DelegationResult) -> str:
    """The whole output of a delegation, as the parent model reads it (see the module docs)."""
    return _output_with_artifact_ends(result)[0]


def output_page(output: str, offset: int, limit: int) -> OutputPage:
    """`limit` characters of `output` from `offset`. Raises `DelegationError` (`invalid_input`,
    `metadata.field`) for a negative or past-the-end offset or a limit below 1."""
    if offset < 0 or offset > len(output):
        raise DelegationError(
            code=ErrorCode.INVALID_INPUT,
            message=f"offset must be between 0 and {len(output)} (the output's length).",
            metadata={"field": "offset"},
        )
    if limit < 1:
        raise DelegationError(
            code=ErrorCode.INVALID_INPUT,
            message="limit must be at least 1.",
            metadata={"field": "limit"},
        )
    end = min(len(output), offset + limit)
    return OutputPage(
        text=output[offset:end],
        offset=offset,
        next_offset=end if end < len(output) else None,
        total=len(output),
    )


def _clip(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + _CLIP_MARK


def _frame(
    result: DelegationResult, message_clip: int, id_clip: int
) -> tuple[DelegationResult, str]:
    """The result without its output (ids and error clipped) and its text head."""
    error = result.error
    if error is not None:
        error = attrs.evolve(error, message=_clip(error.message, message_clip) or "")
    view = attrs.evolve(
        result,
        delegation_id=_clip(result.delegation_id, id_clip) or "",
        agent=_clip(result.agent, id_clip) or "",
        remote_protocol=_clip(result.remote_protocol, id_clip) or "",
        run_id=_clip(result.run_id, id_clip),
        parent_tool_call_id=_clip(result.parent_tool_call_id, id_clip),
        remote_task_id=_clip(result.remote_task_id, id_clip),
        remote_context_id=_clip(result.remote_context_id, id_clip),
        card_fingerprint=_clip(result.card_fingerprint, id_clip),
        summary=None,
        messages=(),
        artifacts=(),
        error=error,
        raw_task=None,
    )
    head = f"Delegation {view.delegation_id} to {view.agent!r} ({view.remote_protocol})"
    lines = [f"{head}: {view.status}."]
    if view.remote_task_id:
        lines.append(f"Remote task: {view.remote_task_id}.")
    if error is not None:
        retry = " It may be retried." if error.retryable else ""
        lines.append(f"Error {error.code}: {error.message}{retry}")
        if view.remote_cancel and view.remote_cancel != "not_needed":
            lines.append(f"Remote cancel: {view.remote_cancel}.")
    return view, "\n".join(lines)


def _note(shown: int, total: int, delegation_id: str, reference: OutputReference) -> str:
    return (
        f"[Output truncated: shown {shown} of {total} characters. Read the rest with "
        f"{reference.tool}(delegation_id={delegation_id!r}, offset={shown}), or read the "
        f"resource {reference.uri} (add ?offset={shown}).]"
    )


def _render(
    view: DelegationResult,
    head: str,
    result: DelegationResult,
    output: str,
    artifact_ends: list[int],
    shown: int,
    reference: OutputReference,
) -> tuple[str, dict[str, Any]]:
    part = output[:shown]
    truncated = shown < len(output)
    text = head + (f"\n\n{part}" if part else "")
    if truncated:
        text += "\n\n" + _note(shown, len(output), result.delegation_id, reference)
    artifacts = tuple(
        a for a, end in zip(result.artifacts, artifact_ends, strict=True) if end <= shown
    )
    structured = to_jsonable(attrs.evolve(view, artifacts=artifacts))
    structured["output"] = {
        "text": part,
        "shown_chars": shown,
        "total_chars": len(output),
        "truncated": truncated,
        "next_offset": shown if truncated else None,
        "uri": reference.uri,
        "tool": reference.tool,
    }
    return text, structured


def _json_chars(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def parent_view(
    result: DelegationResult,
    *,
    budget: int = DEFAULT_MAX_RESULT_CHARS,
    reference: OutputReference,
) -> ParentView:
    """The lean view of `result` within `budget` characters (text and structured JSON each).

    Raises `ValueError` for a budget below `MIN_RESULT_CHARS`."""
    if budget < MIN_RESULT_CHARS:
        raise ValueError(f"budget must be at least {MIN_RESULT_CHARS} characters, got {budget}")
    output, artifact_ends = _output_with_artifact_ends(result)

    def fits(view: DelegationResult, head: str, shown: int) -> bool:
        text, structured = _render(view, head, result, output, artifact_ends, shown, reference)
        return len(text) <= budget and _json_chars(structured) <= budget

    for message_clip, id_clip in _CLIPS:
        view, head = _frame(result, message_clip, id_clip)
        if fits(view, head, 0):
            break
    if fits(view, head, len(output)):
        shown = len(output)
    else:
        # Both sizes grow with `shown` (the note's numbers too), so the largest that fits is
        # found by bisection; then the cut moves back to a line or word end if one is close.
        low, high = 0, len(output) - 1
        while low < high:
            middle = (low + high + 1) // 2
            if fits(view, head, middle):
                low = middle
            else:
                high = middle - 1
        shown = _boundary(output, low)
    text, structured = _render(view, head, result, output, artifact_ends, shown, reference)
    return ParentView(
        text=text,
        structured=structured,
        shown=shown,
        total=len(output),
        next_offset=shown if shown < len(output) else None,
    )


def _boundary(output: str, cut: int) -> int:
    """`cut`, or just after the last newline (else space) within `_BOUNDARY_WINDOW` before it."""
    window_start = max(0, cut - _BOUNDARY_WINDOW)
    for separator in ("\n", " "):
        at = output.rfind(separator, window_start, cut)
        if at >= 0:
            return at + 1
    return cut
