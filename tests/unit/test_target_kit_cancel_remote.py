"""The target conformance kit's promise about `Target.cancel_remote`: a reference that names no
remote task answers `not_needed` or `unsupported`, within the step bound, without raising.
`check_prepare` owns it; each way of breaking it is caught there. (Real targets cancelling real
remote tasks: tests/integration/test_cancel_remote.py.)
"""

from __future__ import annotations

import attrs
import pytest
import trio

from adapters.inprocess import InProcessTarget, LocalTask
from engine import RemoteCancel, RemoteTaskRef, Target
from engine.testing import TARGET_CHECKS, Scenario, TargetContractError


async def _finish(task: LocalTask) -> str:
    return "done"


@attrs.define
class CancelsRemotely(InProcessTarget):
    """The in-process target whose `cancel_remote` does what `behaviour` says."""

    behaviour: str = "unsupported"
    asked: list[RemoteTaskRef] = attrs.field(factory=list)

    async def cancel_remote(self, ref: RemoteTaskRef) -> str:
        self.asked.append(ref)
        if self.behaviour == "raises":
            raise RuntimeError("no remote to ask")
        if self.behaviour == "hangs":
            await trio.sleep_forever()
        return self.behaviour


@attrs.define
class Harness:
    behaviour: str
    made: list[CancelsRemotely] = attrs.field(factory=list)

    async def target(self, scenario: str) -> Target | None:
        if scenario != Scenario.FINISH:
            return None
        target = CancelsRemotely(_finish, behaviour=self.behaviour)
        self.made.append(target)
        return target


@pytest.mark.parametrize("answer", [RemoteCancel.NOT_NEEDED, RemoteCancel.UNSUPPORTED])
async def test_nothing_named_may_be_not_needed_or_unsupported(
    answer: str, autojump_clock: trio.abc.Clock
) -> None:
    harness = Harness(answer)
    assert await TARGET_CHECKS["prepare"](harness) is None
    (ref,) = harness.made[0].asked
    assert ref.remote_task_id is None and ref.remote_context_id is None


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        ("confirmed", "answered 'confirmed', not 'not_needed' or 'unsupported'"),
        ("pending", "answered 'pending', not 'not_needed' or 'unsupported'"),
        ("raises", "cancel_remote() with no remote ids raised RuntimeError (no remote to ask)"),
        ("hangs", "cancel_remote() of a reference that names no remote task did not end within"),
    ],
)
async def test_a_broken_cancel_remote_is_caught_by_check_prepare(
    behaviour: str, message: str, autojump_clock: trio.abc.Clock
) -> None:
    with pytest.raises(TargetContractError, match="prepare: ") as broken:
        await TARGET_CHECKS["prepare"](Harness(behaviour))
    assert message in str(broken.value)


async def test_the_shipped_base_answers_unsupported(autojump_clock: trio.abc.Clock) -> None:
    # InProcessTarget keeps BaseTarget's default: an in-process agent ends with its process.
    target = InProcessTarget(_finish)
    ref = RemoteTaskRef(delegation_id="d", agent_key="k", remote_task_id="t")
    assert await target.cancel_remote(ref) == RemoteCancel.UNSUPPORTED
