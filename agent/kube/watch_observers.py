"""The watch engine's counters: the :class:`WatchObserver` protocol it reports through (events, stream restarts,
relists, cache sync, rejected objects, detection lag in seconds), one that records nothing, and one that keeps plain
counters in dicts (tests, benchmarks, ``status``). :class:`agent.sinks.metrics.AgentMetrics` is the Prometheus one.
"""

from __future__ import annotations

import time
from typing import Protocol


class WatchObserver(Protocol):
    """Counters of the watch engine. :class:`agent.sinks.metrics.AgentMetrics` implements it."""

    def watch_event(self, resource: str, type: str) -> None:
        """One watch event (ADDED/MODIFIED/DELETED/BOOKMARK) of `resource`."""

    def watch_restart(self, resource: str, reason: str = "error") -> None:
        """A stream was replaced; reason one of timeout, gone, inactivity, error."""

    def relist(self, resource: str) -> None:
        """A full list of `resource` started (initial or after 410)."""

    def cache_synced(self, resource: str, synced: bool = True) -> None:
        """`resource`'s cache is complete (after its first list)."""

    def input_rejected(self, source: str, reason: str) -> None:
        """One skipped object of kind `source` for `reason`."""

    def detection_lag(self, seconds: float, source: str = "unknown") -> None:
        """Object's own timestamp → seen by us, in seconds."""


class NullObserver:
    """A WatchObserver that records nothing."""

    def watch_event(self, resource: str, type: str) -> None:
        """Ignore."""

    def watch_restart(self, resource: str, reason: str = "error") -> None:
        """Ignore."""

    def relist(self, resource: str) -> None:
        """Ignore."""

    def cache_synced(self, resource: str, synced: bool = True) -> None:
        """Ignore."""

    def input_rejected(self, source: str, reason: str) -> None:
        """Ignore."""

    def detection_lag(self, seconds: float, source: str = "unknown") -> None:
        """Ignore."""


class CountingObserver:
    """A WatchObserver keeping plain counters in dicts (tests, benchmarks, `status`)."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], int] = {}
        self.restarts: dict[tuple[str, str], int] = {}
        self.relists: dict[str, int] = {}
        self.synced: dict[str, bool] = {}
        self.rejected: dict[tuple[str, str], int] = {}
        self.lags: list[tuple[str, float]] = []
        self.last_event_at: dict[str, float] = {}

    def watch_event(self, resource: str, type: str) -> None:
        """Count it and stamp the time (the last event age is now - last_event_at)."""
        k = (resource, type)
        self.events[k] = self.events.get(k, 0) + 1
        self.last_event_at[resource] = time.time()

    def watch_restart(self, resource: str, reason: str = "error") -> None:
        """Count it."""
        k = (resource, reason)
        self.restarts[k] = self.restarts.get(k, 0) + 1

    def relist(self, resource: str) -> None:
        """Count it."""
        self.relists[resource] = self.relists.get(resource, 0) + 1

    def cache_synced(self, resource: str, synced: bool = True) -> None:
        """Remember it."""
        self.synced[resource] = synced

    def input_rejected(self, source: str, reason: str) -> None:
        """Count it."""
        k = (source, reason)
        self.rejected[k] = self.rejected.get(k, 0) + 1

    def detection_lag(self, seconds: float, source: str = "unknown") -> None:
        """Keep it."""
        self.lags.append((source, seconds))
