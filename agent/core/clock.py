"""The clock as a port: the core and the engine read time only through a :class:`Clock` handed to them.

The running agent passes :class:`agent.runtime.clock.SystemClock`; tests pass a clock they move by hand. Nothing in
agent.core or agent.engine reads ``datetime.now``, ``time.*`` or a loop's clock itself (tests/tools/test_layering.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Wall time and a monotonic count."""

    def now(self) -> datetime:
        """The current time, time-zone aware (UTC)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (durations only; its zero means nothing)."""
        ...


class FixedClock:
    """A :class:`Clock` that says what it is told: `at` until :meth:`set` or :meth:`advance` moves it (replaying
    recorded objects as of a time, and tests). Its monotonic count moves with it."""

    def __init__(self, at: datetime) -> None:
        self.at = at
        self._start = at

    def now(self) -> datetime:
        """The time it was set to."""
        return self.at

    def monotonic(self) -> float:
        """Seconds since the first time it was given."""
        return (self.at - self._start).total_seconds()

    def set(self, at: datetime) -> None:
        """Move the clock to `at` (backwards too: wall clocks may)."""
        self.at = at

    def advance(self, seconds: float) -> datetime:
        """Move the clock on by `seconds`; returns the new time."""
        self.at += timedelta(seconds=seconds)
        return self.at


@dataclass(frozen=True, slots=True)
class ThreadUsage:
    """A thread's use of the CPU so far: `cpu_s` seconds of CPU and `preempted` involuntary context switches
    (times the OS took the CPU from it while it could run). Read by the runtime (agent.runtime.clock
    ``thread_usage``: ``time.thread_time`` and ``getrusage(RUSAGE_THREAD)``, Linux) and handed to the engine
    (``RecoveryEngine(thread_usage=...)``, agent.engine.stages), which reads no clock of its own."""

    cpu_s: float
    preempted: int
