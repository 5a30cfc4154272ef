"""The circuit breaker's part of the engine: feed it node faults, publish its trip, keep its ConfigMap in step.

The rule (how many faulty nodes in what window trip it) is :class:`agent.core.guards.CircuitBreaker`; this part
counts the faults that may trip it, writes its state to the ConfigMap through the writer port, and follows a
person's ``fault-agent breaker reset`` read back from there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import structlog

from agent.actions import error_detail
from agent.core.faults import Fault, FaultKind, FaultLevel
from agent.core.fence import NotLeader
from agent.core.guards import CircuitBreaker
from agent.engine.context import EngineContext
from agent.kube.errors import KubeError
from agent.sinks import events as ev

log = structlog.get_logger(__name__)


class BreakerKeeper:
    """Owns the engine's :class:`CircuitBreaker` and what this replica last read or wrote of its ConfigMap."""

    def __init__(self, ctx: EngineContext) -> None:
        p = ctx.settings.policy
        self.ctx = ctx
        self.breaker = CircuitBreaker(p.breaker_node_share, p.breaker_window_s, p.breaker_min_faulty_nodes)
        # the breaker ConfigMap's data as this replica last read or wrote it (None: no ConfigMap); a reset is a
        # change of it to closed, never a closed state read before (dry-run never writes the ConfigMap)
        self.seen: dict[str, str] | None = None
        self.synced = False
        # when the faults of this process's first lists were all handled (:meth:`settle`); None before
        self.settled_at: datetime | None = None

    def settle(self, now: datetime) -> None:
        """The faults the first lists found have been handled (the tick loop's `settled`): a fault read after
        `now` is news to this process, and :meth:`feed` counts it no earlier than when it was read. Only the
        first call counts."""
        if self.settled_at is None:
            self.settled_at = now

    def counted_at(self, fault: Fault) -> datetime:
        """When `fault` turned the node faulty, for the breaker's window.

        - Read by this process's first lists (before :meth:`settle`): its own signal time. These are the faults
          standing when the agent started (a restart, a new pod, a relist of everything): counted when they were
          read, a restart of the agent in a cluster with a few old faults tripped the breaker (issue 13, B4).
        - Read later: the later of its signal time and the time the agent read it. A burst seen for the first
          time but dated before the window (a device plugin that was down and writes its backlog, a node whose
          clock is behind) is a burst now; dated by its own time alone it never tripped the breaker.

        What the first rule still misses: a stale-dated burst that arrives while the agent itself is starting
        (before its first lists are handled, about 5 s) counts at its own dates, like the standing faults it
        cannot be told from."""
        if self.settled_at is None or fault.observed_at <= self.settled_at:
            return fault.signal_time
        return max(fault.signal_time, fault.observed_at)

    async def feed(self, fault: Fault, now: datetime) -> None:
        """Count a chip or node fault of a watched node towards the breaker; publish and persist a trip."""
        state = self.ctx.state
        if fault.kind not in (FaultKind.CHIP, FaultKind.NODE) or not fault.node:
            return
        if fault.node not in state.nodes:
            # A ConfigMap left behind by a removed node (or written for one that never existed) is not a node
            # of this cluster turning faulty: it must not count towards the share that trips the breaker.
            return
        if not (fault.level.takes_chip_out or fault.level >= FaultLevel.PRE_SEPARATE):
            return
        at_s = self.counted_at(fault).timestamp()
        trip = self.breaker.record_node_fault(fault.node, now.timestamp(), len(state.nodes), at_s=at_s)
        if trip is None:
            return
        log.error("circuit breaker tripped", reason=trip.reason, nodes=list(trip.faulty_nodes))
        self.ctx.metrics.breaker_open(True)
        await self.ctx.publish(
            lambda: ev.breaker_tripped(
                cluster=self.ctx.settings.cluster_name,
                at=now,
                reason=trip.reason,
                faulty_nodes=trip.faulty_nodes,
                watched_nodes=trip.watched_nodes,
                threshold_share=self.breaker.share,
                window_s=self.breaker.window_s,
            )
        )
        if self.ctx.term.is_leader():
            await self.write()

    async def write(self) -> None:
        """Write the breaker's state to its ConfigMap (leader only; dry-run writes nothing)."""
        if self.ctx.writer.dry_run:
            return  # shadow mode writes nothing: the breaker's state stays in memory (see sync)
        if not self.ctx.term.is_leader():
            return
        data = self.breaker.to_data()
        try:
            await self.ctx.writer.write_breaker(self.ctx.settings, data)
        except (KubeError, NotLeader) as e:  # never let the breaker's bookkeeping stop the agent
            log.warning("breaker state not written", error=error_detail(e))
            return
        self.seen, self.synced = data, True

    async def sync(self) -> bool:
        """Follow the breaker ConfigMap: a person's ``fault-agent breaker reset`` closes our breaker. Returns
        whether it did (the caller takes up the faults the open breaker held back).

        A reset is the ConfigMap turning ``closed`` since this replica last read or wrote it. A ``closed`` state
        read before is none: in dry-run the agent never writes the ConfigMap, so it still says what it said before
        the breaker tripped in memory (a leader whose write was lost writes again instead)."""
        try:
            data = await self.ctx.writer.read_breaker(self.ctx.settings)
        except KubeError as e:  # the next sync reads again
            log.debug("breaker state not read", error=error_detail(e))
            return False
        # the first read: only a reset written after the breaker tripped (before this read) is one
        changed = data != self.seen if self.synced else data is not None and self._reset_after_trip(data)
        self.seen, self.synced = data, True
        leading = self.ctx.term.is_leader
        if data is None:
            if self.breaker.is_open and leading():
                await self.write()
            return False
        was_open = self.breaker.is_open
        if data.get("state") == "closed" and was_open and not changed:
            if leading():
                await self.write()
        elif data.get("state") == "closed" and was_open:
            trip = self.breaker.trip
            self.breaker.reset()
            self.ctx.metrics.breaker_open(False)
            log.warning(
                "circuit breaker reset by a person", by=data.get("reset_by", ""), reason=data.get("reset_reason", "")
            )
            if leading():
                await self._publish_reset(data, trip.at_s if trip else None, trip.faulty_nodes if trip else ())
            return True
        elif data.get("state") == "open" and not was_open:
            with contextlib.suppress(ValueError):
                self.breaker.restore(data)
                self.ctx.metrics.breaker_open(True)
        return False

    async def _publish_reset(
        self, data: Mapping[str, str], opened_at_s: float | None, faulty_nodes: Sequence[str]
    ) -> None:
        """Publish ``breaker.reset``: who (``reset_by``), when (``reset_at``, else now), why (``reset_reason``),
        since when the breaker was open and the nodes that tripped it (their ``kubectl describe`` shows the close,
        agent.core.kube_events). A reset time the event cannot carry (unreadable, before the trip) is
        replaced by now; the event is never the reason a reset is not taken."""
        now = self.ctx.clock.now()
        opened_at = datetime.fromtimestamp(opened_at_s, UTC) if opened_at_s is not None else None
        try:
            at = datetime.fromisoformat(data.get("reset_at", ""))
        except ValueError:
            at = now
        if at.tzinfo is None or (opened_at is not None and at < opened_at):
            at = now
        if opened_at is not None and opened_at > at:
            opened_at = None  # a trip dated after now (a clock ahead): the event says nothing of it
        await self.ctx.publish(
            lambda: ev.breaker_reset(
                cluster=self.ctx.settings.cluster_name,
                at=at,
                by=data.get("reset_by", "") or "unknown",
                reason=data.get("reset_reason", ""),
                opened_at=opened_at,
                faulty_nodes=faulty_nodes,
            )
        )

    def _reset_after_trip(self, data: Mapping[str, str]) -> bool:
        """Whether `data` records a reset (``reset_at``, RFC 3339) later than the open breaker's trip."""
        trip = self.breaker.trip
        try:
            reset_at = datetime.fromisoformat(data.get("reset_at", ""))
        except ValueError:
            return False
        return trip is not None and reset_at.tzinfo is not None and reset_at.timestamp() > trip.at_s
