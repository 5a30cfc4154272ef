"""The system clock behind the :class:`agent.core.clock.Clock` port (the only clock the running agent reads)."""

from __future__ import annotations

import resource
import time
from datetime import UTC, datetime

from agent.core.clock import ThreadUsage


class SystemClock:
    """:class:`agent.core.clock.Clock` on the machine's clocks: ``datetime.now(UTC)`` and ``time.monotonic``."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """``time.monotonic()``, seconds."""
        return time.monotonic()


def thread_usage() -> ThreadUsage:
    """The calling thread's CPU time (``time.thread_time``) and involuntary context switches
    (``getrusage(RUSAGE_THREAD).ru_nivcsw``, Linux) now: two system calls, about a microsecond. The engine times a
    fault's decision path with it (agent.engine.stages)."""
    return ThreadUsage(time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw)
