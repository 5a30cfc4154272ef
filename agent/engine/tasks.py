"""The engine's background steps (acting on an incident, its follow-ups, a node's taint sync), kept by reference.

A step marked ``leader_only`` ends when this replica stops leading or the agent stops (its writes are fenced too,
agent.core.fence): the tasks are cancelled from the set they were started into, never by matching their names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

CreateTask = Callable[..., "asyncio.Task[Any]"]
"""``TaskGroup.create_task`` or ``asyncio.create_task``: ``(coro, *, name) -> Task``."""


class Tasks:
    """Starts the engine's background steps and keeps every one until it ends.

    Args:
        create_task: how a task is started (the root TaskGroup's ``create_task`` in the running agent;
            ``asyncio.create_task`` by default).
    """

    def __init__(self, create_task: CreateTask | None = None) -> None:
        self._create = create_task or asyncio.create_task
        self.running: set[asyncio.Task[Any]] = set()
        self.leader_only: set[asyncio.Task[Any]] = set()

    def __call__(self, coro: Coroutine[Any, Any, Any], name: str, *, leader_only: bool = True) -> asyncio.Task[Any]:
        """Start `coro` as the task `name`; a `leader_only` one is cancelled by :meth:`cancel_leader_only`."""
        task = self._create(coro, name=name)
        self.running.add(task)
        if leader_only:
            self.leader_only.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.running.discard(task)
        self.leader_only.discard(task)

    def cancel_leader_only(self) -> int:
        """Cancel every running leader-only step (leadership lost, or the agent stopping). Returns how many."""
        tasks = list(self.leader_only)
        for task in tasks:
            task.cancel()
        return len(tasks)

    async def idle(self) -> None:
        """Wait until no step runs (the steps a step starts included); errors stay in their tasks."""
        while self.running:
            await asyncio.gather(*list(self.running), return_exceptions=True)
