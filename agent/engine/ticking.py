"""Ticking: what the engine does once a second besides faults.

Advance the open incidents (recovered, or past their deadline), end those whose job is gone, resume incidents a
previous leader left ``acting``, publish again the first events of adopted incidents, and decide again the faults
that joined a closed incident. The checks of the watched jobs themselves (their labels, the hot-switch waits) are
agent.engine.job_checks.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import structlog

from agent.core.cluster import JobKind, JobRecord, PodRecord
from agent.core.correlate import correlate
from agent.core.faults import Fault, FaultLevel, ObjectRef
from agent.core.fence import NotLeader
from agent.core.incidents import Incident, Phase, describe_fault, fault_place, job_healthy
from agent.core.policy import Action, Decision, controller_ended_job
from agent.core.resetconfig import (
    CHANGE_GRACE_EXIT_OFF,
    CHANGE_POD_RESCHEDULE,
    grace_exit_wanted,
    pod_level_update_wanted,
)
from agent.engine.bookkeeping import Bookkeeper
from agent.engine.checkpoints import CheckpointWaits
from agent.engine.claiming import Claiming
from agent.engine.closing import Closing
from agent.engine.context import EngineContext
from agent.engine.deciding import Deciding
from agent.engine.fault_jobs import FaultJobs
from agent.engine.follow_ups import FollowUps
from agent.engine.inflight import RestartsInFlight
from agent.engine.plan import Plan
from agent.engine.reset_config import ResetConfigWriting
from agent.engine.sending import Sending
from agent.engine.views import StateJobs, job_object, job_ref, pods_for
from agent.kube.errors import KubeError
from agent.sinks import events as ev

log = structlog.get_logger(__name__)


class Ticking:
    """The engine's time-driven steps over the open incidents and the watched jobs.

    Args:
        ctx: the engine's shared parts.
        deciding: plans escalations and the re-decided joined faults.
        fault_jobs: which jobs a fault hit (an incident's faults).
        carry_out: carries out a plan (agent.engine.acting ``Acting.carry_out``).
        inflight: the restarts in flight (acted on now, kept resubmissions, unsent, Commands sent).
        claiming: claims a resumed incident's job and persists incidents in their records.
        sending: sends a resumed incident's restart.
        follow_ups: starts again the follow-ups of a previous leader's restart.
        closing: counts closed incidents and fails the ones never sent.
        reset_config: writes a job's reset-config (``GracefulExit``, the pod-level update).
        checkpoints: the graceful waits of a restart, reported when it recovered.
        bookkeeper: writes the bookkeeping of a restart resumed or sent by a previous leader.
    """

    def __init__(
        self,
        ctx: EngineContext,
        deciding: Deciding,
        fault_jobs: FaultJobs,
        carry_out: Callable[[Plan], Awaitable[None]],
        *,
        inflight: RestartsInFlight,
        claiming: Claiming,
        sending: Sending,
        follow_ups: FollowUps,
        closing: Closing,
        reset_config: ResetConfigWriting,
        checkpoints: CheckpointWaits,
        bookkeeper: Bookkeeper,
    ) -> None:
        self.ctx = ctx
        self.deciding = deciding
        self.fault_jobs = fault_jobs
        self.carry_out = carry_out
        self.inflight = inflight
        self.claiming = claiming
        self.sending = sending
        self.follow_ups = follow_ups
        self.closing = closing
        self.reset_config = reset_config
        self.checkpoints = checkpoints
        self.bookkeeper = bookkeeper
        # incidents whose first events this term published (opened here) or published again (adopted)
        self.republished: set[str] = set()

    def new_term(self) -> None:
        """A new leadership term publishes the adopted incidents' events again."""
        self.republished.clear()

    async def advance(self, now: datetime) -> None:
        """Advance every open incident (see the module docstring)."""
        ctx = self.ctx
        for incident in ctx.store.open_incidents():
            job = ctx.state.job(JobKind(incident.kind), incident.namespace, incident.name)
            if job is None or job.uid != incident.job_uid:
                if (
                    incident.action == Action.RESUBMIT.value
                    and incident.phase is Phase.RESTARTING
                    and now - incident.first_fault_at <= timedelta(seconds=ctx.settings.policy.recovery_deadline_s)
                ):
                    continue  # the resubmitted job is not in the cache yet
                if self.inflight.is_kept(incident.job_uid):
                    continue  # deleted for a resubmission not finished yet: agent.engine.resubmitting creates it
                if not self.inflight.acting_on(incident.job_uid):  # else its act task ends it first
                    await self._abandon(incident, now)
                continue
            if incident.id not in self.republished:
                self.republished.add(incident.id)
                await self._republish(job, incident)
                if incident.phase is Phase.RESTARTING:  # the previous leader's follow-ups ended with it
                    self.follow_ups.resume(job, incident)
                    # and its bookkeeping round may not have landed: written again, its record added once
                    intent = self.bookkeeper.resumed(job, incident)
                    if intent is not None:
                        self.bookkeeper.record(intent, incident.id, at=incident.restart_at, once=True)
            if incident.phase is Phase.ACTING:
                # `incident` is a snapshot taken before this loop awaited anything: the recovery loop may have
                # moved it on since, or be sending its restart right now; only a still-acting, idle one is resumed
                current = ctx.store.incident(incident.job_uid)
                if (
                    current is not None
                    and current.id == incident.id
                    and current.phase is Phase.ACTING
                    and not self.inflight.acting_on(incident.job_uid)
                ):
                    await self._resume_acting(job, current, now)
                continue
            pods = ctx.state.pods_of_job(job.kind, job.namespace, job.name)
            faults_on_job = incident.action in (Action.HAND_OFF.value, Action.MARK_PODS.value) and self._faults_on_job(
                job, pods
            )
            if incident.phase is Phase.HELD and self._acting_faults_gone(job, incident):
                # its faults cleared while the breaker held it and the job runs: nothing to restart any more
                changed: Incident | None = ctx.store.recovered_unrestarted(
                    job.uid, now, "its faults cleared while the circuit breaker held the restart; not restarted"
                )
            else:
                changed = ctx.store.observe(
                    job, pods, now, ctx.settings.policy.recovery_deadline_s, faults_on_job=faults_on_job
                )
            if changed is None:
                if not self.inflight.acting_on(incident.job_uid):
                    escalation = self.deciding.plan_escalation(job, incident, now)
                    if escalation is not None:
                        await self.carry_out(escalation)
                continue
            try:
                if changed.phase is Phase.RECOVERED:  # before the close is in the record: see _pods_placed
                    await self._pods_placed(job, changed)
                # the end's event is durable before the record says the incident ended: a replica killed between
                # the two leaves the incident open in the record, and whoever leads next ends it again under the
                # same event id (incident, attempt); the other order lost the end for good (the soak, seed 11)
                await self._publish_closed(changed, job, now)
                await self.claiming.persist(job, changed.id)
            except NotLeader:
                # the end is not in the record: leave the incident as the job's record says, so that whoever
                # leads next (this replica too, after a lost renewal) ends it and publishes that again (same id)
                ctx.store.forget(job.uid)
                ctx.restore(job, now)
                raise
            self.closing.finished(changed, job)
            await self._redecide_joined(job, now)

    def _acting_too_long(self, incident: Incident, now: datetime) -> bool:
        """True when an ``acting`` incident whose restart was never sent (every claim failed: a 403 or 422 from
        RBAC or an admission webhook, an apiserver failing) is past ``policy.recovery_deadline_s`` from its first
        fault, as a ``restarting`` one is failed then (IncidentStore.observe). Asked only once the restart is known
        not to have happened (the job's version has not moved), and only after this replica's own attempt failed:
        an incident a previous leader left behind past its deadline is resumed once first. Not a resubmission whose
        record is kept: its job may already be deleted, and the record is what creates it again."""
        deadline = timedelta(seconds=self.ctx.settings.policy.recovery_deadline_s)
        return (
            now - incident.first_fault_at > deadline
            and self.inflight.unsent(incident.id) is not None
            and not self.inflight.is_kept(incident.job_uid)
        )

    async def _fail_unsent(self, job: JobRecord, incident: Incident, now: datetime, *, grace_job: bool) -> None:
        """Fail an ``acting`` incident past its deadline whose restart was never sent (:meth:`_acting_too_long`):
        persisted in its record, logged, one ``recovery.failed`` (reason ``action-error``: the restart's writes kept
        failing; detail: the deadline and the last failed write, alert FaultAgentRecoveryActionFailed), and the
        faults that joined it decided again. A graceExit job's ``GracefulExit`` goes back to 0 first: no restart
        comes, so its processes must not be told to exit.

        Raises:
            NotLeader: the lease fence closed before a write; the incident stays as the job's record says.
        """
        ctx = self.ctx
        detail = f"not restarted within {ctx.settings.policy.recovery_deadline_s:.0f} s of the fault"
        detail = f"{detail}: {self.inflight.unsent(incident.id) or 'its writes failed'}"
        try:
            if grace_job:
                await self.reset_config.write(job, incident.id, CHANGE_GRACE_EXIT_OFF)
            await self.closing.action_failed(job, now, incident.action, detail)
        except NotLeader:
            ctx.store.forget(job.uid)
            ctx.restore(job, now)
            raise
        log.warning("recovery failed: the restart was never sent", incident=incident.id, reason="action-error",
                    job=f"{job.namespace}/{job.name}", detail=detail)  # fmt: skip
        await self._redecide_joined(job, now)

    async def _pods_placed(self, job: JobRecord, incident: Incident) -> None:
        """A restarted ``pod-rescheduling: on`` job (not ``process-recover-enable: on``) has all its pods back:
        rewrite its reset-config as MindCluster's plugin does once they are placed (plugin/job.go
        ``updateResetConfigMap``): ``RetryTime`` + 1 after a pod-level restart, 0 after a whole-job one; the
        surviving pods' processes see it and restart. Once per incident (the close happens once).

        Written before the close is persisted: a leader that dies in between leaves the incident ``restarting``, and
        its successor closes it and writes again, which the ConfigMap's ``UpdateTime`` after the restart
        (``since_s``) turns into a no-op when the first write landed. Persisted first, a close whose write was
        lost would leave the surviving processes waiting for it for good."""
        if incident.action not in (Action.RESTART_PODS.value, Action.RESTART_JOB.value):
            return
        if not pod_level_update_wanted(dict(job.labels)):
            return
        pod_level = incident.action == Action.RESTART_PODS.value
        since_s = int(incident.restart_at.timestamp()) if incident.restart_at is not None else 0
        await self.reset_config.write(job, incident.id, CHANGE_POD_RESCHEDULE, pod_level=pod_level, since_s=since_s)

    async def _redecide_joined(self, job: JobRecord, now: datetime) -> int:
        """The job's incident just closed: decide again, at once, every fault that joined it and is still active
        on the job's current (not terminating) pods. A fault that joined while the restart was under way may sit
        on a pod that very restart created; nothing else would look at it again until the agent restarted.
        Returns the faults decided again."""
        ctx = self.ctx
        joined = ctx.store.take_joined(job.uid)
        if not joined or ctx.active_faults is None:
            return 0
        active = {(f.key, f.pod): f for f in ctx.active_faults()}
        current = ctx.state.job(job.kind, job.namespace, job.name)
        if current is None or current.uid != job.uid:
            return 0
        n = 0
        for seen in joined:
            fault = active.get((seen.key, seen.pod))
            if fault is None:
                continue  # cleared since it joined
            live = [p for p in pods_for(ctx.state, fault) if p.deletion_timestamp is None]
            for hit in correlate(fault, live, StateJobs(ctx.state), ctx.state.device_allocations).hits:
                if hit.job.uid != job.uid or not hit.actionable:
                    continue
                log.info(
                    "a fault that joined the closed incident is still active on the job's pods; deciding again",
                    job=f"{job.namespace}/{job.name}",
                    node=fault.node,
                    chips=list(fault.chips),
                )
                n += 1
                await self.carry_out(self.deciding.plan_hit(fault, hit, now, redeciding=True))
        return n

    async def _abandon(self, incident: Incident, now: datetime) -> None:
        """The job of an open incident is gone (deleted mid-recovery): the incident ends as abandoned, with one
        log line, one ``recovery.failed`` event (reason ``job-gone``) and one ``recovery_seconds`` sample
        (outcome ``abandoned``); then the store forgets the job."""
        ctx = self.ctx
        detail = "job deleted while recovering"
        failed = ctx.store.fail(incident.job_uid, now, detail)
        ctx.store.forget(incident.job_uid)
        seconds = max(0.0, (now - failed.first_fault_at).total_seconds())
        kind = self.inflight.abandoned(failed.id)
        log.warning(
            "job deleted while recovering; incident abandoned",
            incident=failed.id, job=f"{failed.namespace}/{failed.name}", phase=incident.phase.value, seconds=seconds,
        )  # fmt: skip
        ctx.metrics.recovery(failed.kind, kind.value, failed.action or "none", "abandoned", seconds)
        ctx.metrics.recovery_failed(failed.kind, ev.FailureReason.JOB_GONE.value)
        ctx.metrics.incidents_open(*ctx.store.counts())
        ref = ObjectRef(failed.kind, failed.namespace, failed.name, failed.job_uid)
        await ctx.publish(
            lambda: ev.recovery_failed(
                failed.id, ref, ev.FailureReason.JOB_GONE, cluster=ctx.settings.cluster_name, at=now,
                action=failed.action, detail=detail,
            )
        )  # fmt: skip

    async def _publish_closed(self, incident: Incident, job: JobRecord, now: datetime) -> None:
        ctx = self.ctx
        ref = job_object(job)
        cluster = ctx.settings.cluster_name
        if incident.phase is Phase.RECOVERED:
            log.info("job recovered", incident=incident.id, seconds=incident.recovery_seconds)
            first = incident.first_fault_at
            acted = incident.at(Phase.ACTING) or first
            restart = incident.restart_at or acted
            done = incident.at(Phase.RECOVERED) or now
            durations = ev.Durations(
                detection=0.0,
                decision=max(0.0, (acted - first).total_seconds()),
                action=max(0.0, (restart - acted).total_seconds()),
                reschedule=max(0.0, (done - restart).total_seconds()),
                total=max(0.0, (done - first).total_seconds()),
            )
            waits = self.checkpoints.take(incident.id)  # the restart's graceful waits (agent.engine.checkpoints)
            await ctx.publish(
                lambda: ev.recovery_succeeded(
                    incident.id, ref, incident.action, durations, cluster=cluster, at=now,
                    time_to_first_step_s=ctx.goodput.time_to_first_step(incident.id), grace_waits=waits,
                )
            )  # fmt: skip
            return
        # the job's controller gave the job up (Volcano: Failed at retryCount == maxRetry), else the deadline passed
        # (while the open circuit breaker held the incident: breaker-open)
        reason = ev.FailureReason.JOB_FAILED if controller_ended_job(job) else ev.FailureReason.TIMEOUT
        if incident.at(Phase.HELD) is not None and incident.at(Phase.ACTING) is None:
            reason = ev.FailureReason.BREAKER_OPEN
        log.warning("recovery failed", incident=incident.id, reason=reason.value, detail=incident.detail)
        ctx.metrics.recovery_failed(job.kind.value, reason.value)
        await ctx.publish(
            lambda: ev.recovery_failed(
                incident.id, ref, reason, cluster=cluster, at=now, action=incident.action, detail=incident.detail,
            )
        )  # fmt: skip

    def _faults_on_job(self, job: JobRecord, pods: list[PodRecord]) -> bool:
        """True when an active fault (the detectors' current view) hits one of the job's live pods; True when
        there is no such view (unsure: a hand-off is then timed out by its deadline, never closed too early)."""
        ctx = self.ctx
        if ctx.active_faults is None:
            return True
        live = [p for p in pods if p.deletion_timestamp is None]
        jobs = StateJobs(ctx.state)
        return any(
            h.job.uid == job.uid
            for f in ctx.active_faults()
            for h in correlate(f, live, jobs, ctx.state.device_allocations).hits
        )

    def _acting_faults_gone(self, job: JobRecord, incident: Incident) -> bool:
        """True when an ``acting`` incident no longer needs its restart: none of its faults is still active (by the
        detectors' current view; when the incident lists only its first faults, no active fault hits the job at
        all) and the job is healthy (Running, every live pod Running and Ready). False when unsure (no view of the
        active faults)."""
        ctx = self.ctx
        if ctx.active_faults is None or incident.action not in (Action.RESTART_JOB.value, Action.RESTART_PODS.value):
            return False
        listed = {fault_place(text) for text in incident.faults}
        complete = incident.fault_count <= len(incident.faults)
        pods = ctx.state.pods_of_job(job.kind, job.namespace, job.name)
        for fault in ctx.active_faults():
            if fault_place(describe_fault(fault)) in listed:
                return False
            if not complete and any(
                h.job.uid == job.uid
                for h in correlate(fault, pods, StateJobs(ctx.state), ctx.state.device_allocations).hits
            ):
                return False
        return job_healthy(job, pods, None)

    def _incident_faults(self, job: JobRecord, incident: Incident) -> list[Fault]:
        """The active faults that opened or joined `incident`: those its list names (whatever this replica saw
        them hit: a standby whose loop took a fault up only after the restart had taken the job's pods noted no
        job for it), or all of the job's when it has no list or the list was cut at ``MAX_FAULTS_KEPT``. Another
        active fault of the job (one that needed no action) is not the incident's."""
        active: list[Fault] = self.ctx.active_faults() if self.ctx.active_faults is not None else []
        return [f for f in active if incident.names(f) or (self.fault_jobs.hit(f, job.uid) and incident.may_hold(f))]

    async def _republish(self, job: JobRecord, incident: Incident) -> None:
        """An open incident this term did not open (a previous leader's, read back from the job's record):
        nothing proves that leader's first events reached Kafka (they may have been in its own outbox when it
        died), so publish them again before anything else about the incident: fault.detected for each active
        fault that opened or joined it, then recovery.started (for an escalated incident, of both attempts).
        Their ids are deterministic (the fault and job; the incident and attempt), so a consumer drops the copies
        of events that did arrive."""
        ctx = self.ctx
        ref = job_object(job)
        cluster = ctx.settings.cluster_name
        faults = self._incident_faults(job, incident)
        log.info("publishing the first events of an adopted incident again", incident=incident.id, faults=len(faults))
        for fault in faults:
            build = functools.partial(ev.fault_detected, fault, cluster=cluster, job=ref, incident_id=incident.id)
            await ctx.publish(build)
        if incident.phase is Phase.HELD:  # held by the breaker: nothing started, its recovery.held again
            held_at = incident.at(Phase.HELD) or incident.first_fault_at
            build = functools.partial(
                ev.recovery_held, incident.id, ref, incident.action or Action.RESTART_JOB.value,
                incident.reason or "held by the open circuit breaker", cluster=cluster, at=held_at, faults=faults,
                dry_run=ctx.writer.dry_run,
            )  # fmt: skip
            await ctx.publish(build)
            return
        # an escalated incident started twice: the pod-level restart (attempt 1; only a restart-pods incident
        # escalates, and the escalation overwrote its action) and the whole-job one (attempt 2, at its acting step)
        acted = [when for phase, when in incident.steps if phase is Phase.ACTING] or [incident.first_fault_at]
        attempts = [(1, Action.RESTART_PODS.value, acted[0]), (2, incident.action, acted[-1])]
        if not incident.escalated:
            attempts = [(1, incident.action or Action.RESTART_JOB.value, acted[0])]
        for attempt, action, at in attempts:
            build = functools.partial(
                ev.recovery_started, incident.id, ref, action, incident.reason or "resumed by a new leader",
                cluster=cluster, at=at, attempt=attempt, faults=faults, dry_run=ctx.writer.dry_run,
            )  # fmt: skip
            await ctx.publish(build)

    async def _moved_on(self, job: JobRecord, incident: Incident) -> bool:
        """Whether the job's generation, read from the apiserver (a GET: the watch cache may lag behind a restart
        the previous leader sent), moved on from the incident's: then that restart happened and must not be sent
        again (a RestartJob Command that Volcano ran is deleted, so a second one of the same name would restart
        the job twice). False when the job cannot be read (the claim and restart then fail or find it)."""
        try:
            live = await self.ctx.writer.job_version(job_ref(job))
        except KubeError as e:  # the GET failed: decided on the cache
            log.info("job version not read before resuming", incident=incident.id, error=str(e))
            return False
        return live is not None and live != incident.generation

    async def _resume_acting(self, job: JobRecord, incident: Incident, now: datetime) -> None:
        """A previous leader opened this incident and may or may not have sent the restart. If the job's
        generation moved on (in the watch cache, else as the apiserver has it now: :meth:`_moved_on`; the claim is
        on the agent's own record and proves nothing about the job), the restart happened: just mark it (the pods
        it stopped: those older than the decision) and start its follow-ups again (agent.engine.follow_ups
        ``FollowUps.resume``). If none of its faults is active any more and the job is healthy
        (:meth:`_acting_faults_gone`), close it as recovered without restarting. Else send the restart again
        (idempotent writes), unless the recovery deadline passed first: then the incident fails
        (:meth:`_fail_unsent`) instead of being retried for good.

        An incident whose RestartJob Command this process may have created (in an earlier term, or before a
        failure in this one: agent.engine.inflight ``RestartsInFlight.command_was_sent``) counts as restarted as
        well: Volcano deletes a Command once taken and moves the job's version only later, so the same-named
        Command sent again would be a second
        restart (agent.core.fence).

        A ``subHealthyStrategy: graceExit`` job may have been left with ``GracefulExit`` 1 in its reset-config (the
        previous leader died in the wait, or after the restart but before setting it back). TaskD's manager kills
        the workers whenever it reads 1 (component/taskd .../ms_mgr/msrun_plugin.py ``_handle_grace_exit``), so the
        flag left at 1 would stop the restarted job's training at once, for good. So every branch ends with
        ``GracefulExit`` 0 for such a job (a no-op write when it is 0 already), and a restart sent again for
        sub-health faults waits for the processes to exit first, as the first attempt did."""
        ctx = self.ctx
        grace_job = grace_exit_wanted(dict(job.labels))
        pod_level = incident.action == Action.RESTART_PODS.value
        sent_here = self.inflight.command_was_sent(incident.id)
        if sent_here:
            log.info(
                "incident left acting by an earlier term of this replica, which sent its RestartJob Command: "
                "recorded as restarted, not sent again", incident=incident.id, job=f"{job.namespace}/{job.name}",
            )  # fmt: skip
        if sent_here or job.version != incident.generation or await self._moved_on(job, incident):
            # the last acting step: an escalated incident's is the whole-job restart's, not the pod-level one's
            acted = max((t for p, t in incident.steps if p is Phase.ACTING), default=None) or ctx.clock.now()
            # the pods the restart stopped: those (of the incident's, for a pod-level one) older than the decision
            floor = acted.replace(microsecond=0)
            stopped = [
                p.uid
                for p in ctx.state.pods_of_job(job.kind, job.namespace, job.name)
                if p.created_at is not None and p.created_at < floor and (not pod_level or p.name in incident.pods)
            ]
            restarting = ctx.store.restarting(job.uid, acted, stopped, incident.pods if pod_level else ())
            await self.claiming.persist(job, restarting.id)
            self.follow_ups.resume(job, restarting)  # the previous leader's ended with it
            # the restart went out but was never recorded as such, so neither was its bookkeeping (written only
            # after ``restarting`` is persisted): write it now, as MindCluster does after each restart
            intent = self.bookkeeper.resumed(job, restarting)
            if intent is not None:
                # at the restart's time, as every record (a later successor's repeat is then found already there)
                self.bookkeeper.record(intent, restarting.id, at=restarting.restart_at, once=True)
            if grace_job:
                await self.reset_config.write(job, incident.id, CHANGE_GRACE_EXIT_OFF)
            return
        if self._acting_faults_gone(job, incident):
            if grace_job:  # no restart comes: the processes must not be told to exit
                await self.reset_config.write(job, incident.id, CHANGE_GRACE_EXIT_OFF)
            now = ctx.clock.now()
            closed = ctx.store.recovered_unrestarted(
                job.uid, now, "faults cleared and the job healthy before the restart was sent; not restarted"
            )
            log.info(
                "incident left acting by the previous leader: its faults cleared and the job is healthy; closed "
                "as recovered without restarting",
                incident=incident.id,
                job=f"{job.namespace}/{job.name}",
            )
            await self._publish_closed(closed, job, now)  # durable before the record says it ended (see tick)
            await self.claiming.persist(job, closed.id)
            self.closing.finished(closed, job)
            await self._redecide_joined(job, now)
            return
        if self._acting_too_long(incident, now):
            await self._fail_unsent(job, incident, now, grace_job=grace_job)
            return
        decision = Decision(
            Action(incident.action) if incident.action else Action.RESTART_JOB,
            incident.reason,
            mode=job.fault_scheduling if not incident.mode else type(job.fault_scheduling)(incident.mode),
            pods=incident.pods if pod_level or incident.action == Action.MARK_PODS.value else (),
            pod_status=incident.pod_status,
        )
        log.info("resuming an incident left acting by the previous leader", incident=incident.id)
        if not await self.claiming.claim(job, incident.id):
            return
        self.inflight.plan_bookkeeping(
            incident.id, self.bookkeeper.resumed(job, incident)
        )  # written once the restart is sent, as for any restart
        faults = self._incident_faults(job, incident)
        wait = (
            grace_job and decision.restarts and bool(faults) and all(f.level is FaultLevel.SUB_HEALTH for f in faults)
        )
        await self.sending.execute(job, incident, decision, grace_exit=wait)  # with the wait, it sets 0 after
        if grace_job and not wait:
            await self.reset_config.write(job, incident.id, CHANGE_GRACE_EXIT_OFF)
