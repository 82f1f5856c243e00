"""`TaskTracker`: which tasks a piece of code started, and which of them are still running.

A Trio instrument that records every task spawned while it is tracking and every task that
exited. It ignores Trio's system tasks (and whatever they spawn, e.g. the tasks behind
`trio.from_thread.run`): a task counts only if it descends from the same top-level task as the
code that started tracking. The no-leak tests use it to show that nothing a run started outlives
it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio


def _top_level(task: trio.lowlevel.Task) -> trio.lowlevel.Task:
    """The ancestor of `task` directly under Trio's init task (the main task or a system task)."""
    root = trio.lowlevel.current_root_task()
    while True:
        nursery = task.parent_nursery
        if nursery is None or nursery.parent_task is root:
            return task
        task = nursery.parent_task


class TaskTracker(trio.abc.Instrument):
    """Tasks spawned since `start()` under the caller's top-level task, and which have exited."""

    def __init__(self) -> None:
        self._top: trio.lowlevel.Task | None = None
        self.spawned: list[trio.lowlevel.Task] = []
        self.exited: set[trio.lowlevel.Task] = set()

    def start(self) -> None:
        """Track from now on; call from the task whose descendants should be accounted for."""
        self._top = _top_level(trio.lowlevel.current_task())

    def stop(self) -> None:
        self._top = None

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if self._top is not None and _top_level(task) is self._top:
            self.spawned.append(task)

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.exited.add(task)

    def alive(self) -> list[str]:
        """Names of tracked tasks that have not exited."""
        return [task.name for task in self.spawned if task not in self.exited]

    def names(self) -> list[str]:
        return [task.name for task in self.spawned]


@contextmanager
def tracking() -> Iterator[TaskTracker]:
    """Install a `TaskTracker` for the duration of a `with` block, tracking from its start."""
    tracker = TaskTracker()
    trio.lowlevel.add_instrument(tracker)
    tracker.start()
    try:
        yield tracker
    finally:
        tracker.stop()
        trio.lowlevel.remove_instrument(tracker)
