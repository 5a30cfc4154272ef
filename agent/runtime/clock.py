"""The system clock behind the :class:`agent.core.clock.Clock` port (the only clock the running agent reads)."""

from __future__ import annotations

import time
from datetime import UTC, datetime


class SystemClock:
    """:class:`agent.core.clock.Clock` on the machine's clocks: ``datetime.now(UTC)`` and ``time.monotonic``."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """``time.monotonic()``, seconds."""
        return time.monotonic()
