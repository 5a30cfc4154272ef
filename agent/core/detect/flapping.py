"""Flapping: the same chip faulting again and again is quarantined instead of restarted each time. Pure.

Vendor practice (DOMAIN.md §3) isolates a chip whose memory-error codes repeat 2–3 times in 24 h; here any chip
fault whose level takes the chip out (SeparateNPU and ManuallySeparateNPU included) or keeps new work off it
(PreSeparateNPU) counts, with a default threshold and window from the settings and lower
per-code thresholds from the level table.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from agent.core.faults import Fault, FaultKind, FaultLevel

QUARANTINE_LEVEL = FaultLevel.SEPARATE
"""The level a flapping chip is escalated to (at least): taken out and kept out of new work."""


def counts_as_flap(level: FaultLevel) -> bool:
    """True for the levels a chip fault counts towards flapping with: every level from RestartRequest up, i.e.
    each level that takes the chip out (RestartRequest … ManuallySeparateNPU) plus PreSeparateNPU (no new work on
    the chip). SubHealthFault and NotHandleFault never count."""
    return level >= FaultLevel.RESTART_REQUEST


class FlapTracker:
    """Counts new chip faults per (node, chip) in a sliding window; escalates the K-th one to quarantine.

    Args:
        threshold: faults of one chip within `window` that mean quarantine (settings: detect.flap_threshold).
        window: the sliding window (settings: detect.flap_window_s, default 24 h).
        threshold_by_code: lower thresholds for specific upper-case codes (the level table's flapping section).
    """

    def __init__(self, threshold: int, window: timedelta, threshold_by_code: Mapping[str, int] | None = None):
        if threshold < 1:
            raise ValueError("flap threshold must be >= 1")
        self.threshold = threshold
        self.window = window
        self.threshold_by_code = dict(threshold_by_code or {})
        self._seen: dict[tuple[str, str], deque[datetime]] = {}

    def observe(self, fault: Fault) -> Fault:
        """Count `fault` (a newly appeared fault) and return it, escalated to quarantine when its chip flaps.

        Only chip faults at a level :func:`counts_as_flap` accepts (RestartRequest and above, SeparateNPU and
        ManuallySeparateNPU included) count and escalate; the time used is the fault's signal_time, and a fault
        whose chip already has that signal time counted (the same occurrence re-classified) is not counted again.
        The escalated fault's level is raised to at least :data:`QUARANTINE_LEVEL` (never lowered) and its reason gets a
        ``+Flapping`` suffix.
        """
        if fault.kind is not FaultKind.CHIP or not fault.chips:
            return fault
        counted = counts_as_flap(fault.level)
        threshold = min([self.threshold, *(self.threshold_by_code.get(c, self.threshold) for c in fault.codes)])
        flapping = False
        for chip in fault.chips:
            times = self._seen.setdefault((fault.node, chip), deque())
            self._expire(times, fault.signal_time)
            if counted and fault.signal_time not in times:
                # one occurrence counts once: the same fault read again at a new level (a level-table reload
                # clears and raises it with its own signal time) is no new flap
                times.append(fault.signal_time)
            if counted and len(times) >= threshold:
                flapping = True
        if flapping:
            return replace(fault, level=max(fault.level, QUARANTINE_LEVEL), reason=f"{fault.reason}+Flapping")
        return fault

    def count(self, node: str, chip: str, now: datetime) -> int:
        """Faults of (node, chip) counted within the window ending at `now`."""
        times = self._seen.get((node, chip))
        if not times:
            return 0
        return sum(1 for t in times if now - t < self.window)

    def prune(self, now: datetime) -> None:
        """Forget entries older than the window (call now and then to bound memory)."""
        for key in list(self._seen):
            times = self._seen[key]
            self._expire(times, now)
            if not times:
                del self._seen[key]

    def _expire(self, times: deque[datetime], now: datetime) -> None:
        while times and now - times[0] >= self.window:
            times.popleft()
