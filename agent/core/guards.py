"""Protecting the cluster from the agent: a restart rate limit and a circuit breaker. Pure: time is passed in.

- :class:`TokenBucket`: cluster-wide restarts per minute with a burst (``policy.restart_rate_per_min``,
  ``policy.restart_burst``).
- :class:`CircuitBreaker`: trips when more than ``policy.breaker_node_share`` of the watched nodes turn faulty
  within ``policy.breaker_window_s`` (and at least ``policy.breaker_min_faulty_nodes`` of them); once open it
  stays open until a person resets it (``fault-agent breaker reset``). While open the agent keeps observing
  and publishing but does not act; after the reset it decides again the faults it held back that are still
  active (agent.engine.recovery, ``sync_breaker``).

Times are seconds on any monotonic-enough scale (the engine passes its clock's epoch seconds so the breaker state
written to its ConfigMap is meaningful across restarts).
"""

from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass


class TokenBucket:
    """A token bucket: `burst` tokens, refilled at `rate_per_s`; one restart takes one token.

    Raises:
        ValueError: `rate_per_s` not positive and finite, or `burst` < 1.
    """

    __slots__ = ("_last", "_tokens", "burst", "rate_per_s")

    def __init__(self, rate_per_s: float, burst: int, now_s: float) -> None:
        if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
            raise ValueError(f"token bucket rate must be a positive number of tokens per second, got {rate_per_s!r}")
        if burst < 1:
            raise ValueError(f"token bucket burst must be at least 1, got {burst!r}")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._tokens = float(burst)
        self._last = now_s

    def _refill(self, now_s: float) -> None:
        if now_s > self._last:
            self._tokens = min(float(self.burst), self._tokens + (now_s - self._last) * self.rate_per_s)
            self._last = now_s

    def tokens(self, now_s: float) -> float:
        """Tokens available at `now_s` (fractional)."""
        self._refill(now_s)
        return self._tokens

    def try_take(self, now_s: float) -> bool:
        """Take one token if available; True when taken. A clock going backwards refills nothing."""
        self._refill(now_s)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def wait_s(self, now_s: float) -> float:
        """Seconds until one token is available (0 when one is available now)."""
        self._refill(now_s)
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate_per_s


class BreakerState(enum.StrEnum):
    CLOSED = "closed"  # acting normally
    OPEN = "open"  # tripped: observe and publish, do not act


@dataclass(frozen=True, slots=True)
class Trip:
    """Why the breaker opened: faulty nodes in the window, watched nodes, and when (seconds)."""

    at_s: float
    faulty_nodes: tuple[str, ...]
    watched_nodes: int
    share: float

    @property
    def reason(self) -> str:
        """A sentence for logs and the ``breaker.tripped`` event."""
        return (
            f"{len(self.faulty_nodes)} of {self.watched_nodes} watched nodes "
            f"({len(self.faulty_nodes) / max(1, self.watched_nodes):.0%}) turned faulty within the window, "
            f"above the {self.share:.0%} limit; the agent stops acting until a person resets the breaker"
        )


class CircuitBreaker:
    """Trips when too many distinct nodes turn faulty within a window; stays open until :meth:`reset`.

    Args:
        share: fraction of watched nodes (0 < share <= 1) that must be exceeded to trip.
        window_s: sliding window in seconds.
        min_faulty_nodes: distinct faulty nodes needed at least, so one bad node in a tiny cluster does not
            stop the agent.

    Raises:
        ValueError: a parameter out of range.
    """

    def __init__(self, share: float, window_s: float, min_faulty_nodes: int = 2) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"breaker share must be in (0, 1], got {share!r}")
        if not (window_s > 0 and math.isfinite(window_s)):
            raise ValueError(f"breaker window must be a positive number of seconds, got {window_s!r}")
        if min_faulty_nodes < 1:
            raise ValueError(f"breaker min_faulty_nodes must be at least 1, got {min_faulty_nodes!r}")
        self.share = share
        self.window_s = window_s
        self.min_faulty_nodes = min_faulty_nodes
        self._seen: dict[str, float] = {}  # node -> last time it turned faulty (only times within the window)
        self._expiry: list[tuple[float, str]] = []  # heap of (time, node) each `_seen` value was set to
        self.trip: Trip | None = None

    @property
    def state(self) -> BreakerState:
        return BreakerState.OPEN if self.trip is not None else BreakerState.CLOSED

    @property
    def is_open(self) -> bool:
        return self.trip is not None

    def faulty_in_window(self, now_s: float) -> tuple[str, ...]:
        """Distinct nodes that turned faulty within the window ending at `now_s`, sorted."""
        horizon = now_s - self.window_s
        return tuple(sorted(n for n, t in self._seen.items() if t > horizon))

    def record_node_fault(
        self, node: str, now_s: float, watched_nodes: int, *, at_s: float | None = None
    ) -> Trip | None:
        """Record that `node` turned faulty at `at_s` (default `now_s`); return the :class:`Trip` when this trips
        the breaker at `now_s`.

        Args:
            node: the node's name (non-empty).
            now_s: the current time in seconds (the window ends here).
            watched_nodes: how many nodes the agent watches now (>= 0); 0 never trips.
            at_s: when the node turned faulty, seconds: the fault's own signal time, so a standing fault seen
                again (after an agent restart, a relist, a new leader) counts when it happened, not when it was
                read. A time before the window counts for nothing; one after `now_s` (clock skew) counts as now.

        Raises:
            ValueError: empty node name or negative `watched_nodes`.
        """
        if not node:
            raise ValueError("breaker: node name must not be empty")
        if watched_nodes < 0:
            raise ValueError(f"breaker: watched node count must not be negative, got {watched_nodes}")
        horizon = now_s - self.window_s
        self._expire(horizon)
        at = now_s if at_s is None or not math.isfinite(at_s) else min(at_s, now_s)
        if at <= horizon:
            return None
        last = self._seen.get(node)
        if last is None or at > last:
            self._seen[node] = at
            heapq.heappush(self._expiry, (at, node))
        if self.trip is not None or watched_nodes == 0:
            return None
        count = len(self._seen)  # every time left is within the window (expired above): no scan per fault
        if count >= self.min_faulty_nodes and count > self.share * watched_nodes:
            faulty = self.faulty_in_window(now_s)
            self.trip = Trip(at_s=now_s, faulty_nodes=faulty, watched_nodes=watched_nodes, share=self.share)
            return self.trip
        return None

    def _expire(self, horizon: float) -> None:
        """Forget the nodes whose last fault is at or before `horizon`: O(log n) per time set, not a scan of
        every node per fault (a burst of k faults in the window cost O(k²) before)."""
        heap, seen = self._expiry, self._seen
        while heap and heap[0][0] <= horizon:
            at, node = heapq.heappop(heap)
            if seen.get(node) == at:  # not set to a later time since (that time has an entry of its own)
                del seen[node]

    def reset(self) -> None:
        """Close the breaker and forget the window (a person decided the cluster is fine)."""
        self.trip = None
        self._seen.clear()
        self._expiry.clear()

    def to_data(self) -> dict[str, str]:
        """The breaker's state as ConfigMap data (all strings): ``state``, and for an open breaker
        ``tripped_at`` (seconds), ``faulty_nodes`` (comma list), ``watched_nodes`` and ``reason``."""
        if self.trip is None:
            return {"state": BreakerState.CLOSED.value}
        return {
            "state": BreakerState.OPEN.value,
            "tripped_at": repr(self.trip.at_s),
            "faulty_nodes": ",".join(self.trip.faulty_nodes),
            "watched_nodes": str(self.trip.watched_nodes),
            "reason": self.trip.reason,
        }

    def restore(self, data: Mapping[str, str]) -> None:
        """Load the state written by :meth:`to_data` (e.g. after an agent restart or a reset by a person).

        Raises:
            ValueError: unknown ``state`` or unreadable numbers; the message names the key.
        """
        state = data.get("state", BreakerState.CLOSED.value)
        if state == BreakerState.CLOSED.value:
            self.reset()
            return
        if state != BreakerState.OPEN.value:
            raise ValueError(f"breaker state: key 'state' must be 'open' or 'closed', got {state!r}")
        try:
            at_s = float(data.get("tripped_at", "0"))
        except ValueError:
            raise ValueError(f"breaker state: key 'tripped_at' is not a number: {data.get('tripped_at')!r}") from None
        try:
            watched = int(data.get("watched_nodes", "0"))
        except ValueError:
            raise ValueError(
                f"breaker state: key 'watched_nodes' is not an integer: {data.get('watched_nodes')!r}"
            ) from None
        nodes = tuple(n for n in data.get("faulty_nodes", "").split(",") if n)
        self.trip = Trip(at_s=at_s, faulty_nodes=nodes, watched_nodes=watched, share=self.share)
