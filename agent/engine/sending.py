"""Sending: a decided restart carried out through the writer port, and the incident moved to ``restarting``.

The restart of an ``acting`` incident goes out here, whoever decided it (a fault's act task, an escalation, the
tick resuming an incident): in one apiserver round trip with the job's claim right after a decision
(:meth:`Sending._restart_with_claim`), or after a claim made first (a resumed incident, a graceExit wait). Once
sent, the incident is ``restarting`` (persisted), its follow-ups start (agent.engine.follow_ups) and its
bookkeeping is queued (agent.engine.bookkeeping); a restart that failed fails its incident
(agent.engine.closing).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime

import structlog

from agent.actions import Outcome, PodRef, RestartPlan, error_detail, restart_job
from agent.core.bookkeeping import BookkeepingIntent
from agent.core.cluster import JobKind, JobRecord
from agent.core.fence import NotLeader
from agent.core.incidents import Incident
from agent.core.policy import (
    POD_STATUS_ANNOTATION,
    Action,
    Decision,
    volcano_deletion_outdated,
    volcano_restart_by_deletion,
)
from agent.core.resetconfig import CHANGE_GRACE_EXIT_OFF
from agent.engine.bookkeeping import Bookkeeper
from agent.engine.checkpoints import CheckpointWaits
from agent.engine.claiming import Claiming, ClaimResult
from agent.engine.closing import Closing
from agent.engine.context import EngineContext
from agent.engine.follow_ups import FollowUps
from agent.engine.inflight import RestartsInFlight
from agent.engine.reset_config import ResetConfigWriting
from agent.engine.stages import FaultStages
from agent.engine.views import job_ref, live_pods
from agent.kube.errors import KubeError

log = structlog.get_logger(__name__)


class Sending:
    """Sends restarts (see the module docstring).

    Args:
        ctx: the engine's shared parts.
        inflight: the restarts in flight (bookkeeping to write, why a restart was not sent, Commands sent).
        claiming: the job's claim (sent with the restart, or before it) and its record's writes.
        follow_ups: started once a restart is sent.
        closing: fails the incident of a restart that failed.
        reset_config: the job's reset-config (graceExit's ``GracefulExit``).
        checkpoints: the checkpoint-aware graceful waits (graceExit).
        bookkeeper: takes each sent restart's bookkeeping.
        resubmit: carries out a ``resubmit`` decision (agent.engine.resubmitting).
    """

    def __init__(
        self,
        ctx: EngineContext,
        inflight: RestartsInFlight,
        claiming: Claiming,
        follow_ups: FollowUps,
        closing: Closing,
        reset_config: ResetConfigWriting,
        checkpoints: CheckpointWaits,
        bookkeeper: Bookkeeper,
        resubmit: Callable[[JobRecord, Incident], Awaitable[None]],
    ) -> None:
        self.ctx = ctx
        self.inflight = inflight
        self.claiming = claiming
        self.follow_ups = follow_ups
        self._podgroup_at_send: dict[str, str] = {}  # incident id -> its job's PodGroup UID when its Command went out
        self.closing = closing
        self.reset_config = reset_config
        self.checkpoints = checkpoints
        self.bookkeeper = bookkeeper
        self._resubmit = resubmit

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

    async def execute(
        self,
        job: JobRecord,
        incident: Incident,
        decision: Decision,
        *,
        claimed: bool = True,
        grace_exit: bool = False,
        stages: FaultStages | None = None,
    ) -> None:
        """Carry out the restart of an ``acting`` incident and move it to ``restarting`` (or ``failed``).

        `claimed`: the caller claimed the job already (a resumed incident: the restart follows, and the job's
        version is read again for the force follow-up). False: the claim goes out together with the restart's
        writes, in one round trip; see :meth:`_restart_with_claim` for why that is safe.

        `grace_exit` (a sub-health fault on a ``subHealthyStrategy: graceExit`` job; always claimed first, as
        the wait comes before any restart write): first set ``GracefulExit`` 1 in the job's reset-config and wait
        up to ``policy.grace_exit_wait_s`` for its pods' processes to exit (:meth:`_grace_exit`), and set it back
        to 0 once the restart is sent.

        `stages`: the fault's stage timings (agent.engine.stages), marked ``sent`` and ``answered`` here; None
        for a restart no fault of this process timed (a resumed incident)."""
        ctx = self.ctx
        bookkeeping = self.inflight.take_bookkeeping(incident.id)
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
            await self.claiming.persist(job, restarting.id)
            ctx.metrics.action(decision.action.value, Outcome.DRY_RUN.value if ctx.writer.dry_run else "done")
            ctx.metrics.incidents_open(*ctx.store.counts())
            return
        if grace_exit:
            await self.reset_config.grace_exit(job, incident.id, self.checkpoints, incident)
        if not claimed:
            await self._restart_with_claim(job, incident, decision, bookkeeping, stages)
            return
        plan: RestartPlan | None = None
        sent_at = ctx.clock.now()
        if stages is not None:
            stages.mark("sent")
        try:
            plan = await self._restart(job, incident, decision, version=None)
            if stages is not None:
                stages.mark("answered")
        except KubeError as e:  # the job's pods or version not read: fail this incident, keep the agent running
            detail = f"restart failed: {error_detail(e)}"[:300]
            await self._restarted(job, incident, decision, None, detail, bookkeeping, grace_exit=grace_exit)
            return
        await self._restarted(
            job, incident, decision, plan, plan.result.detail, bookkeeping, grace_exit=grace_exit, sent_at=sent_at
        )

    def _by_command(self, job: JobRecord, decision: Decision, pods: list[PodRef]) -> bool:
        """Whether `decision`'s restart of `job`, whose live pods are `pods` (the watch cache's), is a RestartJob
        Command (agent.actions.recovery.restart_job: a whole-job restart of a Volcano Job not made by deleting its
        pods): the only restart with a force follow-up, hence the only one whose cached ``status.version`` needs
        proving. A job restarted by deletion gets a Command instead when Volcano would not count the deletion (every
        pod older than the job's version: agent.core.policy.volcano_deletion_outdated)."""
        if job.kind is not JobKind.VOLCANO or decision.pods:
            return False
        if not volcano_restart_by_deletion(job, self.ctx.settings.policy.volcano_restart):
            return True
        return volcano_deletion_outdated(job, (p.version for p in pods))

    async def _restart(
        self, job: JobRecord, incident: Incident, decision: Decision, *, version: str | None
    ) -> RestartPlan:
        ctx = self.ctx
        pods = live_pods(ctx.state, job)
        by_command = self._by_command(job, decision, pods)
        if by_command and volcano_restart_by_deletion(job, ctx.settings.policy.volcano_restart):
            log.warning(
                "restart by RestartJob Command: Volcano would not count a deletion of pods older than the job",
                incident=incident.id, job=f"{job.namespace}/{job.name}", job_version=job.version,
                pod_versions=sorted({p.version for p in pods}),
            )  # fmt: skip
        group = ctx.state.podgroup_of(job) if by_command else None
        if group is not None:  # the PodGroup Volcano's kill for the Command deletes (agent.engine.follow_ups)
            self._podgroup_at_send[incident.id] = group.uid
        try:
            return await restart_job(
                ctx.writer,
                job_ref(job),
                mode=decision.mode,
                incident=incident.id,
                reason=decision.reason,
                only_pods=decision.pods,
                volcano_restart="command" if by_command else "delete-pods",
                known_pods=pods,
                version=version,
                command_sent=functools.partial(self.inflight.command_sent, incident.id),
            )
        except BaseException:  # no plan, so no follow-up to give it to
            self._podgroup_at_send.pop(incident.id, None)
            raise

    async def _restart_with_claim(
        self,
        job: JobRecord,
        incident: Incident,
        decision: Decision,
        bookkeeping: BookkeepingIntent | None = None,
        stages: FaultStages | None = None,
    ) -> None:
        """The restart in one apiserver round trip after the decision: the job's claim (incident ``acting``,
        ledger, actor, in the job's record: agent.core.records, conditioned on the record's cached resourceVersion),
        a GET of the job (only before a RestartJob Command: :meth:`_by_command`) and the Command (or the pod
        deletions) are sent at once; the rings-config reset
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
        - The fence refuses the claim's first write (the lease ran out between the decision and the writes: a
          frozen leader, the soak's SIGSTOP): nothing of the incident was sent, so no job record holds it and no
          successor resumes it, while its ``recovery.started`` is out already (agent.engine.acting
          ``Acting.recover`` made it durable first). :meth:`Claiming.try_claim` hands it to agent.engine.unsent
          then (whatever this task does next: the leadership lost cancels it), which ends it on this replica's
          ticks, leader or standby, unless a leader takes up the same incident id (a successor deciding the same
          still-active fault on the same record derives it): ``recovery.failed`` reason ``leadership-lost`` once
          the job's record counts a later incident, the job is gone or finished, or ``policy.recovery_deadline_s``
          passed since its first fault. Any other NotLeader here (a claim refused on a later try, a restart write
          refused after its claim passed) leaves the incident as the job's record says, as before.
        - Same replica, again: a retry of this incident (the tick resuming it, a lost answer) sends a Command
          of the same name (:func:`agent.actions.writer.command_name`): 409, already done, not a second one,
          while the Command exists. Volcano deletes it once taken, before the job's version moves, so a Command
          this process may have created (:meth:`RestartsInFlight.command_sent`, kept across its terms) is never
          sent again: the resume records the restart instead (agent.engine.ticking.Ticking._resume_acting;
          agent.core.fence).
          The incident is recorded as ``restarting`` once the restart was sent, whether or not the claim
          landed (when it did not, :meth:`Claiming.persist` writes it without the precondition).
        - The claim lands and the restart does not (a failed write, a crash): the job's record holds an
          ``acting`` incident of its current generation; this replica (the tick) or a successor resumes it and sends the
          restart once (:meth:`agent.engine.ticking.Ticking._resume_acting`: if the job's generation moved on,
          the restart happened and is only recorded).
        - The restart lands and the claim does not, and this replica lives: the claim's 409 re-reads the job
          and claims again (the retry loop of :meth:`Claiming.try_claim`), or the incident is persisted as restarting.
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
        if stages is not None:
            stages.mark("sent")
        claim = asyncio.ensure_future(self.claiming.try_claim(job, incident.id))  # first: its fence check comes first
        # proves the cached version (a read) for a Command's force follow-up; a restart by deletion has none, so
        # its read would only be one more request beside the deletions on the apiserver
        by_command = self._by_command(job, decision, live_pods(self.ctx.state, job))
        current = asyncio.ensure_future(self._job_unchanged(job) if by_command else _false())
        plan: RestartPlan | None = None
        detail = ""
        try:
            plan = await self._restart(job, incident, decision, version=job.version)
        except KubeError as e:  # the job's pods or version not read: fail this incident, keep the agent running
            detail = f"restart failed: {error_detail(e)}"[:300]
        except Exception:  # not handled, raised on (NotLeader; a bug: the act task logs it) once claim and read end
            await asyncio.gather(claim, current, return_exceptions=True)
            raise
        else:
            detail = plan.result.detail
            if stages is not None:
                stages.mark("answered")
        proven = await current
        try:
            claimed = await claim
        except NotLeader:
            if plan is not None and plan.result.outcome is not Outcome.FAILED:
                log.warning("restart sent, incident not written: no longer the leader", incident=incident.id)
            raise
        except Exception:  # last resort of the claim sent with a restart: a bug in it; the restart may have gone out
            log.exception("claiming the job failed", incident=incident.id, job=f"{job.namespace}/{job.name}")
            claimed = ClaimResult.NOT_CLAIMED
        sent = plan is not None and plan.result.outcome is not Outcome.FAILED
        if claimed is ClaimResult.OTHER_ACTOR:
            if not sent:
                self.claiming.adopt_other(job)
                return
            log.warning(
                "another actor claimed this job while this replica's restart was sent; keeping this incident",
                incident=incident.id, job=f"{job.namespace}/{job.name}",
            )  # fmt: skip
        elif claimed is ClaimResult.NOT_CLAIMED and not sent:  # neither landed: still acting, the tick resumes it
            claim_detail = self.inflight.unsent(incident.id) or "claim failed"
            self.inflight.mark_unsent(
                incident.id, f"{claim_detail}; restart failed: {detail}" if detail else claim_detail
            )
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
        except KubeError as e:  # not read: the follow-up reads the version again
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
        self.inflight.sent(incident.id)
        podgroup_uid = self._podgroup_at_send.pop(incident.id, None)
        outcome = Outcome.FAILED if plan is None else plan.result.outcome
        ctx.metrics.action(decision.action.value, outcome.value)
        if grace_exit:  # the old pods' processes are gone or being stopped: the new ones must start with 0
            await self.reset_config.write(job, incident.id, CHANGE_GRACE_EXIT_OFF)
        now = ctx.clock.now()
        if plan is None or outcome is Outcome.FAILED:
            await self.closing.action_failed(job, now, decision.action.value, detail)
            return
        names = [p.name for p in plan.pods] if decision.action is Action.RESTART_PODS else []
        restart_at = now if sent_at is None else min(sent_at, now)
        restarting = ctx.store.restarting(job.uid, restart_at, [p.uid for p in plan.pods], names)
        await self.claiming.persist(job, restarting.id)
        self.follow_ups.start(job, plan, restarting, podgroup_uid)
        if bookkeeping is not None:  # after the restart, queued: it never holds up or repeats the restart
            self.bookkeeper.record(bookkeeping, incident.id, at=restart_at)  # the restart's time: a successor's repeat
        ctx.metrics.incidents_open(*ctx.store.counts())


async def _false() -> bool:
    """Not proven, without a read (:meth:`Sending._restart_with_claim` for a restart with no force follow-up)."""
    return False
