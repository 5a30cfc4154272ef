"""A virtual-time asyncio event loop: time moves only when nothing is ready to run, straight to the next timer.

A replay has no I/O: every coroutine runs until it awaits a timer (``asyncio.sleep``, ``wait_for``'s timeout) or
another task. The loop's selector never waits: when the loop would block for `timeout` seconds it moves the
virtual time on by `timeout` instead, so the next timer is due at once. Everything that reads the loop's time (the
engine's loops, the restart follow-ups' sleeps) runs on the virtual time, as fast as the CPU allows, in the same
order every run.

:class:`VirtualClock` is the :class:`agent.core.clock.Clock` on that time: ``start`` plus the loop's seconds.
"""

from __future__ import annotations

import asyncio
import selectors
from datetime import datetime, timedelta
from typing import Any


class ReplayStalled(RuntimeError):
    """Nothing is ready and no timer is scheduled: every task waits for something that never comes (a bug)."""


class _VirtualSelector(selectors.SelectSelector):
    """Polls the loop's own self-pipe without waiting; a wait of `timeout` seconds moves the virtual time on."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready:
            return ready
        if timeout is None:
            raise ReplayStalled("the replay's event loop has nothing to run and no timer: it would wait forever")
        if timeout > 0:
            self.now += timeout
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop whose :meth:`time` is virtual seconds from 0 (see the module docstring)."""

    def __init__(self) -> None:
        self._vselector = _VirtualSelector()
        super().__init__(self._vselector)

    def time(self) -> float:
        """Virtual seconds since the loop was made."""
        return self._vselector.now


class VirtualClock:
    """:class:`agent.core.clock.Clock` on a :class:`VirtualLoop`'s time: ``start + loop.time()``.

    Args:
        loop: the virtual loop.
        start: the wall time virtual second 0 stands for (time-zone aware).
    """

    def __init__(self, loop: VirtualLoop, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("the replay's start time needs a time zone")
        self.loop = loop
        self.start = start

    def now(self) -> datetime:
        """The virtual wall time."""
        return self.start + timedelta(seconds=self.loop.time())

    def monotonic(self) -> float:
        """The virtual seconds since the start."""
        return self.loop.time()


def run_virtual(main: Any) -> Any:
    """Run the coroutine `main` to completion on a fresh :class:`VirtualLoop`; returns its result.

    `main` may read the loop as ``asyncio.get_running_loop()`` (a :class:`VirtualLoop`). The loop is closed after.
    """
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
