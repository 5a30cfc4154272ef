"""Acting: carry out a :class:`~agent.engine.plan.Plan` through the ports.

A :class:`~agent.engine.plan.Recover` step opens the job's incident at once (a later fault of the job joins it)
and runs in a task of its own, so the faults of other jobs queued behind it are decided without waiting for this
job's apiserver round trips; one job's incident is acted on by one task at a time (its job UID is in flight,
agent.engine.inflight ``RestartsInFlight.begin``, until the task ends). The task claims the job
(agent.engine.claiming) and sends the restart (agent.engine.sending), whose follow-ups run in tasks too
(agent.engine.follow_ups).

A restart whose claim goes out with it (:func:`_one_round_trip`) is announced first: its ``recovery.started`` is
durable before anything is sent, and agent.engine.unsent is told (``UnsentIncidents.announce``). When the act task
is cancelled (the leadership lost) before the claim was handed to the writer, or the lease fence refuses that claim's
first write (agent.engine.claiming tells agent.engine.unsent), nothing of the incident reached the apiserver and no
job record holds it: agent.engine.unsent keeps it and ends it on the ticks (``recovery.failed`` reason
``leadership-lost``) unless a leader takes the same incident id up. Any other NotLeader leaves the incident as the
job's record says: whoever leads resumes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime

import structlog

from agent.actions import Outcome
from agent.core.cluster import FaultScheduling, JobRecord
from agent.core.faults import Fault, FaultLevel
from agent.core.fence import NotLeader
from agent.core.incidents import Incident
from agent.core.policy import Action, Decision
from agent.core.resetconfig import grace_exit_wanted
from agent.engine.bookkeeping import Bookkeeper
from agent.engine.claiming import Claiming
from agent.engine.closing import Closing
from agent.engine.context import EngineContext, durable
from agent.engine.inflight import RestartsInFlight
from agent.engine.plan import Defer, Escalate, FaultDetected, ForceDeletePod, Hold, Observe, Plan, Recover
from agent.engine.sending import Sending
from agent.engine.stages import FaultStages, RestartsSending
from agent.engine.unsent import UnsentIncident, UnsentIncidents
from agent.engine.views import job_object, job_ref, live_pods
from agent.sinks import events as ev

log = structlog.get_logger(__name__)

STOP_FAULTY_PODS = "stop-faulty-pods"
"""The ``action`` label of ``fault_agent_actions_total`` for the pods deleted at the end of a restart budget."""

_ONE_ROUND_TRIP = (Action.RESTART_JOB, Action.RESTART_PODS)
"""The actions whose claim goes out together with their writes (agent.engine.sending
``Sending._restart_with_claim``)."""


def _grace_exit_wanted(fault: Fault, job: JobRecord, decision: Decision) -> bool:
    """A sub-health fault restarting a ``subHealthyStrategy: graceExit`` job: GracefulExit 1 and a wait first."""
    return fault.level is FaultLevel.SUB_HEALTH and decision.restarts and grace_exit_wanted(dict(job.labels))


def _one_round_trip(fault: Fault, job: JobRecord, decision: Decision) -> bool:
    """Whether the claim goes out with the restart's writes: a restart action, unless a graceExit wait must
    come between the claim and the first restart write."""
    return decision.action in _ONE_ROUND_TRIP and not _grace_exit_wanted(fault, job, decision)


class Acting:
    """Carries out plans through the writer and event ports.

    Args:
        ctx: the engine's shared parts.
        inflight: the restarts in flight (which jobs a task acts on, their bookkeeping, their fault's kind).
        claiming: the job's claim before a restart not sent with it, and its record's writes.
        sending: sends the restart of an ``acting`` incident.
        closing: counts an incident that ended here (the restart budget used up).
        bookkeeper: rebuilds an escalation's bookkeeping.
        unsent: keeps an incident whose ``recovery.started`` is out and nothing of whose restart was sent
            (agent.engine.unsent), to end it on the ticks.
        defer: takes a restart the rate limit held back (decided again at the next tick).
        opened: told of each incident this term opened (its first events are published here).
        observe: takes an :class:`~agent.engine.plan.Observe` step (observe mode; agent.engine.observing).
    """

    def __init__(
        self,
        ctx: EngineContext,
        inflight: RestartsInFlight,
        claiming: Claiming,
        sending: Sending,
        closing: Closing,
        bookkeeper: Bookkeeper,
        unsent: UnsentIncidents,
        *,
        defer: Callable[[Defer], None],
        opened: Callable[[str], None],
        observe: Callable[[Observe], Awaitable[None]] | None = None,
    ) -> None:
        self.ctx = ctx
        self.inflight = inflight
        self.claiming = claiming
        self.sending = sending
        self.closing = closing
        self.bookkeeper = bookkeeper
        self.unsent = unsent
        self._defer = defer
        self._opened = opened
        self._observe = observe
        self.sending_now = RestartsSending(ctx.clock)  # what can wait (Kubernetes Events) waits for none
        self._act_started: set[str] = set()  # incidents whose act task took its first step and has not ended

    async def carry_out(self, plan: Plan) -> None:
        """Hand the plan's events to the sink, then take its steps, in order. The events are awaited (durable)
        only before a step: the force deletion here, the job's claim in its act task; not before the next fault
        is decided, so the events of faults queued together share one outbox write + fsync."""
        cluster = self.ctx.settings.cluster_name
        detected: Awaitable[None] = durable()
        for event in plan.events:
            detected = await self.ctx.submit(_fault_detected(event, cluster))  # commits complete in order
        for step in plan.steps:
            if isinstance(step, ForceDeletePod):
                await detected
                result = await self.ctx.writer.delete_pod(step.pod, incident=f"stuck:{step.pod.name}", grace_seconds=0)
                self.ctx.metrics.action(Action.FORCE_DELETE_PODS.value, result.outcome.value)
            elif isinstance(step, Defer):
                self._defer(step)
            elif isinstance(step, Observe):
                if self._observe is not None:
                    await self._observe(step)
            elif isinstance(step, Escalate):
                self.escalate(step)
            elif isinstance(step, Hold):
                await self.hold(step)
            else:
                await self.recover(step)

    async def recover(self, step: Recover) -> None:
        """Open the job's incident (synchronously: a later fault of the job joins it), hand the fault's
        fault.detected naming that incident to the sink (as a successor's re-publication of it does: same id,
        same event; before anything else about the incident), and act on it in a task once that event is
        durable."""
        fault, job, decision = step.fault, step.job, step.decision
        stages = FaultStages(fault.observed_at, self.ctx.clock, self.ctx.metrics)
        stages.mark("decided")
        incident = self.ctx.store.open(job, fault, decision, step.now)
        self._opened(incident.id)
        self.inflight.plan_bookkeeping(incident.id, step.bookkeeping)
        self.inflight.begin(job.uid)
        self.sending_now.started()  # before the events: their Kubernetes Events wait for the restart's writes
        event = FaultDetected(fault, job_object(job), incident.id)
        announced = _one_round_trip(fault, job, decision)
        try:
            detected = await self.ctx.submit(_fault_detected(event, self.ctx.settings.cluster_name))
            if announced:  # its writes all go out at once: the event is durable first
                detected = await self.ctx.submit(self._started(fault, job, decision, step.now, incident))
            stages.path_done()
        except BaseException:
            self.inflight.end(job.uid)
            self.sending_now.ended()
            raise
        if announced:  # until its claim is handed to the writer, nothing of it is sent (agent.engine.unsent)
            self.unsent.announce(UnsentIncident(incident, self.ctx.store.ledger(job.uid).incidents, fault.kind))
        task = self.ctx.tasks(
            self._act_in_task(fault, job, decision, step.now, incident, detected, stages), f"act:{incident.id}"
        )
        task.add_done_callback(lambda t: self._act_ended(t, job.uid, incident.id, announced=announced))

    def _act_ended(self, task: asyncio.Task[None], job_uid: str, incident_id: str, *, announced: bool) -> None:
        """The act task of `incident_id` ended. Cancelled before its first step (the leadership lost right after the
        decision), its coroutine never ran, so neither did its ``finally``: the job is idle again here. An announced
        incident cancelled before its claim was handed over is kept unsent (agent.engine.unsent)."""
        if task.cancelled() and incident_id not in self._act_started:
            self.inflight.end(job_uid, incident_id)
            self.sending_now.ended()
        self._act_started.discard(incident_id)
        if announced:
            self.unsent.act_ended(incident_id, cancelled=task.cancelled())

    async def hold(self, step: Hold) -> None:
        """Open the job's incident held by the open circuit breaker (agent.core.incidents ``held-by-breaker``),
        publish the fault's fault.detected naming it and ``recovery.held``, and write it into the job's record
        (the agent's own ConfigMap: ``fault-agent status`` shows it, a successor adopts it). Nothing is charged or
        restarted; a person's reset decides the job again (agent.engine.recovery ``sync_breaker``)."""
        ctx = self.ctx
        fault, job = step.fault, step.job
        incident = ctx.store.hold(job, fault, step.decision, step.now, step.reason)
        self._opened(incident.id)
        ref = job_object(job)
        await ctx.submit(_fault_detected(FaultDetected(fault, ref, incident.id), ctx.settings.cluster_name))
        await ctx.publish(
            lambda: ev.recovery_held(
                incident.id, ref, incident.action, incident.reason, cluster=ctx.settings.cluster_name, at=step.now,
                faults=[fault], dry_run=ctx.writer.dry_run, breaker_reason=step.breaker_reason,
            )
        )  # fmt: skip
        ctx.metrics.incidents_open(*ctx.store.counts())
        await self.claiming.persist(job, incident.id)

    def escalate(self, step: Escalate) -> None:
        """Start the whole-job restart of an escalated pod-level restart in a task of its own (one task per job,
        as :meth:`recover`): the incident goes back to ``acting`` (escalated, the ledger charged), the job is
        claimed (which persists both before anything is stopped), ``recovery.started`` attempt 2 is published,
        then the restart is sent. Nothing happens when the job is already being acted on."""
        job, decision = step.job, step.decision
        if self.inflight.acting_on(job.uid):
            return
        incident = self.ctx.store.escalate(job.uid, step.now, decision)
        self.inflight.plan_bookkeeping(incident.id, self.bookkeeper.resumed(job, incident))
        self.inflight.begin(job.uid)
        self.ctx.tasks(self._escalate_in_task(job, incident, decision, step.now), f"escalate:{incident.id}")

    async def _escalate_in_task(self, job: JobRecord, incident: Incident, decision: Decision, now: datetime) -> None:
        ctx = self.ctx
        try:
            if not await self.claiming.claim(job, incident.id):
                return  # the tick resumes the escalated ``acting`` incident (or adopts another actor's)
            await ctx.publish(
                lambda: ev.recovery_started(
                    incident.id, job_object(job), decision.action.value, decision.reason,
                    cluster=ctx.settings.cluster_name, at=now, attempt=2, dry_run=ctx.writer.dry_run,
                    budget_left=decision.budget_left,
                )
            )  # fmt: skip
            await self.sending.execute(job, incident, decision)
        except asyncio.CancelledError:
            raise
        except NotLeader as e:
            log.warning("stopped escalating: no longer the leader", incident=incident.id, detail=str(e))
        except Exception:  # last resort of the escalate task: one job's bug must not end the task group
            log.exception("escalating an incident failed", incident=incident.id, job=f"{job.namespace}/{job.name}")
            ctx.metrics.action(decision.action.value, Outcome.FAILED.value)
        finally:
            self.inflight.end(job.uid, incident.id)  # its bookkeeping not taken (not claimed): a resume rebuilds it

    async def _act_in_task(
        self,
        fault: Fault,
        job: JobRecord,
        decision: Decision,
        now: datetime,
        incident: Incident,
        detected: Awaitable[None],
        stages: FaultStages,
    ) -> None:
        self._act_started.add(incident.id)  # its ``finally`` ends what recover() began (else: _act_ended)
        try:
            await detected  # the fault's fault.detected is on disk before the job is claimed
            stages.mark("durable")
            await self._act_on(fault, job, decision, now, incident, stages)
        except asyncio.CancelledError:
            raise
        except NotLeader as e:  # the lease ran out mid-step: the leader resumes what the job's record says
            log.warning("stopped acting: no longer the leader", incident=incident.id, detail=str(e))
        except Exception:  # last resort of the act task: one job's bug must not end the task group
            log.exception("acting on an incident failed", incident=incident.id, job=f"{job.namespace}/{job.name}")
            self.ctx.metrics.action(decision.action.value, Outcome.FAILED.value)
        finally:
            self.inflight.end(job.uid, incident.id)
            self.sending_now.ended()
            stages.log(incident.id)

    async def _act_on(
        self, fault: Fault, job: JobRecord, decision: Decision, now: datetime, incident: Incident, stages: FaultStages
    ) -> None:
        ctx = self.ctx
        cluster = ctx.settings.cluster_name
        self.inflight.note_fault_kind(incident.id, fault.kind)
        if _one_round_trip(fault, job, decision):  # recovery.started is durable already (recover())
            await self.sending.execute(job, incident, decision, claimed=False, stages=stages)
            return
        if not await self.claiming.claim(job, incident.id):
            return  # not claimed: the tick resumes it, or another actor's incident in the job's record is adopted
        ref = job_object(job)
        if decision.action is Action.ABORT:
            ctx.metrics.budget_exhausted(job.kind.value)
            ctx.metrics.recovery_failed(job.kind.value, ev.FailureReason.BUDGET_EXHAUSTED.value)
            await ctx.publish(
                lambda: ev.recovery_failed(
                    incident.id, ref, ev.FailureReason.BUDGET_EXHAUSTED, cluster=cluster, at=now,
                    action=decision.action.value, detail=decision.reason,
                )
            )  # fmt: skip
            if decision.stop_pods:
                await self._stop_faulty_pods(job, incident, decision)
            self.closing.finished(incident, job)
            return
        await ctx.publish(self._started(fault, job, decision, now, incident))
        await self.sending.execute(
            job, incident, decision, grace_exit=_grace_exit_wanted(fault, job, decision), stages=stages
        )

    async def _stop_faulty_pods(self, job: JobRecord, incident: Incident, decision: Decision) -> None:
        """End of the restart budget on a hardware fault: delete the pods on the faulty hardware
        (`decision.stop_pods`, agent.core.policy.end_of_budget_pods), grace 0 in force mode, their own grace
        period in grace mode, each with its UID, so that the job's controller fails the job visibly. A failed
        delete is logged and counted (the recovery.failed event and the alert are out already)."""
        wanted = set(decision.stop_pods)
        pods = [p for p in live_pods(self.ctx.state, job) if p.name in wanted]
        if not pods:
            return
        grace = 0 if decision.mode is FaultScheduling.FORCE else None
        writer = self.ctx.writer
        result = await writer.delete_pods(pods, incident=incident.id, grace_seconds=grace, target=str(job_ref(job)))
        self.ctx.metrics.action(STOP_FAULTY_PODS, result.outcome.value)
        log.warning("restart budget used up: faulty pods deleted so the job's controller fails the job",
                    incident=incident.id, job=f"{job.namespace}/{job.name}", pods=[p.name for p in pods],
                    outcome=result.outcome.value, detail=result.detail)  # fmt: skip

    def _started(
        self, fault: Fault, job: JobRecord, decision: Decision, now: datetime, incident: Incident
    ) -> Callable[[], object]:
        ctx = self.ctx
        return lambda: ev.recovery_started(
            incident.id,
            job_object(job),
            decision.action.value,
            decision.reason,
            cluster=ctx.settings.cluster_name,
            at=now,
            faults=[fault],
            dry_run=ctx.writer.dry_run,
            budget_left=decision.budget_left,
        )


def _fault_detected(event: FaultDetected, cluster: str) -> Callable[[], object]:
    return lambda: ev.fault_detected(event.fault, cluster=cluster, job=event.job, incident_id=event.incident_id)
