"""Stragglers: what the engine does with the straggler detector's findings (agent.core.straggler).

Never a restart. On every replica: the metrics (``fault_agent_stragglers_total{job_kind}``, a counter, and
``fault_agent_stragglers_current{job_kind}``, a gauge; one label with two values each, so four series whatever the
number of jobs, ranks or nodes) and, for a job labelled ``fault-agent.io/straggler: avoid``, the node's quarantine
reason (agent.engine.quarantining): the straggler's node is marked sub-healthy, the taint
``<policy.taint_key>=SubHealthFault:NoSchedule`` that policy.sub_health_taint puts on a node with a sub-health fault,
so the job's next restart (for whatever fault) is not placed there and no job that does not tolerate sub-healthy
nodes is either. The mark is lifted when the rank recovers; when the episode ends otherwise (the job restarted,
went, or its heartbeat went) it stays as a quarantine hold for detect.straggler_avoid_hold_s (persisted on the node
like a flapping chip's hold, so a new leader keeps it). The leader alone publishes ``job.straggler`` (one event when
an episode is found, one when it ends) and writes the taint.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Protocol

import structlog

from agent.core.faults import FaultLevel, ObjectRef
from agent.core.straggler import STRAGGLER_AVOID, Straggler, StragglerEnded
from agent.engine.context import EngineContext
from agent.engine.quarantining import Quarantining
from agent.engine.views import job_object
from agent.sinks import events as ev

log = structlog.get_logger(__name__)


class StragglerMetrics(Protocol):
    """The subset of agent.sinks.metrics.AgentMetrics this part reports to."""

    def straggler_found(self, job_kind: str) -> None: ...
    def stragglers_now(self, job_kind: str, n: int) -> None: ...


StragglerFeed = Callable[[], tuple[list[Straggler], list[StragglerEnded], list[Straggler]]]
"""What the detect pipeline found since the last call: (episodes found, episodes ended, episodes going on now)."""


class Stragglers:
    """Carries the straggler findings out (see the module docstring).

    Args:
        ctx: the engine's shared parts (settings, clock, leadership, publishing).
        quarantining: the nodes' quarantine reasons and holds (the avoidance mark is one of them).
        feed: the detect pipeline's findings (DetectPipeline.take_stragglers); None: nothing is taken.
        metrics: where the counts go (None: not counted).
    """

    def __init__(
        self,
        ctx: EngineContext,
        quarantining: Quarantining,
        feed: StragglerFeed | None = None,
        metrics: StragglerMetrics | None = None,
    ) -> None:
        self.ctx = ctx
        self.quarantining = quarantining
        self.feed = feed
        self.metrics = metrics
        self.marked: dict[tuple[str, str, int], str] = {}  # avoid episodes going on: reason key -> node
        self.held: set[tuple[str, tuple[str, str, int]]] = set()  # (node, reason key) of marks held after an episode
        self.reported_off = False  # `avoid` asked while policy.sub_health_taint is off: logged once

    def avoidance(self, s: Straggler) -> str:
        """``node-marked``, ``disabled`` (``avoid`` asked, policy.sub_health_taint off) or ``none`` for `s`."""
        if s.mode != STRAGGLER_AVOID:
            return "none"
        return "node-marked" if self.ctx.settings.policy.sub_health_taint and s.pod.node else "disabled"

    async def tick(self, now: datetime, leading: bool) -> None:
        """Take the findings since the last tick: count them, mark or unmark nodes, publish (leader)."""
        if self.feed is None:
            return
        found, ended, active = self.feed()
        await self._drop_lifted_holds()
        if self.metrics is not None:
            for s in found:
                self.metrics.straggler_found(s.job.kind.value)
            for kind in ("vcjob", "acjob"):
                self.metrics.stragglers_now(kind, sum(1 for s in active if s.job.kind.value == kind))
        for s in found:
            where = f"{s.job.namespace}/{s.job.name}"
            log.warning("straggler: a pod rank stays slower than its job's median", job=where, rank=s.rank,
                        pod=s.pod.name, node=s.pod.node, step_time_s=s.step_time_s, median_s=s.median_s,
                        mode=s.mode)  # fmt: skip
            await self._mark(s)
            if leading:
                await self._publish(s, "straggling", now, s.step_time_s, s.median_s)
        for e in ended:
            s = e.straggler
            log.info("straggler episode ended", job=f"{s.job.namespace}/{s.job.name}", rank=s.rank, pod=s.pod.name,
                     node=s.pod.node, cause=e.cause)  # fmt: skip
            await self._unmark(s, e.cause, now)
            if leading:
                await self._publish(s, "ended", now, e.step_time_s, e.median_s, e.cause)

    async def _mark(self, s: Straggler) -> None:
        if self.avoidance(s) != "node-marked":
            if s.mode == STRAGGLER_AVOID and not self.reported_off:
                self.reported_off = True
                log.warning("a job asks to avoid its stragglers' nodes but policy.sub_health_taint is off: not marked",
                            job=f"{s.job.namespace}/{s.job.name}")  # fmt: skip
            return
        node = s.pod.node
        q = self.quarantining
        if (node, s.key) in self.held:
            self.held.discard((node, s.key))
            q.flap_holds.pop((node, s.key), None)  # a hold left by an earlier episode of this rank on the node
        q.reasons.setdefault(node, {})[s.key] = FaultLevel.SUB_HEALTH
        self.marked[s.key] = node
        await q.request_sync(node)

    async def _drop_lifted_holds(self) -> None:
        """The held marks whose hold is gone (expired, or a person's ``fault-agent quarantine release`` lifted the
        node's holds): their quarantine reason goes too."""
        q = self.quarantining
        for node, key in sorted(self.held):
            if (node, key) in q.flap_holds:
                continue
            self.held.discard((node, key))
            reasons = q.reasons.get(node, {})
            if reasons.pop(key, None) is not None:
                if not reasons:
                    q.reasons.pop(node, None)
                await q.request_sync(node)

    async def _unmark(self, s: Straggler, cause: str, now: datetime) -> None:
        node = self.marked.pop(s.key, None)
        if node is None:
            return
        q = self.quarantining
        hold_s = self.ctx.settings.detect.straggler_avoid_hold_s
        if cause != "recovered" and hold_s > 0:
            q.flap_holds[(node, s.key)] = now + timedelta(seconds=hold_s)  # lifted by expire_flap_holds
            self.held.add((node, s.key))
        else:
            reasons = q.reasons.get(node, {})
            reasons.pop(s.key, None)
            if not reasons:
                q.reasons.pop(node, None)
        await q.request_sync(node)

    async def _publish(
        self,
        s: Straggler,
        state: str,
        now: datetime,
        step_time_s: float | None,
        median_s: float | None,
        ended_by: str | None = None,
    ) -> None:
        ctx = self.ctx
        build = functools.partial(
            ev.job_straggler, job_object(s.job), cluster=ctx.settings.cluster_name, at=now, found_at=s.at,
            state=state, pod=ObjectRef("Pod", s.pod.namespace, s.pod.name, s.pod.uid), node=s.pod.node,
            chips=s.pod.chips, rank=s.rank, step=s.step, step_time_s=step_time_s, median_s=median_s,
            multiple=s.multiple, windows=s.windows, lease=s.lease, mode=s.mode, avoidance=self.avoidance(s),
            ended_by=ended_by,
        )  # fmt: skip
        await ctx.publish(build)
