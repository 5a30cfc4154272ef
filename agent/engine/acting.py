"""Acting: carry out a :class:`~agent.engine.plan.Plan` through the ports, and the incident's restart steps.

A :class:`~agent.engine.plan.Recover` step opens the job's incident at once (a later fault of the job joins it)
and runs in a task of its own, so the faults of other jobs queued behind it are decided without waiting for this
job's apiserver round trips; one job's incident is acted on by one task at a time (its job UID stays in
:attr:`Acting.executing` until the task ends). The restart's follow-ups (force deletion after the Command, or
after grace-over-time) run in tasks too.
"""

from __future__ import annotations

import asyncio
import enum
import functools
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime

import structlog

from agent.actions import (
    ActionResult,
    Outcome,
    PodRef,
    RestartPlan,
    error_detail,
    finish_force,
    finish_grace_wait,
    restart_job,
)
from agent.core.bookkeeping import BookkeepingIntent, resumed_intent
from agent.core.checkpoint_wait import GraceWait
from agent.core.cluster import FaultScheduling, JobKind, JobRecord, JobRef, node_is_down
from agent.core.faults import Fault, FaultKind, FaultLevel
from agent.core.fence import NotLeader, may_claim
from agent.core.incidents import Incident, Phase
from agent.core.policy import POD_STATUS_ANNOTATION, Action, Decision, volcano_restart_by_deletion
from agent.core.records import record_data
from agent.core.resetconfig import CHANGE_GRACE_EXIT_OFF, grace_exit_wanted
from agent.engine.bookkeeping import Bookkeeper
from agent.engine.checkpoints import CheckpointWaits
from agent.engine.context import EngineContext, durable
from agent.engine.plan import Defer, Escalate, FaultDetected, ForceDeletePod, Hold, Observe, Plan, Recover
from agent.engine.reset_config import ResetConfigWriting
from agent.engine.views import job_object, job_ref, live_pods, stored_record
from agent.sinks import events as ev

log = structlog.get_logger(__name__)

STOP_FAULTY_PODS = "stop-faulty-pods"
"""The ``action`` label of ``fault_agent_actions_total`` for the pods deleted at the end of a restart budget."""

CACHE_POLL_S = 0.25
"""How often the force follow-up looks at the watch cache for Volcano's new job version, seconds (a dict read; a
timer per restart in flight, so hundreds of restarts at once stay cheap)."""
READ_EVERY = 4
"""The force follow-up also reads the job from the apiserver on its first poll and every READ_EVERY-th (1 s)."""

COMMANDS_SENT_KEPT = 4096
"""How many incidents' sent RestartJob Commands :attr:`Acting.commands_sent` remembers (the oldest go first)."""
_ONE_ROUND_TRIP = (Action.RESTART_JOB, Action.RESTART_PODS)
"""The actions whose claim goes out together with their writes (:meth:`Acting._restart_with_claim`)."""


def _grace_exit_wanted(fault: Fault, job: JobRecord, decision: Decision) -> bool:
    """A sub-health fault restarting a ``subHealthyStrategy: graceExit`` job: GracefulExit 1 and a wait first."""
    return fault.level is FaultLevel.SUB_HEALTH and decision.restarts and grace_exit_wanted(dict(job.labels))


def _one_round_trip(fault: Fault, job: JobRecord, decision: Decision) -> bool:
    """Whether the claim goes out with the restart's writes: a restart action, unless a graceExit wait must
    come between the claim and the first restart write."""
    return decision.action in _ONE_ROUND_TRIP and not _grace_exit_wanted(fault, job, decision)


class _Claim(enum.Enum):
    CLAIMED = "claimed"
    OTHER_ACTOR = "other-actor"  # another actor appeared in the job's record during this term
    NOT_CLAIMED = "not-claimed"  # the write failed, or the job kept changing


class Acting:
    """Carries out plans and incidents' restarts through the writer and event ports.

    Args:
        ctx: the engine's shared parts.
        defer: takes a restart the rate limit held back (decided again at the next tick).
        opened: told of each incident this term opened (its first events are published here).
        observe: takes an :class:`~agent.engine.plan.Observe` step (observe mode; agent.engine.observing).
    """

    def __init__(
        self,
        ctx: EngineContext,
        defer: Callable[[Defer], None],
        opened: Callable[[str], None],
        observe: Callable[[Observe], Awaitable[None]] | None = None,
    ) -> None:
        self.ctx = ctx
        self._defer = defer
        self._opened = opened
        self._observe = observe
        self.reset_config = ResetConfigWriting(ctx)  # reset-config-<job>: the pod-level update, graceExit
        self.checkpoints = CheckpointWaits(ctx)  # checkpoint-aware graceful waits and how each ended
        # job UIDs whose incident this replica is acting on right now (between opening it and the restart being
        # sent): the tick must not mistake such an ``acting`` incident for one a previous leader left behind
        self.executing: set[str] = set()
        self.fault_kind: dict[str, FaultKind] = {}  # incident id -> first fault's kind (metrics label)
        self.bookkeeping: dict[str, BookkeepingIntent] = {}  # incident id -> what to record once it restarted
        self.bookkeeper = Bookkeeper(ctx)  # writes those, coalesced (agent.engine.bookkeeping)
        # old job UIDs whose resubmission failed after the delete: its record (ConfigMap) is left, and the leader
        # finishes it on a tick (agent.engine.resubmitting); their ``acting`` incident is not abandoned meanwhile
        self.kept: set[str] = set()
        # a resubmission incident closed since the records were last looked at: a record it left is now stale
        self.resubmission_closed = False
        # incident id -> why its restart was last not sent (a failed claim): the detail of its failure if the
        # recovery deadline passes first (agent.engine.ticking)
        self.unsent: dict[str, str] = {}
        # incident ids whose RestartJob Command this process may have created (agent.actions.recovery.restart_job
        # ``command_sent``), oldest first, at most COMMANDS_SENT_KEPT: kept across this process's terms, as what it
        # sent is a fact, not a belief about the jobs. A new term resuming such an incident left ``acting`` records
        # the restart instead of sending it again (agent.engine.ticking.Ticking._resume_acting): Volcano deletes a
        # Command once it ran it, before the job's status.version moves, so another of the same name would run again
        self.commands_sent: dict[str, None] = {}

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
        incident = self.ctx.store.open(job, fault, decision, step.now)
        self._opened(incident.id)
        if step.bookkeeping is not None:
            self.bookkeeping[incident.id] = step.bookkeeping
        self.executing.add(job.uid)
        event = FaultDetected(fault, job_object(job), incident.id)
        try:
            detected = await self.ctx.submit(_fault_detected(event, self.ctx.settings.cluster_name))
            if _one_round_trip(fault, job, decision):  # its writes all go out at once: the event is durable first
                detected = await self.ctx.submit(self._started(fault, job, decision, step.now, incident))
        except BaseException:
            self.executing.discard(job.uid)
            raise
        self.ctx.tasks(self._act_in_task(fault, job, decision, step.now, incident, detected), f"act:{incident.id}")

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
        await self.persist(job, incident.id)

    def escalate(self, step: Escalate) -> None:
        """Start the whole-job restart of an escalated pod-level restart in a task of its own (one task per job,
        as :meth:`recover`): the incident goes back to ``acting`` (escalated, the ledger charged), the job is
        claimed (which persists both before anything is stopped), ``recovery.started`` attempt 2 is published,
        then the restart is sent. Nothing happens when the job is already being acted on."""
        job, decision = step.job, step.decision
        if job.uid in self.executing:
            return
        incident = self.ctx.store.escalate(job.uid, step.now, decision)
        self.keep_bookkeeping(job, incident)
        self.executing.add(job.uid)
        self.ctx.tasks(self._escalate_in_task(job, incident, decision, step.now), f"escalate:{incident.id}")

    async def _escalate_in_task(self, job: JobRecord, incident: Incident, decision: Decision, now: datetime) -> None:
        ctx = self.ctx
        try:
            if not await self.claim(job, incident.id):
                return  # the tick resumes the escalated ``acting`` incident (or adopts another actor's)
            await ctx.publish(
                lambda: ev.recovery_started(
                    incident.id, job_object(job), decision.action.value, decision.reason,
                    cluster=ctx.settings.cluster_name, at=now, attempt=2, dry_run=ctx.writer.dry_run,
                    budget_left=decision.budget_left,
                )
            )  # fmt: skip
            await self.execute(job, incident, decision)
        except asyncio.CancelledError:
            raise
        except NotLeader as e:
            log.warning("stopped escalating: no longer the leader", incident=incident.id, detail=str(e))
        except Exception:  # one job's failure must not end the agent's task group
            log.exception("escalating an incident failed", incident=incident.id, job=f"{job.namespace}/{job.name}")
            ctx.metrics.action(decision.action.value, Outcome.FAILED.value)
        finally:
            self.executing.discard(job.uid)
            self.bookkeeping.pop(incident.id, None)  # not claimed: the tick's resume rebuilds it

    async def _act_in_task(
        self,
        fault: Fault,
        job: JobRecord,
        decision: Decision,
        now: datetime,
        incident: Incident,
        detected: Awaitable[None],
    ) -> None:
        try:
            await detected  # the fault's fault.detected is on disk before the job is claimed
            await self._act_on(fault, job, decision, now, incident)
        except asyncio.CancelledError:
            raise
        except NotLeader as e:  # the lease ran out mid-step: the leader resumes what the job's record says
            log.warning("stopped acting: no longer the leader", incident=incident.id, detail=str(e))
        except Exception:  # one job's failure must not end the agent's task group
            log.exception("acting on an incident failed", incident=incident.id, job=f"{job.namespace}/{job.name}")
            self.ctx.metrics.action(decision.action.value, Outcome.FAILED.value)
        finally:
            self.executing.discard(job.uid)
            self.bookkeeping.pop(incident.id, None)

    async def _act_on(
        self, fault: Fault, job: JobRecord, decision: Decision, now: datetime, incident: Incident
    ) -> None:
        ctx = self.ctx
        cluster = ctx.settings.cluster_name
        self.fault_kind[incident.id] = fault.kind
        if _one_round_trip(fault, job, decision):  # recovery.started is durable already (recover())
            await self.execute(job, incident, decision, claimed=False)
            return
        if not await self.claim(job, incident.id):
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
            self.finished(incident, job)
            return
        await ctx.publish(self._started(fault, job, decision, now, incident))
        await self.execute(job, incident, decision, grace_exit=_grace_exit_wanted(fault, job, decision))

    async def _mark_pods(self, job: JobRecord, incident: Incident, decision: Decision) -> None:
        """``fault-scheduling: external-*``: set ``huawei.com/pod-status`` = `decision.pod_status` on each live pod
        named in `decision.pods` (a merge patch of that one annotation, conditioned on the pod's UID), as
        MindCluster's rescheduler does for an outside component (``internal/rescheduling/job.go``
        ``addPodStatusAnnotation``). One result per pod is counted (``fault_agent_actions_total{action="mark-pods"}``)
        and logged; a pod gone already counts as ``already_done`` (MindCluster stops at a missing pod too)."""
        wanted = set(decision.pods)
        value = decision.pod_status
        pods = [p for p in live_pods(self.ctx.state, job) if p.name in wanted]
        for pod in pods:
            result = await self.ctx.writer.annotate_pod(pod, {POD_STATUS_ANNOTATION: value}, incident=incident.id)
            self.ctx.metrics.action(Action.MARK_PODS.value, result.outcome.value)
            log.info("fault pod marked for the outside component", incident=incident.id, pod=pod.name,
                     annotation=f"{POD_STATUS_ANNOTATION}={value}", outcome=result.outcome.value)  # fmt: skip

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

    async def execute(
        self,
        job: JobRecord,
        incident: Incident,
        decision: Decision,
        *,
        claimed: bool = True,
        grace_exit: bool = False,
    ) -> None:
        """Carry out the restart of an ``acting`` incident and move it to ``restarting`` (or ``failed``).

        `claimed`: the caller claimed the job already (a resumed incident: the restart follows, and the job's
        version is read again for the force follow-up). False: the claim goes out together with the restart's
        writes, in one round trip; see :meth:`_restart_with_claim` for why that is safe.

        `grace_exit` (a sub-health fault on a ``subHealthyStrategy: graceExit`` job; always claimed first, as
        the wait comes before any restart write): first set ``GracefulExit`` 1 in the job's reset-config and wait
        up to ``policy.grace_exit_wait_s`` for its pods' processes to exit (:meth:`_grace_exit`), and set it back
        to 0 once the restart is sent."""
        ctx = self.ctx
        bookkeeping = self.bookkeeping.pop(incident.id, None)
        if decision.action is Action.RESUBMIT:
            await self._resubmit(job, incident)
            return
        if decision.action is Action.MARK_PODS:
            await self._mark_pods(job, incident, decision)
        if decision.action in (Action.HAND_OFF, Action.MARK_PODS):
            # ProcessRecoverStrategy: the platform recovers the job; external-*: an outside component acts on the
            # marks. Nothing is stopped; the recovery is timed
            marked = decision.pods if decision.action is Action.MARK_PODS else ()
            restarting = ctx.store.restarting(job.uid, ctx.clock.now(), pod_names=marked)
            await self.persist(job, restarting.id)
            ctx.metrics.action(decision.action.value, Outcome.DRY_RUN.value if ctx.writer.dry_run else "done")
            ctx.metrics.incidents_open(*ctx.store.counts())
            return
        if grace_exit:
            await self.reset_config.grace_exit(job, incident.id, self.checkpoints, incident)
        if not claimed:
            await self._restart_with_claim(job, incident, decision, bookkeeping)
            return
        plan: RestartPlan | None = None
        sent_at = ctx.clock.now()
        try:
            plan = await self._restart(job, incident, decision, version=None)
        except NotLeader:
            raise
        except Exception as e:  # an ApiException listing pods: fail this incident, keep the agent running
            detail = f"restart failed: {error_detail(e)}"[:300]
            await self._restarted(job, incident, decision, None, detail, bookkeeping, grace_exit=grace_exit)
            return
        await self._restarted(
            job, incident, decision, plan, plan.result.detail, bookkeeping, grace_exit=grace_exit, sent_at=sent_at
        )

    async def _restart(
        self, job: JobRecord, incident: Incident, decision: Decision, *, version: str | None
    ) -> RestartPlan:
        ctx = self.ctx
        return await restart_job(
            ctx.writer,
            job_ref(job),
            mode=decision.mode,
            incident=incident.id,
            reason=decision.reason,
            only_pods=decision.pods,
            volcano_restart=(
                "delete-pods" if volcano_restart_by_deletion(job, ctx.settings.policy.volcano_restart) else "command"
            ),
            known_pods=live_pods(ctx.state, job),
            version=version,
            command_sent=functools.partial(self._command_sent, incident.id),
        )

    def _command_sent(self, incident_id: str) -> None:
        """Note that `incident_id`'s RestartJob Command may have reached the apiserver (:attr:`commands_sent`)."""
        self.commands_sent.pop(incident_id, None)
        self.commands_sent[incident_id] = None
        while len(self.commands_sent) > COMMANDS_SENT_KEPT:
            del self.commands_sent[next(iter(self.commands_sent))]

    async def _restart_with_claim(
        self, job: JobRecord, incident: Incident, decision: Decision, bookkeeping: BookkeepingIntent | None = None
    ) -> None:
        """The restart in one apiserver round trip after the decision: the job's claim (incident ``acting``,
        ledger, actor, in the job's record: agent.core.records, conditioned on the record's cached resourceVersion),
        a GET of the job and the RestartJob Command (or the pod deletions) are sent at once; the rings-config reset
        follows once the Command or the first deletions were accepted (agent.actions.recovery, step 1). The job's
        pods and ``status.version`` come from the watch cache. The claim is on the agent's own object, so it says
        nothing about the job; the GET proves the cached version instead: it answers with the cached resourceVersion
        only if the job had not changed when it was served, at the time the Command went out (a Command Volcano
        already ran shows as a new resourceVersion, which proves nothing and costs only the fast path). Unproven,
        the force follow-up reads the version again (a stale version there could force-delete pods before Volcano
        took the Command). No write of ours goes to the job besides the restart: its controller updates it
        read-modify-write, and a write in between made those updates fail.

        Why no order in which these writes land, nor a crash between them, restarts the job twice for one
        fault or loses the incident (with agent.core.fence's lease fence on every write):

        - The claim is handed to the writer first, so its fence check comes first; the fence only closes, so
          a restart write that was sent implies a claim that was sent (never a Command without a claim tried).
        - Same replica, again: a retry of this incident (the tick resuming it, a lost answer) sends a Command
          of the same name (:func:`agent.actions.writer.command_name`): 409, already done, not a second one,
          while the Command exists. Volcano deletes it once taken, before the job's version moves, so a Command
          this process may have created (:attr:`commands_sent`, kept across its terms) is never sent again: the
          resume records the restart instead (agent.engine.ticking.Ticking._resume_acting; agent.core.fence).
          The incident is recorded as ``restarting`` once the restart was sent, whether or not the claim
          landed (when it did not, :meth:`persist` writes it without the precondition).
        - The claim lands and the restart does not (a failed write, a crash): the job's record holds an
          ``acting`` incident of its current generation; this replica (the tick) or a successor resumes it and sends the
          restart once (:meth:`agent.engine.ticking.Ticking._resume_acting`: if the job's generation moved on,
          the restart happened and is only recorded).
        - The restart lands and the claim does not, and this replica lives: the claim's 409 re-reads the job
          and claims again (the retry loop of :meth:`claim`), or the incident is persisted as restarting.
        - A successor never restarts the job twice for one fault with the claim on the agent's own object: the
          claim (create or replace at the record's version) is the only way an ``acting`` incident gets into the
          record, and a successor resumes what the record holds; with the job's generation moved on, in the
          watch cache or in a GET of the job (a cache behind a Command Volcano already ran and deleted would
          otherwise have the same-named Command created again), it only records the restart
          (agent.engine.ticking.Ticking._resume_acting), and otherwise sends the Command of the same
          deterministic name or the pod deletions with UID preconditions (pods already replaced are not hit).
          The old claim's precondition on the job's resourceVersion added
          nothing to this: it only proved the cached ``status.version`` for the force follow-up, which the GET
          above does now.
        - The restart lands, the claim does not, and this replica dies before writing the incident: the job
          was restarted by a write no record holds. Volcano counted it (``status.retryCount`` above the
          ledger's ``restarts_used``, which the claim would have charged), and the job's pods are newer than
          the fault; a successor re-evaluating the still-active fault takes it as covered
          (:meth:`agent.core.incidents.IncidentStore.covers`), so it does not restart the job again. Not covered:
          an AscendJob (or ``volcano_restart=delete-pods``) restarted by pod deletions has no such counter; there
          the window between the deletions and the claim landing remains (milliseconds, both sent at once).
        - Another actor appears in the job's record during this term (an old leader's claim delayed past the lease
          fence; its own precondition, the record's version it had read, fails once this replica's claim landed):
          when this replica's restart was sent, its own incident is kept and recorded over the other (the restart
          is this one); when not, the other's incident is adopted as before. The old leader's
          delayed batch may hold its Command too, which the sequential claim excluded: a write delayed past the
          fence gap is the limit agent.core.fence states already (and its Command has this incident's name when
          both decided on the same job state).
        """
        sent_at = self.ctx.clock.now()
        claim = asyncio.ensure_future(self._claim(job, incident.id))  # first: its fence check comes first
        current = asyncio.ensure_future(self._job_unchanged(job))  # proves the cached version (a read)
        plan: RestartPlan | None = None
        detail = ""
        try:
            plan = await self._restart(job, incident, decision, version=job.version)
        except NotLeader:
            await asyncio.gather(claim, current, return_exceptions=True)
            raise
        except Exception as e:  # an ApiException listing pods: fail this incident, keep the agent running
            detail = f"restart failed: {error_detail(e)}"[:300]
        else:
            detail = plan.result.detail
        proven = await current
        try:
            claimed = await claim
        except NotLeader:
            if plan is not None and plan.result.outcome is not Outcome.FAILED:
                log.warning("restart sent, incident not written: no longer the leader", incident=incident.id)
            raise
        except Exception:  # a bug in the claim's write: the restart's writes may have gone out all the same
            log.exception("claiming the job failed", incident=incident.id, job=f"{job.namespace}/{job.name}")
            claimed = _Claim.NOT_CLAIMED
        sent = plan is not None and plan.result.outcome is not Outcome.FAILED
        if claimed is _Claim.OTHER_ACTOR:
            if not sent:
                self._adopt_other(job)
                return
            log.warning(
                "another actor claimed this job while this replica's restart was sent; keeping this incident",
                incident=incident.id, job=f"{job.namespace}/{job.name}",
            )  # fmt: skip
        elif claimed is _Claim.NOT_CLAIMED and not sent:  # neither landed: still acting, the tick resumes it
            claim_detail = self.unsent.get(incident.id, "claim failed")
            self.unsent[incident.id] = f"{claim_detail}; restart failed: {detail}"[:300] if detail else claim_detail
            return
        if plan is not None and plan.needs_force_follow_up and not proven:
            plan = replace(plan, version="")  # not proven by the GET: the follow-up reads it again
        await self._restarted(job, incident, decision, plan, detail, bookkeeping, sent_at=sent_at)

    async def _job_unchanged(self, job: JobRecord) -> bool:
        """Whether the job, read from the apiserver now (sent together with the restart), is still the cached
        `job` (same UID and resourceVersion): then the cached ``status.version`` was current when the restart went
        out. Only a Volcano job's force follow-up uses it; False for any other, and on any error (unproven: the
        follow-up reads the version itself)."""
        if job.kind is not JobKind.VOLCANO or not job.resource_version:
            return False
        try:
            meta = await self.ctx.writer.job_meta(job_ref(job))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a read: the follow-up reads the version again
            log.info("job not read with its restart", job=f"{job.namespace}/{job.name}", error=error_detail(e))
            return False
        return meta is not None and meta[0] == job.resource_version

    async def _restarted(
        self,
        job: JobRecord,
        incident: Incident,
        decision: Decision,
        plan: RestartPlan | None,
        detail: str,
        bookkeeping: BookkeepingIntent | None = None,
        *,
        grace_exit: bool = False,
        sent_at: datetime | None = None,
    ) -> None:
        """Record what the restart did: ``restarting`` (persisted) and its follow-ups, or ``failed``; after a
        graceExit restart (`grace_exit`), ``GracefulExit`` goes back to 0.

        `sent_at` (engine clock, UTC): when the restart's writes went out. It is the incident's ``restart_at``,
        the floor of the recovery check (pods created since the restart) and the bookkeeping record's time; not
        the time of the answers: Volcano may take the Command and create the new pods before a loaded apiserver
        answers, and pods made in an earlier second than the answer would never count as the restarted ones."""
        ctx = self.ctx
        self.unsent.pop(incident.id, None)
        outcome = Outcome.FAILED if plan is None else plan.result.outcome
        ctx.metrics.action(decision.action.value, outcome.value)
        if grace_exit:  # the old pods' processes are gone or being stopped: the new ones must start with 0
            await self.reset_config.write(job, incident.id, CHANGE_GRACE_EXIT_OFF)
        now = ctx.clock.now()
        if plan is None or outcome is Outcome.FAILED:
            await self.action_failed(job, now, decision.action.value, detail)
            return
        names = [p.name for p in plan.pods] if decision.action is Action.RESTART_PODS else []
        restart_at = now if sent_at is None else min(sent_at, now)
        restarting = ctx.store.restarting(job.uid, restart_at, [p.uid for p in plan.pods], names)
        await self.persist(job, restarting.id)
        if plan.needs_grace_follow_up:
            wait_s = ctx.settings.policy.grace_over_time_s
            follow_up = self._grace_follow_up(job, plan.pods, restarting, wait_s)
            ctx.tasks(follow_up, f"grace:{incident.id}")
        if plan.needs_force_follow_up:
            ctx.tasks(self._force_follow_up(job, plan.pods, plan.version, incident.id), f"grace:{incident.id}:force")
        if bookkeeping is not None:  # after the restart, queued: it never holds up or repeats the restart
            self.bookkeeper.record(bookkeeping, incident.id, at=restart_at)  # the restart's time: a successor's repeat
        ctx.metrics.incidents_open(*ctx.store.counts())

    async def action_failed(self, job: JobRecord, now: datetime, action: str, detail: str) -> None:
        """The restart or resubmission failed (or never went out: agent.engine.ticking): the incident fails, is
        persisted and reported (``recovery.failed`` reason ``action-error``)."""
        ctx = self.ctx
        failed = ctx.store.fail(job.uid, now, detail)
        await self.persist(job, failed.id)
        ctx.metrics.recovery_failed(job.kind.value, ev.FailureReason.ACTION_ERROR.value)
        await ctx.publish(
            lambda: ev.recovery_failed(
                failed.id, job_object(job), ev.FailureReason.ACTION_ERROR, cluster=ctx.settings.cluster_name,
                at=now, action=action, detail=detail,
            )
        )  # fmt: skip
        self.finished(failed, job)

    async def _resubmit(self, job: JobRecord, incident: Incident) -> None:
        """Delete the Failed job and create it again from its spec; the incident follows the new UID and is
        recovered when the new job runs (see agent.engine.ticking). The lineage count is the ledger's
        resubmissions, already charged when the incident opened (and read back from the job's record after a
        restart)."""
        ctx = self.ctx
        store = ctx.store
        count = store.ledger(job.uid).resubmits_used
        started = ctx.clock.now()  # the new job's restart time: its pods are made before the answers are all in
        try:
            result = await ctx.writer.resubmit_job(job_ref(job), incident=incident.id, count=count)
        except NotLeader:
            raise
        except Exception as e:  # never let one job's resubmission stop the agent
            detail = f"resubmit failed: {error_detail(e)}"[:300]
            result = ActionResult("resubmit", str(job_ref(job)), Outcome.FAILED, detail)
        ctx.metrics.action(Action.RESUBMIT.value, result.outcome.value)
        now = ctx.clock.now()
        if result.outcome is Outcome.FAILED and result.kept:
            # the job is deleted but its resubmission is recorded: the incident stays acting and follows the job
            # once a tick (this leader's or a successor's) creates it from the record
            self.kept.add(job.uid)
            log.warning(
                "resubmission cut short after the delete; kept for the next pass", incident=incident.id,
                job=f"{job.namespace}/{job.name}", configmap=result.kept, detail=result.detail,
            )  # fmt: skip
            return
        if result.outcome is Outcome.FAILED or (result.outcome is not Outcome.DRY_RUN and not result.uid):
            await self.action_failed(job, now, Action.RESUBMIT.value, result.detail or "resubmit gave no new job")
            return
        if result.outcome is Outcome.DRY_RUN:
            restarting = store.restarting(job.uid, now)
            await self.persist(job, restarting.id)
            return
        log.info(
            "job resubmitted", incident=incident.id, job=f"{job.namespace}/{job.name}", uid=result.uid, count=count
        )
        await self.follow_resubmitted(job_ref(job), result.uid, min(started, now))

    async def follow_resubmitted(self, old: JobRef, new_uid: str, now: datetime) -> None:
        """The job `old` was created again as `new_uid`: its ``acting`` incident (in the store) moves to the new
        UID, ``restarting``, and is persisted in the new job's record (recovered once it runs: agent.engine.ticking);
        the old job's record goes (best effort: else when the old job's deletion is seen, or at a term's sweep).

        Raises:
            TransitionError: the store has no acting incident for `old.uid`.
            NotLeader: the fence closed before the record was written.
        """
        ctx = self.ctx
        store = ctx.store
        moved = store.resubmitted(old.uid, new_uid, now)
        self.kept.discard(old.uid)
        ctx.restored.add(new_uid)  # the store already holds the new job's incident and ledger
        new_ref = JobRef(old.kind, old.namespace, old.name, new_uid)
        written = await ctx.writer.write_record(new_ref, record_data(*store.encoded(new_uid), ""), incident=moved.id)
        if written.outcome is Outcome.FAILED:
            log.warning(
                "incident state not persisted for the resubmitted job", incident=moved.id, detail=written.detail
            )
        else:
            dropped = await ctx.writer.delete_record(old.uid, incident=moved.id)
            if dropped.outcome is Outcome.FAILED:
                log.warning("old job's record not deleted", incident=moved.id, detail=dropped.detail)
        ctx.metrics.incidents_open(*store.counts())

    def resumed_bookkeeping(self, job: JobRecord, incident: Incident) -> BookkeepingIntent | None:
        """The bookkeeping of `incident`'s restart decided earlier and sent now or already (an escalation, an
        incident left ``acting`` that this replica resumes), rebuilt from the incident, the job's cached pods and
        its ledger (agent.core.bookkeeping.resumed_intent); None with ``policy.bookkeeping`` off or when the
        incident's action is no restart."""
        if not self.ctx.settings.policy.bookkeeping or incident.action not in (a.value for a in _ONE_ROUND_TRIP):
            return None
        pods = self.ctx.state.pods_of_job(job.kind, job.namespace, job.name)
        return resumed_intent(job, incident, pods, self.ctx.store.ledger(job.uid))

    def keep_bookkeeping(self, job: JobRecord, incident: Incident) -> None:
        """Remember :meth:`resumed_bookkeeping` for `incident`: :meth:`execute` writes it once the restart is
        sent."""
        intent = self.resumed_bookkeeping(job, incident)
        if intent is not None:
            self.bookkeeping[incident.id] = intent

    def resume_follow_ups(self, job: JobRecord, incident: Incident) -> None:
        """Start again the follow-ups of `incident`'s restart, which a previous leader sent (the incident is
        ``restarting``, read back from the job's record): that leader's follow-up tasks ended with it, and
        nothing else removes the old pods it was to force (Volcano's deletion honours their grace period, which
        never ends on a dead node; a stuck-terminating fault only joins the open incident). The pods are those of
        the job still in the watch cache whose UIDs the ledger records as stopped by the agent. Force mode after a
        RestartJob Command: deleted with grace 0 once the job's version moved on from the incident's generation
        (pod deletions in force mode were grace 0 already: nothing to follow up). Grace mode: force-deleted once
        ``policy.grace_over_time_s`` has passed since the restart (at once when it has). Nothing in dry-run."""
        ctx = self.ctx
        if ctx.writer.dry_run or incident.action not in (a.value for a in _ONE_ROUND_TRIP):
            return
        stopped = set(ctx.store.ledger(job.uid).agent_pod_uids)
        pods = tuple(
            sorted(
                (PodRef(p.namespace, p.name, p.uid)
                 for p in ctx.state.pods_of_job(job.kind, job.namespace, job.name) if p.uid in stopped),
                key=lambda p: p.name,
            )
        )  # fmt: skip
        if not pods:
            return
        log.info("resuming the follow-up of a previous leader's restart", incident=incident.id, pods=len(pods))
        if incident.mode == FaultScheduling.GRACE.value:
            since = (ctx.clock.now() - (incident.restart_at or ctx.clock.now())).total_seconds()
            wait_s = max(0.0, ctx.settings.policy.grace_over_time_s - since)
            ctx.tasks(self._grace_follow_up(job, pods, incident, wait_s), f"grace:{incident.id}")
            return
        command = (
            job.kind is JobKind.VOLCANO
            and not volcano_restart_by_deletion(job, ctx.settings.policy.volcano_restart)
            and incident.action == Action.RESTART_JOB.value
        )
        if command:
            ctx.tasks(self._force_follow_up(job, pods, incident.generation, incident.id), f"grace:{incident.id}:force")

    async def _force_follow_up(self, job: JobRecord, pods: tuple[PodRef, ...], version: str, incident_id: str) -> None:
        """Force mode after a RestartJob Command: the old `pods` go at once (grace 0) once Volcano took it (the
        job's version is no longer `version`, the one before the Command; "" reads it first)."""
        try:
            read_version = None  # the apiserver's (a GET every 0.25 s)
            if version:  # the GET sent with the restart proved it current: follow the watch cache, read seldom
                read_version = self._version_reader(job, version)
            else:  # the cached version was not proven (or the job had none): read it
                version = await self.ctx.writer.job_version(job_ref(job)) or ""
            result = await finish_force(
                self.ctx.writer, job_ref(job), pods, incident=incident_id, version=version,
                read_version=read_version, poll_s=CACHE_POLL_S,
            )  # fmt: skip
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a failed read: logged, Volcano's own deletion and the deadline still apply
            log.warning("force follow-up failed", incident=incident_id, error=error_detail(e))
            return
        self.ctx.metrics.action("force-after-command", result.outcome.value)
        log.info("force follow-up", incident=incident_id, outcome=result.outcome.value, detail=result.detail)

    def _version_reader(self, job: JobRecord, version: str) -> Callable[[], Awaitable[str | None]]:
        """What the force follow-up polls (every CACHE_POLL_S) for the job's version after the Command, when
        `version` is the cached one the GET sent with the restart proved current: the watch cache's (None when the
        job, with this UID, is gone from it), and the apiserver's on the first poll and every READ_EVERY-th after it
        while the cache still shows `version` (a watch that lags, or a fake world in which nothing updates the
        cache).
        The cache only moves forward, so its version differing from `version` means the job's changed."""
        polls = 0

        async def read() -> str | None:
            nonlocal polls
            rec = self.ctx.state.job(job.kind, job.namespace, job.name)
            cached = rec.version if rec is not None and rec.uid == job.uid else None
            if cached != version:
                return cached
            polls += 1
            if polls % READ_EVERY == 1:
                return await self.ctx.writer.job_version(job_ref(job))
            return cached

        return read

    def _on_down_nodes(self, pods: tuple[PodRef, ...]) -> tuple[PodRef, ...]:
        """Those of `pods` still in the cache whose node is down (agent.core.cluster.node_is_down): they cannot exit
        gracefully, so the grace follow-up forces them at once (issue 36, 6)."""
        state = self.ctx.state
        out = []
        for p in pods:
            rec = state.pods.get(f"{p.namespace}/{p.name}")
            if rec is not None and rec.uid == p.uid and rec.node and node_is_down(state.nodes.get(rec.node)):
                out.append(p)
        return tuple(out)

    async def _grace_follow_up(
        self, job: JobRecord, pods: tuple[PodRef, ...], incident: Incident, wait_s: float
    ) -> None:
        """Grace mode: after `wait_s` seconds (grace-over-time, or what is left of it), force-delete those of the
        job's `pods` that are still there; sooner when the job's heartbeat reports a checkpoint newer than the fault
        (agent.engine.checkpoints)."""
        incident_id = incident.id
        checkpointed = self.checkpoints.check(job, incident)
        try:
            finished = await finish_grace_wait(
                self.ctx.writer, job_ref(job), pods, incident=incident_id, grace_over_time_s=wait_s,
                on_down_nodes=self._on_down_nodes, checkpointed=checkpointed,
                poll_s=CACHE_POLL_S if checkpointed is not None else 1.0,  # a checkpoint: looked for in the cache
            )  # fmt: skip
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a failed read of a pod: logged, the incident's deadline still applies
            log.warning("grace follow-up failed", incident=incident_id, error=error_detail(e))
            return
        result = finished.result
        self.checkpoints.ended(job, incident_id, GraceWait.GRACE_OVER_TIME, finished.ended, finished.waited_s)
        self.ctx.metrics.action("force-after-grace", result.outcome.value)
        log.info("grace follow-up", incident=incident_id, outcome=result.outcome.value, detail=result.detail)

    async def claim(self, job: JobRecord, incident_id: str) -> bool:
        """The decisive write before any restart of `job` that is not sent with its restart (agent.core.fence;
        :meth:`_claim`): when another actor appeared on the job's record, this replica drops its own incident and
        adopts the record's (the tick resumes it). Returns whether the job is claimed (dry-run counts as claimed).

        Raises:
            NotLeader: the lease fence closed before the write was sent.
        """
        claimed = await self._claim(job, incident_id)
        if claimed is _Claim.OTHER_ACTOR:
            self._adopt_other(job)
        return claimed is _Claim.CLAIMED

    def _adopt_other(self, job: JobRecord) -> None:
        self.ctx.store.forget(job.uid)
        self.ctx.restored.discard(job.uid)  # its record is adopted at the next tick

    async def _claim(self, job: JobRecord, incident_id: str) -> _Claim:
        """Write the job's incident and ledger plus ``actor`` = this term's actor into the job's record (a ConfigMap
        of the agent's, agent.core.records; never the job object): created when the watch shows no record (an
        earlier version's annotations on the job count as none: the claim migrates them), else replaced with the
        record's resourceVersion as the watch last delivered it as precondition. A 409 (the record exists, or
        changed since) reads the record again and claims again while no other actor has appeared on it
        (agent.core.fence.may_claim; no record at all is no other actor: only a job's deletion removes one).

        Raises:
            NotLeader: the lease fence closed before a write was sent.
        """
        ctx = self.ctx
        ref = job_ref(job)
        mine = ctx.term.actor()
        expected = {ctx.term.actor_baseline.get(job.uid), None}
        stored = stored_record(ctx.state, job)
        current = (stored.actor or None) if stored is not None else None
        version = "" if stored is None or stored.legacy else stored.resource_version
        for _ in range(4):
            if not may_claim(current, expected, mine):
                log.warning(
                    "another replica claimed this job during this term; adopting its incident instead",
                    incident=incident_id, job=f"{job.namespace}/{job.name}", actor=current,
                )  # fmt: skip
                return _Claim.OTHER_ACTOR
            data = record_data(*ctx.store.encoded(job.uid), mine)
            result = await ctx.writer.claim_record(ref, data, resource_version=version, incident=incident_id)
            if result.outcome in (Outcome.DONE, Outcome.DRY_RUN):
                return _Claim.CLAIMED  # the baseline stays: the cache may still show it
            if result.status != 409:
                log.warning("job not claimed; not restarting it now", incident=incident_id, detail=result.detail)
                self.unsent[incident_id] = f"claim failed: {result.detail}"[:300]
                return _Claim.NOT_CLAIMED
            try:
                record = await ctx.writer.read_record(ref)
            except Exception as e:  # an ApiException: the tick tries again
                log.warning("job record not re-read after a conflict", incident=incident_id, error=error_detail(e))
                self.unsent[incident_id] = f"record not re-read after a claim's conflict: {error_detail(e)}"[:300]
                return _Claim.NOT_CLAIMED
            version = "" if record is None else record.resource_version
            current = None if record is None else (record.actor or None)
        log.warning("job record kept changing; not claimed", incident=incident_id)
        self.unsent[incident_id] = "job record kept changing: not claimed after 4 conflicts"
        return _Claim.NOT_CLAIMED

    async def persist(self, job: JobRecord, incident_id: str) -> None:
        """Write the job's incident and ledger into its record (agent.core.records; the actor is kept)."""
        ctx = self.ctx
        data = record_data(*ctx.store.encoded(job.uid), "")
        result = await ctx.writer.write_record(job_ref(job), data, incident=incident_id)
        if result.outcome is Outcome.FAILED:
            log.warning("incident state not persisted", incident=incident_id, detail=result.detail)

    def finished(self, incident: Incident, job: JobRecord) -> None:
        """Count a closed incident: ``recovery_seconds`` by outcome, and the incidents still open. A closed
        ``resubmit`` incident sets :attr:`resubmission_closed` (a record it left is stale now)."""
        seconds = ((incident.closed_at or incident.first_fault_at) - incident.first_fault_at).total_seconds()
        kind = self.fault_kind.pop(incident.id, FaultKind.CHIP)
        self.unsent.pop(incident.id, None)
        self.commands_sent.pop(incident.id, None)
        outcome = "recovered" if incident.phase is Phase.RECOVERED else "failed"
        if incident.action == Action.RESUBMIT.value:
            self.resubmission_closed = True  # agent.engine.resubmitting looks at the records again
        self.ctx.metrics.recovery(job.kind.value, kind.value, incident.action or "none", outcome, seconds)
        self.ctx.metrics.incidents_open(*self.ctx.store.counts())


def _fault_detected(event: FaultDetected, cluster: str) -> Callable[[], object]:
    return lambda: ev.fault_detected(event.fault, cluster=cluster, job=event.job, incident_id=event.incident_id)
