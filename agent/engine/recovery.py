"""The recovery engine: the parts of agent.engine put together behind the three calls the agent makes.

:meth:`RecoveryEngine.handle_fault` (detect → decide → act), :meth:`RecoveryEngine.handle_cleared` and
:meth:`RecoveryEngine.tick`. Each part has one job: :class:`~agent.engine.term.LeadershipTerm` (who leads),
:class:`~agent.engine.deciding.Deciding` (a fault in, plans out), :class:`~agent.engine.acting.Acting` (plans and
restarts carried out through the writer port), :class:`~agent.engine.quarantining.Quarantining` (node taints and
holds), :class:`~agent.engine.breaker.BreakerKeeper` (the circuit breaker and its ConfigMap),
:class:`~agent.engine.ticking.Ticking` (incidents over time), :class:`~agent.engine.fault_jobs.FaultJobs` (which
jobs a fault hit), :class:`~agent.engine.observing.Observing` (observe mode: restarts someone else makes).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import structlog

from agent.actions import Outcome
from agent.core.clock import Clock, ThreadUsage
from agent.core.cluster import FaultScheduling, JobKind, JobRecord, JobRef
from agent.core.correlate import correlate
from agent.core.faults import Fault, FaultCleared, fault_identity
from agent.core.fence import NotLeader
from agent.core.guards import CircuitBreaker
from agent.core.incidents import IncidentStore
from agent.core.policy import Action, Decision
from agent.core.progress import Resumed, is_hang
from agent.core.records import JobStateRecord, record_data
from agent.engine.acting import Acting
from agent.engine.bookkeeping import Bookkeeper
from agent.engine.breaker import BreakerKeeper
from agent.engine.checkpoints import CheckpointWaits
from agent.engine.claiming import Claiming
from agent.engine.closing import Closing
from agent.engine.context import EngineContext, durable
from agent.engine.deciding import Deciding
from agent.engine.fault_jobs import FaultJobs
from agent.engine.follow_ups import FollowUps
from agent.engine.inflight import RestartsInFlight
from agent.engine.job_checks import JobChecks
from agent.engine.observing import Observing
from agent.engine.plan import Defer
from agent.engine.ports import ClusterWriterPort, EventSink, Metrics, NoMetrics
from agent.engine.quarantining import Quarantining
from agent.engine.readonly import ReadOnlyWriter
from agent.engine.reset_config import ResetConfigWriting
from agent.engine.resubmitting import Resubmitting
from agent.engine.sending import Sending
from agent.engine.stages import DECISION_PATH, DecisionPath
from agent.engine.stragglers import Stragglers
from agent.engine.tasks import Tasks
from agent.engine.term import LeadershipTerm
from agent.engine.ticking import Ticking
from agent.engine.unsent import UnsentIncidents
from agent.engine.views import StateJobs, job_object, job_ref, pods_for, stored_record
from agent.kube.errors import KubeError
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sources.state import ClusterState

log = structlog.get_logger(__name__)


class RecoveryEngine:
    """Decides and acts on faults; owns incidents, the restart rate limit and the circuit breaker.

    Args:
        settings: all settings (policy, cluster name, leader namespace for the breaker ConfigMap).
        state: the cluster state the watchers keep.
        writer: the cluster writer port (its dry_run follows ``policy.dry_run``); wrapped in
            :class:`~agent.engine.readonly.ReadOnlyWriter` when ``policy.mode`` is ``observe``.
        events: where events are published (only while leading).
        is_leader: whether this replica may act and publish now.
        tasks: where background steps run (the root TaskGroup's in the running agent; tasks of their own by
            default: :meth:`idle` waits for them).
        metrics: metrics to report to.
        active_faults: the faults the detectors report now and have not cleared (DetectPipeline.active_faults);
            a replica that becomes leader re-evaluates them once its caches are synced (see :meth:`tick`).
        actor: this replica's ``<identity>#<term>`` (LeaderElector.actor): written on a job when claiming it
            before a restart (agent.core.fence); a changed value is a new leadership term.
        clock: the one clock the engine reads (agent.core.clock.Clock; the running agent passes
            agent.runtime.clock.SystemClock). Required: nothing in the engine picks a clock itself.
        on_decision: told of every decision the policy makes, ``(fault, job, decision)``, as it is made (the
            replay prints them, agent.replay).
        plugin_active: whether MindCluster's Volcano plugin evidently runs beside the agent
            (agent.sources.plugin_check); while it does the agent keeps no ``remain-retry-times`` entries of its own
            (agent.engine.bookkeeping). None: it never does.
        admission_refusal: why the agent must not act now (its admission policy not in force for its identity,
            agent.sources.admission_check), else None; asked before each restart, deletion or resubmission
            (agent.engine.deciding). None: never refused.
    """

    def __init__(
        self,
        settings: Settings,
        state: ClusterState,
        writer: ClusterWriterPort,
        *,
        events: EventSink | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        tasks: Tasks | None = None,
        metrics: Metrics | None = None,
        active_faults: Callable[[], list[Fault]] | None = None,
        actor: Callable[[], str] = lambda: "agent",
        clock: Clock,
        on_decision: Callable[[Fault, JobRecord, Decision], None] | None = None,
        plugin_active: Callable[[], bool] | None = None,
        admission_refusal: Callable[[], str | None] | None = None,
        thread_usage: Callable[[], ThreadUsage] | None = None,
    ) -> None:
        self.term = LeadershipTerm(is_leader, actor)
        self.thread_usage = thread_usage  # the event loop thread's CPU and preemptions (agent.engine.stages)
        self.tasks = tasks or Tasks()
        if settings.policy.mode == "observe":
            writer = ReadOnlyWriter(writer)  # observe mode: no path of the engine can write (agent.engine.readonly)
        self.ctx = EngineContext(
            settings, state, writer, events, metrics or NoMetrics(), clock, self.term, self.tasks,
            active_faults, on_decision, admission_refusal,
        )  # fmt: skip
        self.breakers = BreakerKeeper(self.ctx)
        self.quarantining = Quarantining(self.ctx)
        self.deciding = Deciding(self.ctx, self.breakers.breaker)
        self.deferred: list[Defer] = []  # restarts the rate limit held back, decided again at the next tick
        self.observing = Observing(self.ctx)
        self.job_touches = state.follow_jobs()  # the jobs restore_all looks at (beyond a new term's every job)
        self.goodput_touches = state.follow_jobs()  # jobs added or deleted: the effective-training totals' `exists`
        # a restart in flight: its one owner, and the rooms that act on it (each passed what it uses)
        self.inflight = RestartsInFlight()
        # incidents announced and never sent (the lease lost first): ended on the ticks, kept across terms
        self.unsent = UnsentIncidents(self.ctx)
        self.claiming = Claiming(self.ctx, self.inflight, self.unsent)  # the job's record: the claim, its writes
        self.closing = Closing(self.ctx, self.inflight, self.claiming)  # an incident's end counted
        self.reset_config = ResetConfigWriting(self.ctx)  # reset-config-<job>: the pod-level update, graceExit
        self.checkpoints = CheckpointWaits(self.ctx)  # checkpoint-aware graceful waits and how each ended
        self.bookkeeper = Bookkeeper(self.ctx, plugin_active)  # MindCluster's bookkeeping after restarts, coalesced
        self.follow_ups = FollowUps(self.ctx, self.checkpoints)  # force or grace deletion after a restart
        self.resubmitting = Resubmitting(self.ctx, self.inflight, self.claiming, self.closing)
        self.sending = Sending(
            self.ctx, self.inflight, self.claiming, self.follow_ups, self.closing, self.reset_config,
            self.checkpoints, self.bookkeeper, self.resubmitting.resubmit,
        )  # fmt: skip
        self.acting = Acting(
            self.ctx, self.inflight, self.claiming, self.sending, self.closing, self.bookkeeper, self.unsent,
            defer=self._defer, opened=self._opened, observe=self.observing.take,
        )  # fmt: skip
        self.restarts_quiet = self.acting.sending_now.quiet  # agent.sinks.kube_events KubeEventRecorder.hold
        self.fault_jobs = FaultJobs(self.ctx)
        self.ticking = Ticking(
            self.ctx, self.deciding, self.fault_jobs, self.acting.carry_out, inflight=self.inflight,
            claiming=self.claiming, sending=self.sending, follow_ups=self.follow_ups, closing=self.closing,
            reset_config=self.reset_config, checkpoints=self.checkpoints, bookkeeper=self.bookkeeper,
        )  # fmt: skip
        self.job_checks = JobChecks(self.ctx, self.deciding)  # unusable job labels, hot-switch waits
        self.stragglers = Stragglers(self.ctx, self.quarantining)  # its feed and metrics are set by the agent
        self.reevaluate_pending = False
        self.resumed_incidents: dict[str, None] = {}  # incidents whose recovery.resumed was published (bounded)
        self.counted_before_reset: set[tuple[object, ...]] = set()  # held back by the open breaker, counted by it
        # jobs adopted this term from an earlier version's annotations (no record yet): their record is written once
        self.migrating: dict[str, JobStateRecord] = {}
        self.sweep_pending = True  # the records of jobs gone while no replica led: looked at once per term
        self.refusing = False  # the last tick found the agent refusing to act (admission policy not in force)

    # what the agent's status, the benchmarks and the tests read
    @property
    def state(self) -> ClusterState:
        return self.ctx.state

    @property
    def store(self) -> IncidentStore:
        return self.ctx.store

    @property
    def breaker(self) -> CircuitBreaker:
        return self.breakers.breaker

    @property
    def decisions(self) -> list[tuple[Fault, JobRecord, Decision]]:
        return self.deciding.decisions

    def is_leader(self) -> bool:
        """Whether this replica leads now (and so may act and publish)."""
        return self.term.is_leader()

    def _job_exists(self, namespace: str, name: str) -> bool:
        """A Volcano Job, AscendJob or JobSet `namespace/name` is in the watch cache (the effective-training
        totals)."""
        state = self.ctx.state
        return any(state.job(kind, namespace, name) is not None for kind in JobKind)

    def _defer(self, step: Defer) -> None:
        self.deferred.append(step)

    def _opened(self, incident_id: str) -> None:
        self.ticking.republished.add(incident_id)

    async def idle(self) -> None:
        """Wait until no background step (action, follow-up, taint sync) runs."""
        await self.tasks.idle()

    # ------------------------------------------------------------------ leadership

    def check_term(self) -> bool:
        """Note leadership changes; on becoming leader start from what the jobs' records say (a standby's
        memory is not trusted). Returns whether this replica leads now."""
        leading, new_term = self.term.check()  # the term forgets its adopted jobs' actor baselines itself
        if new_term:
            # each part forgets what it must; none reaches into another's fields
            self.ctx.new_term()  # a fresh incident store, no job restored yet: the jobs' records are read again
            self.deciding.new_term()  # every active fault decided again
            self.inflight.new_term()  # the restarts in flight: kept resubmissions are found from their records
            self.resubmitting.new_term()  # a previous leader's half-done resubmissions are finished
            self.ticking.new_term()  # adopted incidents' first events published again
            self.job_checks.new_term()  # and the label problems
            self.observing.new_term()  # observations are not persisted
            self.bookkeeper.new_term()  # an earlier term's queued bookkeeping is not written in this one
            self.quarantining.new_term()  # quarantines a previous leader (or this replica before a restart) kept
            # the engine's own
            self.deferred.clear()
            self.migrating.clear()
            self.counted_before_reset.clear()
            self.sweep_pending = True
            self.reevaluate_pending = True  # faults seen while standing by (or lost by a crashed leader)
        return leading

    def restore_all(self, now: datetime | None = None) -> None:
        """Adopt incidents and ledgers persisted for every known job (a new leader resuming): the job's record
        (agent.core.records, from the watch of the agent's own ConfigMaps), else, for a job an earlier version
        wrote its state on, the job's annotations (read only; its record is written once at the next tick:
        :meth:`migrate_records`). A record that cannot be read or trusted at `now`
        (agent.core.incidents.check_incident) is logged once per term, counted as
        ``fault_agent_input_rejected_total{reason="bad-annotation"}`` and not adopted.

        Bounded by what changed: every job once per term, then only the jobs touched since the last call (a new job,
        a job created again under a new UID) and those whose state is to be adopted again
        (EngineContext.unrestore), in the order a scan of every job would take them."""
        ctx = self.ctx
        state = ctx.state
        touched = self.job_touches.take()
        if ctx.restore_every_job:
            ctx.restore_every_job = False
            ctx.restore_again.clear()
            jobs: list[JobRecord] = [job for store in state.job_stores() for job in store.values()]
        else:
            if ctx.restore_again:
                touched |= ctx.restore_again
                ctx.restore_again = set()
            found = (state.job(kind, ns, name) for ns, name in touched for kind in JobKind)
            position = state.job_position
            jobs = sorted((j for j in found if j is not None), key=lambda j: position(j.kind, j.namespace, j.name))
        for job in jobs:
            if job.uid in ctx.restored:
                continue
            ctx.restored.add(job.uid)
            stored = stored_record(state, job)
            self.term.actor_baseline[job.uid] = (stored.actor or None) if stored is not None else None
            if stored is not None and stored.legacy:
                self.migrating[job.uid] = stored
            for err in ctx.restore(job, now):
                log.warning("job record unreadable; ignored", job=f"{job.namespace}/{job.name}", error=str(err))
                ctx.metrics.input_rejected(job.kind.api_kind, "bad-annotation")

    async def migrate_records(self) -> None:
        """Write the record of each job adopted this term from an earlier version's annotations on the job
        (:meth:`restore_all`): exactly what the annotations held, incident, ledger and actor, as an atomic create
        (one there already wins: 409 is left alone). The job's annotations are neither written nor removed: that
        would be a write on the job. From then on the record wins (agent.engine.views.stored_record)."""
        todo, self.migrating = self.migrating, {}
        ctx = self.ctx
        for uid, stored in todo.items():
            if ctx.state.job_record(uid) is not None:
                continue
            ref = JobRef(JobKind.from_api_kind(stored.kind), stored.namespace, stored.name, uid)
            data = record_data(stored.incident, stored.ledger, stored.actor)
            result = await ctx.writer.claim_record(ref, data, resource_version="", incident="migrate")
            if result.outcome is Outcome.FAILED and result.status != 409:
                log.warning("job record not written from the job's annotations", job=f"{ref.namespace}/{ref.name}",
                            detail=result.detail)  # fmt: skip
            elif result.outcome is Outcome.DONE:
                log.info("job record written from an earlier version's annotations on the job",
                         job=f"{ref.namespace}/{ref.name}")  # fmt: skip

    async def collect_records(self) -> int:
        """Delete the records of jobs gone for good (agent.core.records): those whose deletion a watch reported
        since the last call (:attr:`~agent.sources.state.ClusterState.gone_jobs`), and once per term (the sweep) the
        records of jobs not in the watch cache. Bounded: only such jobs are looked at, never every record on a
        timer. A job is gone for good when a GET no longer finds it with that UID (a job that only lost the
        opt-in label is still there) and no resubmission of it is in flight in this term (its act task, or one
        cut short after its delete: the resubmission's own record then holds the incident, and the new job gets a
        record of its own). Returns the records deleted."""
        ctx = self.ctx
        state = ctx.state
        gone, state.gone_jobs = state.gone_jobs, {}
        todo: dict[str, JobRef] = {}
        for uid, job in gone.items():
            if self.inflight.acting_on(uid) or self.inflight.is_kept(uid):
                state.gone_jobs[uid] = job  # looked at again once its resubmission is done
                continue
            todo[uid] = job_ref(job)
        if self.sweep_pending:
            self.sweep_pending = False
            cached = {j.uid for store in state.job_stores() for j in store.values()}
            for uid, record in list(state.records_by_uid.items()):
                if uid in cached or uid in todo or self.inflight.acting_on(uid) or self.inflight.is_kept(uid):
                    continue
                if not (record.namespace and record.name):
                    continue  # a name too long for a label: left (its job is looked up by its deletion instead)
                kind = JobKind.from_api_kind(record.kind)
                todo[uid] = JobRef(kind, record.namespace, record.name, uid)
        deleted = 0
        for uid, ref in todo.items():
            if state.job_record(uid) is None:
                continue
            try:
                if await ctx.writer.job_meta(ref) is not None:
                    continue  # still there with this UID (it left the watch by a label change)
            except NotLeader:
                raise
            except KubeError as e:  # a read: the next term's sweep looks again
                log.warning("job not read before deleting its record", job=f"{ref.namespace}/{ref.name}", error=str(e))
                continue
            result = await ctx.writer.delete_record(uid, incident="gone")
            if result.outcome in (Outcome.DONE, Outcome.ALREADY_DONE):
                deleted += 1
                log.info("record of a deleted job removed", job=f"{ref.namespace}/{ref.name}", uid=uid)
        return deleted

    # ------------------------------------------------------------------ faults

    async def handle_fault(
        self, fault: Fault, now: datetime, *, reevaluating: bool = False, again: bool = False
    ) -> list[Decision]:
        """Correlate `fault`, decide for each actionable job, and act when allowed (leader only: a standby only
        keeps its caches warm). Returns the decisions.

        `reevaluating`: the fault is an active one a new leader takes up again (:meth:`reevaluate`); a job whose
        last restart already covered it is left alone, so a takeover never restarts a job twice for one fault.
        `again`: a fault the rate limit deferred, decided again (its decision is not timed twice).

        A fault decided for the first time has its decision path timed (agent.engine.stages ``DECISION_PATH``) when
        the engine was given a ``thread_usage`` reader."""
        if reevaluating or again or self.thread_usage is None:
            return await self._handle_fault(fault, now, reevaluating=reevaluating, again=again)
        path = DECISION_PATH.set(DecisionPath(self.thread_usage(), self.thread_usage))
        try:
            return await self._handle_fault(fault, now, reevaluating=False, again=False)
        finally:
            DECISION_PATH.reset(path)

    async def _handle_fault(self, fault: Fault, now: datetime, *, reevaluating: bool, again: bool) -> list[Decision]:
        quarantines = self.quarantining.note(fault, active=True)
        state = self.ctx.state
        seen = state.applied
        correlation = correlate(fault, pods_for(state, fault), StateJobs(state), state.device_allocations)
        self.fault_jobs.remember(fault, correlation)
        if not self.check_term():
            return []
        self.restore_all(now)
        if quarantines:
            await self.quarantining.request_sync(fault.node)
        if fault_identity(fault) not in self.counted_before_reset:
            await self.breakers.feed(fault, now)  # a trip publishes (waits): the state may change meanwhile
        plans = self.deciding.plan_fault(
            fault, now, reevaluating=reevaluating, again=again,
            correlation=correlation if state.applied == seen else None,  # correlated once when nothing changed
        )  # fmt: skip
        for plan in plans:
            await self.acting.carry_out(plan)
        decisions = [p.decision for p in plans if p.decision is not None]
        if is_hang(fault) and not reevaluating and not again:
            await self._publish_hung(fault, decisions[0] if decisions else None, now)
        return decisions

    async def _publish_resumed(self, resumed: Resumed) -> None:
        """A job that reports its progress took its first step after a restart: when the restart was the agent's
        (the job's incident has a restart time before that step), ``recovery.resumed`` and one
        ``fault_agent_time_to_first_step_seconds`` sample; once per incident. Anyone else's restart is only logged."""
        ctx = self.ctx
        job = resumed.job
        incident = ctx.store.incident(job.uid)
        where = f"{job.namespace}/{job.name}"
        if incident is None or incident.restart_at is None or incident.restart_at > resumed.at:
            log.info("training resumed after a restart the agent did not make", job=where, step=resumed.step)
            return
        if incident.id in self.resumed_incidents:
            return
        self.resumed_incidents[incident.id] = None
        while len(self.resumed_incidents) > 10000:  # bounded: oldest first
            del self.resumed_incidents[next(iter(self.resumed_incidents))]
        figures = ctx.goodput.resumed(incident, resumed)
        seconds = figures.time_to_first_step_s
        log.info("training resumed: first step after the restart", job=where, incident=incident.id,
                 step=resumed.step, time_to_first_step_s=round(seconds, 3), work_lost_steps=figures.work.steps,
                 lost_s=round(figures.lost.total_s, 3), running_share=figures.training.running_share)  # fmt: skip
        ctx.metrics.time_to_first_step(job.kind.value, seconds)
        ctx.metrics.lost_training(figures.lost.by_cause(), figures.work.steps)
        training = {**figures.training.as_data(), "first_step_at": figures.training.first_step_at}
        build = functools.partial(
            ev.recovery_resumed, job_object(job), cluster=ctx.settings.cluster_name, incident_id=incident.id,
            restart_at=incident.restart_at, first_fault_at=incident.first_fault_at, first_step_at=resumed.at,
            step=resumed.step, checkpoint_step=resumed.checkpoint_step, stopped_at=figures.stopped_at,
            work_lost=figures.work.as_data(), lost_s=figures.lost.as_data(), training=training,
        )  # fmt: skip
        await ctx.publish(build)

    async def _publish_hung(self, fault: Fault, decision: Decision | None, now: datetime) -> None:
        """The ``job.hung`` event of a hang fault just decided (agent.core.progress): what the detector found, what
        the policy decided and the incident it opened or joined. Without a decision (the job did not opt in to
        fault scheduling, or the fault is stale) the action is ``none``; a hang the job's open incident absorbed (a
        hardware fault's restart already under way: one incident, not two) is ``joined``, naming that incident."""
        ctx = self.ctx
        hang = ctx.hang_of(fault) if ctx.hang_of is not None else None
        if hang is None or fault.pod is None:
            return
        job = hang.job
        incident = ctx.store.incident(job.uid)
        current = incident if incident is not None and incident.phase.open else None
        linked: str | None = None
        if decision is not None:
            action, reason = decision.action.value, decision.reason
            linked = current.id if current is not None and decision.action is not Action.NONE else None
        elif current is not None:  # joined the job's open incident (one fault, one restart), or held with it
            action, reason, linked = "joined", f"the job's open incident ({current.phase.value}) covers it", current.id
        elif job.fault_scheduling in (FaultScheduling.FORCE, FaultScheduling.GRACE):
            action, reason = Action.NONE.value, "older than the job's last incident"
        else:
            action, reason = Action.NONE.value, "the job has not opted in to fault scheduling (fault-scheduling label)"
        if linked is not None:  # its incident's training stopped at the last step, not at the hang's detection
            ctx.goodput.note_hang(job.uid, fault.signal_time - timedelta(seconds=hang.timeout_s))
        build = functools.partial(
            ev.job_hung, job_object(job), cluster=ctx.settings.cluster_name, at=now, pod=fault.pod, node=fault.node,
            lease=fault.source, step=hang.step, checkpoint_step=hang.checkpoint_step,
            last_step_at=fault.signal_time - timedelta(seconds=hang.timeout_s), timeout_s=hang.timeout_s,
            timeout_from=hang.timeout_from, action=action, reason=reason, incident_id=linked,
        )  # fmt: skip
        # handed to the sink, not waited for: no step of ours follows it, and the recovery loop takes the next fault
        # (a burst of hangs) without an fsync per event; the outbox keeps the events in call order
        await ctx.submit(build)

    async def reevaluate(self, now: datetime) -> int:
        """Leader only, once per term with synced caches and again after a person reset the breaker: take up the
        detectors' active faults that this term has not handled yet (seen while standing by, seen by a leader that
        crashed before opening an incident, or held back by the open breaker). Incidents open for a job absorb
        them; jobs already restarted for them are left alone. Returns the faults re-evaluated."""
        if not self.check_term() or not self.reevaluate_pending or self.ctx.active_faults is None:
            return 0
        self.reevaluate_pending = False
        todo = [f for f in self.ctx.active_faults() if fault_identity(f) not in self.deciding.handled]
        if todo:
            log.info("re-evaluating active faults not handled yet", faults=len(todo))
        for fault in todo:
            await self.handle_fault(fault, now, reevaluating=True)
        self.counted_before_reset.clear()
        return len(todo)

    async def handle_cleared(self, cleared: FaultCleared) -> None:
        """A fault went away: publish its ``fault.cleared`` (leader only, like ``fault.detected``: one per job the
        fault hit, keyed by the job's UID and naming its open incident, or one keyed by the node when it hit
        none), and lift its node's quarantine when it was the last reason (an isolated chip's once the detector
        released it)."""
        done: Awaitable[None] = durable()
        if self.check_term():
            self.restore_all(self.ctx.clock.now())  # a term may start with a clear: its jobs' incidents first
            done = await self.fault_jobs.publish_cleared(cleared)
        await self.quarantining.cleared(cleared, done)

    async def reconcile_taints(self) -> None:
        """Every node's quarantine taint against its active reasons (:meth:`Quarantining.reconcile`)."""
        await self.quarantining.reconcile()

    async def sync_breaker(self) -> None:
        """Follow the breaker ConfigMap: a person's reset closes our breaker (:meth:`BreakerKeeper.sync`)."""
        if await self.breakers.sync():
            # the faults the open breaker held back are decided again; the person who reset it knew of them, so
            # they do not count towards tripping it again
            self.reevaluate_pending = True
            self.counted_before_reset = set(self.deciding.held_back)
            self.deciding.held_back.clear()

    def _note_refusal(self) -> None:
        """Leader, once per tick: when the agent stops refusing to act (its admission policy in force again), the
        faults held back meanwhile are decided again, as after a breaker reset (not counted by the breaker twice)."""
        refusing = self.deciding.refusal() is not None
        if self.refusing and not refusing:
            log.info("admission policy in force again: deciding the held-back faults again",
                     faults=len(self.deciding.held_back))  # fmt: skip
            self.reevaluate_pending = True
            self.counted_before_reset |= self.deciding.held_back
            self.deciding.held_back.clear()
        self.refusing = refusing

    # ------------------------------------------------------------------ time

    async def tick(self, now: datetime, *, settled: bool = True, drained: bool = True) -> None:
        """Advance incidents (recovered / deadline), resume incidents a previous leader left ``acting``, retry
        deferred restarts, and, once per leadership term when the fault queue is `drained`, re-evaluate the
        active faults (:meth:`reevaluate`). `settled`: the first lists' faults are handled: reconcile taints, and
        from now on the breaker dates a fault no earlier than when it was read (:meth:`BreakerKeeper.settle`).
        Leader or standby, end the incidents this replica announced and never sent, unless a leader took them up
        (agent.engine.unsent; a leader once it re-evaluated the active faults)."""
        if settled:
            self.breakers.settle(now)
        leading = self.check_term()
        await self.job_checks.report_job_labels(now, leading)
        resumed = self.ctx.take_resumed() if self.ctx.take_resumed is not None else []
        if leading:
            for first in resumed:
                await self._publish_resumed(first)
        await self.stragglers.tick(now, leading)
        if leading:  # the effective-training totals, from what changed since the last tick
            training = self.ctx.goodput.totals_changed(now, self._job_exists, self.goodput_touches.take())
        else:
            self.goodput_touches.take()
            self.ctx.goodput.pause()
            training = (0.0, 0.0)
        self.ctx.metrics.training_time(*training)
        if not leading:
            self.ctx.state.gone_jobs.clear()  # a standby deletes nothing: the next term's sweep finds those records
            self.job_touches.take()  # nor adopts anything: a new term looks at every job
            await self.unsent.settle(now, leading=False)  # a standby publishes the ends of its own unsent incidents
            return
        self._note_refusal()
        self.restore_all(now)
        await self.migrate_records()
        if self.ctx.state.ready:  # every job listed: entries for jobs seen, dropped for jobs gone (before failures)
            self.bookkeeper.sync_jobs()
        if drained and self.reevaluate_pending:
            await self.reevaluate(now)
        await self.quarantining.take_releases()
        await self.quarantining.expire_flap_holds(now)
        if settled:
            await self.quarantining.reconcile()
        await self.resubmitting.recover(now)  # before advance: a job created here is not abandoned there
        await self.ticking.advance(now)
        await self.job_checks.check_hot_switch_waits(now)
        await self.collect_records()  # after advance: an incident of a deleted job is ended (and published) first
        await self.observing.advance(now)
        deferred, self.deferred = self.deferred, []
        for item in deferred:
            await self.handle_fault(item.fault, now, again=True)
        if not self.reevaluate_pending or self.ctx.active_faults is None:  # after this term took up the active
            await self.unsent.settle(now, leading=True)  # faults (none to take up: no view): it may hold an unsent id
