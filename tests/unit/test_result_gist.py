"""`adapters.parents.result_gist`: the few words the scripted parent (and the scripted model
endpoint) quote of a delegation's result, from a full result or the lean one a tool call gets."""

from __future__ import annotations

import pytest

from adapters.parents import result_gist

SUMMARY_FIRST = "Summary: Verdict: approve\n\nThe checks.\n\nMore."
LAST_SAID = "Checks: ok.\n\nVerdict: approve, with care."
WITH_ARTIFACTS = "Said first.\n\nThe answer.\n\nArtifacts:\n- r.md (text/markdown)"


@pytest.mark.parametrize(
    ("result", "gist"),
    [
        ({"summary": "Found it."}, "Found it."),
        ({"output": {"text": SUMMARY_FIRST}}, "Verdict: approve"),
        ({"output": {"text": LAST_SAID}}, "Verdict: approve, with care."),
        ({"output": {"text": WITH_ARTIFACTS}}, "The answer."),
        ({"output": {"text": "  \n\n  "}}, ""),
        ({"output": {"text": 5}}, ""),
        ({"output": "not a mapping"}, ""),
        ({}, ""),
    ],
)
def test_the_gist_is_the_summary_else_what_the_output_concludes_with(
    result: dict[str, object], gist: str
) -> None:
    assert result_gist(result) == gist
