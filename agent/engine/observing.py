"""Observing: the recoveries someone else makes (``policy.mode=observe``), watched and reported.

An :class:`~agent.engine.plan.Observe` step opens an :class:`agent.core.observe.Observation` for the hit job (a
later fault of the job joins it) and publishes the fault's ``fault.detected`` naming it. Each tick moves the open
observations on from the state cache (:func:`agent.core.observe.step`) and reports what happened with the same
events and histogram as the agent's own incidents, marked ``acted_by=observed``: ``recovery.started`` when a
restart is seen, ``recovery.succeeded`` (and a fault_agent_recovery_seconds sample) when the job runs again,
``recovery.failed`` (reason ``job-failed``, ``timeout`` or ``job-gone``) otherwise. Nothing is written to the
cluster and nothing is persisted: observations live in this replica's memory for its leadership term (a new
leader observes the faults it re-evaluates, from the job's state then).
"""

from __future__ import annotations

from datetime import datetime

import structlog

from agent.core.cluster import JobKind
from agent.core.faults import Fault, FaultKind, ObjectRef
from agent.core.observe import (
    ACTED_BY_OBSERVED,
    Observation,
    Transition,
    open_observation,
    recovery_seconds,
    step,
    worth_watching,
)
from agent.engine.context import EngineContext
from agent.engine.plan import Observe
from agent.engine.views import job_object
from agent.sinks import events as ev

log = structlog.get_logger(__name__)

CLOSED_KEPT = 100
"""How many closed observations :attr:`Observing.closed` keeps (status and tests)."""

_FAILURES = {
    Transition.FAILED: (ev.FailureReason.JOB_FAILED, "failed"),
    Transition.TIMEOUT: (ev.FailureReason.TIMEOUT, "failed"),
    Transition.ABANDONED: (ev.FailureReason.JOB_GONE, "abandoned"),
}


class Observing:
    """The open observations, by job UID, and what each tick makes of them."""

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self.open: dict[str, Observation] = {}
        self.fault_kind: dict[str, FaultKind] = {}  # observation id -> first fault's kind (metrics label)
        self.faults: dict[str, list[Fault]] = {}  # observation id -> its faults (recovery.started's data.faults)
        self.closed: list[tuple[Observation, Transition]] = []

    def new_term(self) -> None:
        """A new leadership term starts from nothing (observations are not persisted)."""
        self.open.clear()
        self.fault_kind.clear()
        self.faults.clear()

    async def take(self, observe: Observe) -> None:
        """Open the job's observation for the step's fault (or join the open one) and hand the fault's
        ``fault.detected`` naming it to the sink; a fault not worth watching
        (:func:`agent.core.observe.worth_watching`) with no observation open is only published."""
        ctx = self.ctx
        job, fault = observe.job, observe.fault
        ref = job_object(job)
        cluster = ctx.settings.cluster_name
        obs = self.open.get(job.uid)
        if obs is None and not worth_watching(observe.decision.action.value, observe.decision.controller_restarts):
            await ctx.submit(lambda: ev.fault_detected(fault, cluster=cluster, job=ref))
            return
        if obs is None:
            pods = ctx.state.pods_of_job(job.kind, job.namespace, job.name)
            obs = open_observation(job, pods, fault, observe.now)
            self.open[job.uid] = obs
            self.fault_kind[obs.id] = fault.kind
            self.faults[obs.id] = [fault]
            log.info("observing the job for a restart", observation=obs.id, job=f"{job.namespace}/{job.name}",
                     pods=obs.pod_count, hit=len(obs.hit))  # fmt: skip
        else:
            self.faults.setdefault(obs.id, []).append(fault)
            log.info("fault joined the open observation", observation=obs.id, job=f"{job.namespace}/{job.name}")
        opened = obs
        await ctx.submit(lambda: ev.fault_detected(fault, cluster=cluster, job=ref, incident_id=opened.id))

    async def advance(self, now: datetime) -> None:
        """Move every open observation on from the state cache and report what happened."""
        ctx = self.ctx
        deadline_s = ctx.settings.policy.recovery_deadline_s
        for uid, obs in list(self.open.items()):
            job = ctx.state.job(JobKind(obs.kind), obs.namespace, obs.name)
            pods = ctx.state.pods_of_job(JobKind(obs.kind), obs.namespace, obs.name)
            new, transition = step(obs, job, pods, now, deadline_s)
            self.open[uid] = new
            if transition is None:
                continue
            if new.closed_at is not None:
                del self.open[uid]
                self.closed.append((new, transition))
                del self.closed[:-CLOSED_KEPT]
            await self._report(new, transition, now)

    async def _report(self, obs: Observation, transition: Transition, now: datetime) -> None:
        ctx = self.ctx
        cluster = ctx.settings.cluster_name
        ref = ObjectRef(obs.kind, obs.namespace, obs.name, obs.job_uid)
        where = f"{obs.namespace}/{obs.name}"
        if transition is Transition.STARTED:
            log.info("observed a restart made by someone else", observation=obs.id, job=where, signs=obs.start)
            faults = list(self.faults.get(obs.id, []))
            await ctx.publish(
                lambda: ev.recovery_started(
                    obs.id, ref, obs.action, f"restarted by someone else (observed): {obs.start}", cluster=cluster,
                    at=now, faults=faults, acted_by=ACTED_BY_OBSERVED,
                )
            )  # fmt: skip
            return
        kind = self.fault_kind.pop(obs.id, FaultKind.CHIP)
        self.faults.pop(obs.id, None)
        seconds = recovery_seconds(obs)
        if transition is Transition.UNRESTARTED:
            log.info("no restart observed for the fault; observation ended", observation=obs.id, job=where)
            return
        if transition is Transition.RECOVERED:
            started = obs.started_at or obs.observed_at
            end = obs.closed_at or now
            durations = ev.Durations(
                detection=max(0.0, (obs.observed_at - obs.first_fault_at).total_seconds()),
                decision=0.0,
                action=max(0.0, (started - obs.observed_at).total_seconds()),
                reschedule=max(0.0, (end - started).total_seconds()),
                total=seconds,
            )
            log.info("observed restart recovered", observation=obs.id, job=where, seconds=seconds)
            ctx.metrics.recovery(obs.kind, kind.value, obs.action, "recovered", seconds, acted_by=ACTED_BY_OBSERVED)
            await ctx.publish(
                lambda: ev.recovery_succeeded(
                    obs.id, ref, obs.action, durations, cluster=cluster, at=now, acted_by=ACTED_BY_OBSERVED
                )
            )
            return
        reason, outcome = _FAILURES[transition]
        deadline_s = ctx.settings.policy.recovery_deadline_s
        detail = {
            Transition.FAILED: "the job's controller gave the job up after the observed restart",
            Transition.TIMEOUT: f"not running again within {deadline_s:.0f} s of the fault",
            Transition.ABANDONED: "job deleted while recovering",
        }[transition]
        log.warning("observed restart did not recover", observation=obs.id, job=where, reason=reason.value)
        ctx.metrics.recovery(obs.kind, kind.value, obs.action, outcome, seconds, acted_by=ACTED_BY_OBSERVED)
        await ctx.publish(
            lambda: ev.recovery_failed(
                obs.id, ref, reason, cluster=cluster, at=now, action=obs.action, detail=detail,
                acted_by=ACTED_BY_OBSERVED,
            )
        )  # fmt: skip
