"""`fault-agent run`: the wiring. Sources → detect → correlate → policy → incidents/actions → events.

Tasks of the one root ``TaskGroup`` (each named and kept by reference):

- ``watch:<source>@<ns>`` — one per watched collection (agent.sources), feeding :class:`ClusterState` and the
  detectors synchronously (:class:`DetectPipeline`), which put faults on a queue;
- ``recovery`` — :class:`RecoveryEngine` takes faults off the queue once every source has listed, correlates,
  decides, and (leader only, breaker closed, rate limit allowing) acts; it is also the only place that opens,
  advances and persists incidents;
- ``tick`` — once a second: time-based detections (NotReady grace, stuck pods), incident recovery checks and
  deadlines, deferred restarts, the breaker ConfigMap a person may have reset;
- ``leader`` — the Lease campaign (agent.leader); ``server`` — /metrics, /healthz, /readyz;
- ``grace:<incident>`` — force deletions after grace-over-time, spawned on demand.

SIGTERM/SIGINT set the stop event; every task returns, the leader releases its Lease and Kafka is flushed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import structlog

from agent.actions import (
    ActionResult,
    ClusterWriter,
    JobRef,
    Outcome,
    PodRef,
    RestartPlan,
    finish_force,
    finish_grace,
    restart_job,
)
from agent.core.cluster import JobKind, JobRecord, NodeRecord
from agent.core.correlate import JobHit, JobKey, correlate
from agent.core.detect.chips import NodeChips
from agent.core.faults import Fault, FaultCleared, FaultKind, FaultLevel, ObjectRef
from agent.core.fence import ACTOR_ANNOTATION, NotLeader, may_claim
from agent.core.guards import CircuitBreaker, TokenBucket
from agent.core.incidents import Admission, Incident, IncidentStore, Phase, describe_fault, job_healthy
from agent.core.policy import Action, Decision, controller_ended_job, decide, is_flapping, quarantine_for
from agent.settings import Settings, load_settings
from agent.sinks import events as ev
from agent.sources.jobs import FAULT_SCHEDULING_LABEL, fault_scheduling_problem
from agent.sources.state import ClusterState
from agent.sources.watchers import build_watchers

log = structlog.get_logger(__name__)


class EventSink(Protocol):
    """Where events go (agent.sinks.kafka.KafkaPublisher, or a list in tests).

    ``submit(event)`` takes the event in call order (the order it is delivered in, per key) and returns an
    awaitable that is done once the event is durable (fsync'd to the outbox): the engine awaits it before the
    step the event describes, never merely to go on to the next fault, so the events of faults queued together
    share one write + fsync (group commit) instead of one each.
    """

    async def submit(self, event: Any) -> Awaitable[None]: ...


class Metrics(Protocol):
    """The subset of agent.sinks.metrics.AgentMetrics the engine reports to."""

    def decision(self, seconds: float) -> None: ...
    def action(self, action: str, result: str) -> None: ...
    def incidents_open(self, n: int) -> None: ...
    def budget_exhausted(self, job_kind: str) -> None: ...
    def recovery_failed(self, job_kind: str, reason: str) -> None: ...
    def breaker_open(self, is_open: bool) -> None: ...
    def recovery(self, job_kind: str, fault_kind: str, action: str, outcome: str, seconds: float) -> None: ...
    def input_rejected(self, source: str, reason: str) -> None: ...


class DetectMetrics(Protocol):
    """The subset of agent.sinks.metrics.AgentMetrics the detect pipeline reports to."""

    def fault(self, kind: str | FaultKind, level: str | FaultLevel, source: str) -> None: ...
    def fault_cleared(self, kind: str | FaultKind) -> None: ...
    def input_rejected(self, source: str, reason: str) -> None: ...
    def queue_depth(self, queue: str, n: int) -> None: ...


FAULT_QUEUE = "faults"
"""The ``queue`` label of fault_agent_queue_depth for the detect pipeline's fault queue."""

_SIGNAL_SOURCES = {
    "deviceinfo": "device-plugin",
    "nodeinfo": "noded",
    "clusterinfo": "clusterd",
    "publicfault": "publicfault",
    "nodes": "node",
    "pods": "pod",
}
"""Watcher source -> the ``source`` label of fault_agent_faults_total."""


class _NoMetrics:
    def decision(self, seconds: float) -> None: ...
    def action(self, action: str, result: str) -> None: ...
    def incidents_open(self, n: int) -> None: ...
    def budget_exhausted(self, job_kind: str) -> None: ...
    def recovery_failed(self, job_kind: str, reason: str) -> None: ...
    def breaker_open(self, is_open: bool) -> None: ...
    def recovery(self, job_kind: str, fault_kind: str, action: str, outcome: str, seconds: float) -> None: ...
    def input_rejected(self, source: str, reason: str) -> None: ...


class _StateJobs(Mapping[JobKey, JobRecord]):
    """The state's two job stores seen as the correlate module's job index."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state

    def __getitem__(self, key: JobKey) -> JobRecord:
        job = self._state.job(*key)
        if job is None:
            raise KeyError(key)
        return job

    def __iter__(self) -> Iterator[JobKey]:
        for store in (self._state.vcjobs, self._state.acjobs):
            for job in store.values():
                yield (job.kind, job.namespace, job.name)

    def __len__(self) -> int:
        return len(self._state.vcjobs) + len(self._state.acjobs)


_FAULT_JOBS_KEPT = 10000
"""Faults whose jobs the engine remembers for their fault.cleared (a fault that never clears is forgotten last)."""


def _fault_identity(fault: Fault) -> tuple[Any, ...]:
    """The same fault reported again (a relist, a re-evaluation) has the same identity."""
    return (fault.key, fault.pod, fault.level, fault.signal_time)


def _fault_place(described: str) -> str:
    """An incident's fault text (:func:`agent.core.incidents.describe_fault`, ``kind:level@node[chips]… codes``)
    without its level: the same chip or node still faulty at another level (a flap escalation the new leader's
    detectors have not made) is still the same fault."""
    head, at, rest = described.partition("@")
    return f"{head.partition(':')[0]}{at}{rest}"


QUARANTINE_HOLD = ("quarantine-hold",)
"""The quarantine reason (and flap hold) key of a hold read back from a node's annotation."""
ISOLATED_CHIPS = ("isolated-chips",)
"""Quarantine reason of a node with detect.isolated_chips_taint isolated (flapping) chips."""


def encode_quarantine_hold(level: FaultLevel, until: datetime) -> str:
    """The node annotation value of a quarantine hold: ``{"level":"SeparateNPU","until":"<ISO 8601, UTC>"}``."""
    return json.dumps({"level": level.wire_name, "until": until.astimezone(UTC).isoformat()}, sort_keys=True)


def parse_quarantine_hold(text: str) -> tuple[FaultLevel, datetime]:
    """Read :func:`encode_quarantine_hold`'s JSON: (level, until).

    Raises:
        ValueError: not JSON, not an object, an unknown level, or an until without a time zone; says which.
    """
    try:
        doc = json.loads(text)
    except ValueError:
        raise ValueError(f"not JSON: {text[:60]!r}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("level"), str) or not isinstance(doc.get("until"), str):
        raise ValueError(f'expected {{"level": <level>, "until": <ISO 8601 time>}}, got {text[:60]!r}')
    level = FaultLevel.parse(doc["level"])
    until = datetime.fromisoformat(doc["until"])
    if until.tzinfo is None:
        raise ValueError(f"until has no time zone: {doc['until']!r}")
    return level, until


def _durable() -> asyncio.Future[None]:
    """An already-done durability future: for events not handed to a sink (none configured, not built)."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    return done


def _job_ref(job: JobRecord) -> JobRef:
    return JobRef(job.kind, job.namespace, job.name, job.uid)


def _job_object(job: JobRecord) -> ObjectRef:
    return ObjectRef(job.kind.value, job.namespace, job.name, job.uid)


@dataclass(slots=True)
class _Deferred:
    fault: Fault
    job_uid: str


class RecoveryEngine:
    """Decides and acts on faults; owns incidents, the restart rate limit and the circuit breaker.

    Args:
        settings: all settings (policy, cluster name, leader namespace for the breaker ConfigMap).
        state: the cluster state the watchers keep.
        writer: the cluster writer (its dry_run follows ``policy.dry_run``).
        events: where events are published (only while leading).
        is_leader: whether this replica may act and publish now.
        spawn: starts a named background task in the root TaskGroup (grace follow-ups).
        metrics: metrics to report to.
        active_faults: the faults the detectors report now and have not cleared (DetectPipeline.active_faults);
            a replica that becomes leader re-evaluates them once its caches are synced (see :meth:`tick`).
        actor: this replica's ``<identity>#<term>`` (LeaderElector.actor): written on a job when claiming it
            before a restart (agent.core.fence); a changed value is a new leadership term.
    """

    def __init__(
        self,
        settings: Settings,
        state: ClusterState,
        writer: ClusterWriter,
        *,
        events: EventSink | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        spawn: Callable[[Coroutine[Any, Any, Any], str], Any] | None = None,
        metrics: Metrics | None = None,
        active_faults: Callable[[], list[Fault]] | None = None,
        actor: Callable[[], str] = lambda: "agent",
    ) -> None:
        p = settings.policy
        self.settings = settings
        self.state = state
        self.writer = writer
        self.events = events
        self.is_leader = is_leader
        self.spawn = spawn
        self.metrics: Metrics = metrics or _NoMetrics()
        self.store = IncidentStore()
        self.bucket = TokenBucket(p.restart_rate_per_min / 60.0, p.restart_burst, now_s=time.time())
        self.breaker = CircuitBreaker(p.breaker_node_share, p.breaker_window_s, p.breaker_min_faulty_nodes)
        self.deferred: list[_Deferred] = []
        self.restored: set[str] = set()
        self.tainted: dict[str, FaultLevel] = {}  # node -> level of the quarantine taint we set
        self.quarantine_reasons: dict[str, dict[Any, FaultLevel]] = {}  # node -> active fault key -> level
        # (node, hold key) -> until when a quarantine hold persisted on the node (by an earlier version, for a
        # flapping chip) keeps the node quarantined
        self.flap_holds: dict[tuple[str, Any], datetime] = {}
        # node -> fault key -> the chips of an active fault of an isolated (flapping) chip: the node is quarantined
        # only when detect.isolated_chips_taint of its chips are isolated
        self.isolated_chips: dict[str, dict[Any, tuple[str, ...]]] = {}
        # (node, fault key) -> signal time + detect.isolation_release_s of an isolated chip's active fault: the
        # least time a node quarantined for its isolated chips stays so (persisted as its hold, see _sync_hold)
        self.flap_active: dict[tuple[str, Any], datetime] = {}
        # the quarantine holds persisted on the nodes (annotation with the taint's key): read once per term, and
        # the value this replica last wrote per node
        self.holds_loaded = False
        self.hold_written: dict[str, str | None] = {}
        self.fault_kind: dict[str, FaultKind] = {}  # incident id -> first fault's kind (metrics label)
        self.decisions: list[tuple[Fault, JobRecord, Decision]] = []  # last decisions, for tests and status
        self.was_leader = False
        # job UIDs whose incident this replica is acting on right now (between opening it and the restart being
        # sent): the tick must not mistake such an ``acting`` incident for one a previous leader left behind
        self.executing: set[str] = set()
        # nodes whose quarantine taint a task is syncing now / must sync again when it is done
        self.taint_syncing: set[str] = set()
        self.taint_dirty: set[str] = set()
        self.active_faults = active_faults
        # faults handled while leading in this term (their identity): a new term re-evaluates the others
        self.handled: set[tuple[Any, ...]] = set()
        self.reevaluate_pending = False
        # the breaker ConfigMap's data as this replica last read or wrote it (None: no ConfigMap); a reset is a
        # change of it to closed, never a closed state read before (dry-run never writes the ConfigMap)
        self.breaker_seen: dict[str, str] | None = None
        self.breaker_synced = False
        # dry-run: the quarantine taints nodes would carry had the skipped writes been made (None: removed)
        self.dry_taints: dict[str, str | None] = {}
        # (job UID, label, value) of unusable job labels: logged and counted once, published once per term
        self.labels_reported: set[tuple[str, str, str]] = set()
        self.labels_published: set[tuple[str, str, str]] = set()
        # fault identity -> the jobs it hit when detected (uid -> job), on every replica: its fault.cleared goes to
        # each of them even after their pods left the node (bounded: the oldest entries go first)
        self.fault_jobs: dict[tuple[Any, ...], dict[str, ObjectRef]] = {}
        # (fault id, event subject) -> the incident the last fault.detected published for them named (None: none),
        # for the data.detected_id of their fault.cleared (the link is part of that id; bounded like fault_jobs)
        self.detected_links: dict[tuple[str, str], str | None] = {}
        # incidents whose first events this term published (opened here) or published again (adopted)
        self.republished: set[str] = set()
        self.actor = actor
        self.term_actor: str | None = None  # the actor of the term _check_term last saw
        # job UID -> its actor annotation when this term adopted the job (agent.core.fence.may_claim)
        self.actor_baseline: dict[str, str | None] = {}

    # ------------------------------------------------------------------ events

    async def _submit(self, build: Callable[[], Any]) -> Awaitable[None]:
        """Hand the event `build` makes to the sink, in call order, and return what is done once it is durable
        (:class:`EventSink`). The caller awaits that before the step the event describes (acting on a fault,
        lifting a quarantine): an event is on disk before the agent acts on it, while the recovery loop goes on
        to the next fault without an fsync of its own per event.

        Only paths a leader entered reach here (:meth:`handle_fault`, :meth:`handle_cleared` and :meth:`tick`
        check the term first), so leadership is not checked again: a replica stopping in the middle of a step
        (its leader flag drops before its Lease is released) has already written that step's incident state on
        the job, and a successor reading it would not report the step, so its event must still go out (a
        duplicate carries the same deterministic id)."""
        if self.events is None:
            return _durable()
        try:
            event = build()
        except ValueError as e:  # EventBuildError: a bug in our arguments, never worth crashing for
            log.error("event not built", error=str(e))
            return _durable()
        if event.get_type() == ev.FAULT_DETECTED:
            data = event.get_data()
            self.detected_links[(data["fault_id"], event.get_subject())] = data["incident_id"]
            while len(self.detected_links) > _FAULT_JOBS_KEPT:
                del self.detected_links[next(iter(self.detected_links))]
        return await self.events.submit(event)

    async def _publish(self, build: Callable[[], Any]) -> None:
        """:meth:`_submit` the event and wait until it is durable (for an event whose step follows at once)."""
        await (await self._submit(build))

    # ------------------------------------------------------------------ leadership

    def _check_term(self) -> bool:
        """Note leadership changes; on becoming leader start from what the jobs' annotations say (a standby's
        memory is not trusted). Returns whether this replica leads now."""
        leader = self.is_leader()
        actor = self.actor() if leader else self.term_actor
        if leader and (not self.was_leader or actor != self.term_actor):
            self.term_actor = actor
            self.actor_baseline.clear()
            self.restored.clear()
            self.store = IncidentStore()
            self.deferred.clear()
            self.handled.clear()
            self.labels_published.clear()
            self.republished.clear()
            self.reevaluate_pending = True  # faults seen while standing by (or lost by a crashed leader)
            self.holds_loaded = False
            self._load_holds()  # quarantines a previous leader (or this replica before a restart) persisted
        self.was_leader = leader
        return leader

    def _restore_all(self, now: datetime | None = None) -> None:
        """Adopt incidents and ledgers persisted on every known job (a new leader resuming). An annotation that
        cannot be read or trusted at `now` (agent.core.incidents.check_incident) is logged once per term, counted as
        ``fault_agent_input_rejected_total{reason="bad-annotation"}`` and not adopted."""
        for store in (self.state.vcjobs, self.state.acjobs):
            for job in store.values():
                if job.uid in self.restored:
                    continue
                self.restored.add(job.uid)
                self.actor_baseline[job.uid] = job.annotation(ACTOR_ANNOTATION)
                for err in self.store.restore(job, now):
                    log.warning("job annotation unreadable; ignored", job=f"{job.namespace}/{job.name}", error=str(err))
                    self.metrics.input_rejected("Job" if job.kind is JobKind.VOLCANO else "AscendJob", "bad-annotation")

    # ------------------------------------------------------------------ faults

    async def handle_fault(self, fault: Fault, now: datetime, *, reevaluating: bool = False) -> list[Decision]:
        """Correlate `fault`, decide for each actionable job, and act when allowed (leader only: a standby only
        keeps its caches warm). Returns the decisions.

        `reevaluating`: the fault is an active one a new leader takes up again (:meth:`reevaluate`); a job whose
        last restart already covered it (an incident acting or restarted after the fault's own time, in any
        generation) is left alone, so a takeover never restarts a job twice for one fault."""
        quarantines = self._note_quarantine(fault, active=True)
        self._remember_jobs(fault)
        if not self._check_term():
            return []
        self.handled.add(_fault_identity(fault))
        self._restore_all(now)
        if quarantines:
            await self._request_taint_sync(fault.node)
        await self._feed_breaker(fault, now)
        cluster = self.settings.cluster_name
        pods = self.state.pods_on_node(fault.node) if fault.node else self._pods_of(fault)
        correlation = correlate(fault, pods, _StateJobs(self.state))
        if not correlation.hits:
            await self._submit(lambda: ev.fault_detected(fault, cluster=cluster))  # nothing acts on it
        out: list[Decision] = []
        for hit in correlation.hits:
            if reevaluating and hit.actionable and self.store.covers(hit.job, fault):
                # an open incident absorbs it: remembered, so it is decided again if still active when that closes
                self.store.note_joined(hit.job, fault)
                log.info("active fault already handled for this job", job=f"{hit.job.namespace}/{hit.job.name}")
                continue
            decision = await self._handle_hit(fault, hit, now)
            if decision is not None:
                out.append(decision)
        return out

    async def reevaluate(self, now: datetime) -> int:
        """Leader only, once per term with synced caches: take up the detectors' active faults that this term
        has not handled yet (seen while standing by, or seen by a leader that crashed before opening an
        incident). Incidents open for a job absorb them; jobs already restarted for them are left alone.
        Returns the faults re-evaluated."""
        if not self._check_term() or not self.reevaluate_pending or self.active_faults is None:
            return 0
        self.reevaluate_pending = False
        todo = [f for f in self.active_faults() if _fault_identity(f) not in self.handled]
        if todo:
            log.info("re-evaluating active faults after taking the lead", faults=len(todo))
        for fault in todo:
            await self.handle_fault(fault, now, reevaluating=True)
        return len(todo)

    def _pods_of(self, fault: Fault) -> list[Any]:
        if fault.pod is None:
            return []
        pod = self.state.pods.get(f"{fault.pod.namespace}/{fault.pod.name}")
        return [] if pod is None else [pod]

    async def _handle_hit(
        self, fault: Fault, hit: JobHit, now: datetime, *, redeciding: bool = False
    ) -> Decision | None:
        job = hit.job
        cluster = self.settings.cluster_name
        if not hit.actionable:
            problem = fault_scheduling_problem(job.label(FAULT_SCHEDULING_LABEL))
            if problem is not None:  # a person meant to opt in: say why the job is not rescheduled
                log.warning("fault on a job whose opt-in label is unreadable; not rescheduled",
                            job=f"{job.namespace}/{job.name}", problem=problem)  # fmt: skip
            await self._submit(lambda: ev.fault_detected(fault, cluster=cluster, job=_job_object(job)))
            return None
        started = time.perf_counter()
        admission = self.store.admit(job, fault)
        if admission is Admission.JOINED:
            current = self.store.incident(job.uid)
            incident_id = current.id if current else None
            log.info("fault joined the open incident", incident=incident_id, job=f"{job.namespace}/{job.name}")
            await self._submit(
                lambda: ev.fault_detected(fault, cluster=cluster, job=_job_object(job), incident_id=incident_id)
            )
            return None
        if admission is Admission.STALE and not redeciding:
            log.info("fault older than the job's last incident; ignored", job=f"{job.namespace}/{job.name}")
            return None
        decision = decide(fault, hit, self.store.ledger(job.uid).budgets(), self.settings.policy, now)
        self.metrics.decision(time.perf_counter() - started + max(0.0, (now - fault.observed_at).total_seconds()))
        self.decisions.append((fault, job, decision))
        del self.decisions[:-100]
        log.info("decision", job=f"{job.namespace}/{job.name}", action=decision.action.value, reason=decision.reason)
        # handed to the sink in order; durable before the step it leads to (awaited there), not before the next
        # fault is decided
        detected = functools.partial(ev.fault_detected, fault, cluster=cluster, job=_job_object(job))
        if decision.action is Action.NONE:
            await self._submit(detected)
            return decision
        if decision.action is Action.FORCE_DELETE_PODS:
            await self._publish(detected)
            await self._force_delete(fault, job)
            return decision
        if decision.action is not Action.ABORT and self.breaker.is_open:
            await self._submit(detected)
            log.warning("circuit breaker open: not acting", job=f"{job.namespace}/{job.name}", reason=decision.reason)
            self.metrics.action(decision.action.value, "breaker_open")
            return decision
        if decision.restarts and not self.bucket.try_take(time.time()):
            await self._submit(detected)
            log.warning("restart rate limit reached: deferred", job=f"{job.namespace}/{job.name}")
            self.metrics.action(decision.action.value, "throttled")
            self.deferred.append(_Deferred(fault, job.uid))
            return decision
        await self._act(fault, job, decision, now)
        return decision

    async def _act(self, fault: Fault, job: JobRecord, decision: Decision, now: datetime) -> None:
        """Open the job's incident (synchronously: a later fault of the job joins it) and carry out the decision
        once its fault.detected (naming the incident) is durable. With `spawn` (the running agent) the
        wait and the writes run in their own task, so the faults of other jobs queued behind this one are decided
        without waiting for this job's fsync or apiserver round trips; one job's incident is still acted on by
        one task at a time (its job UID stays in :attr:`executing` until the task ends)."""
        incident = self.store.open(job, fault, decision, now)
        self.republished.add(incident.id)
        self.executing.add(job.uid)
        # the fault's event names the incident it opened, as a successor's re-publication of it does (same id,
        # same event), and comes before anything else about the incident
        try:
            detected = await self._submit(
                lambda: ev.fault_detected(
                    fault, cluster=self.settings.cluster_name, job=_job_object(job), incident_id=incident.id
                )
            )
        except BaseException:
            self.executing.discard(job.uid)
            raise
        if self.spawn is None:
            try:
                await self._act_on(fault, job, decision, now, incident, detected)
            finally:
                self.executing.discard(job.uid)
            return
        self.spawn(self._act_in_task(fault, job, decision, now, incident, detected), f"act:{incident.id}")

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
            await self._act_on(fault, job, decision, now, incident, detected)
        except asyncio.CancelledError:
            raise
        except NotLeader as e:  # the lease ran out mid-step: the leader resumes what the job's annotation says
            log.warning("stopped acting: no longer the leader", incident=incident.id, detail=str(e))
        except Exception:  # one job's failure must not end the agent's task group
            log.exception("acting on an incident failed", incident=incident.id, job=f"{job.namespace}/{job.name}")
            self.metrics.action(decision.action.value, Outcome.FAILED.value)
        finally:
            self.executing.discard(job.uid)

    async def _act_on(
        self,
        fault: Fault,
        job: JobRecord,
        decision: Decision,
        now: datetime,
        incident: Incident,
        detected: Awaitable[None],
    ) -> None:
        cluster = self.settings.cluster_name
        self.fault_kind[incident.id] = fault.kind
        await detected  # the fault's fault.detected is on disk before the job is claimed
        if not await self._claim(job, incident.id):
            return  # not claimed: the tick resumes it, or another actor's incident on the job is adopted
        ref = _job_object(job)
        if decision.action is Action.ABORT:
            self.metrics.budget_exhausted(job.kind.value)
            self.metrics.recovery_failed(job.kind.value, ev.FailureReason.BUDGET_EXHAUSTED.value)
            await self._publish(
                lambda: ev.recovery_failed(
                    incident.id, ref, ev.FailureReason.BUDGET_EXHAUSTED, cluster=cluster, at=now,
                    action=decision.action.value, detail=decision.reason,
                )
            )  # fmt: skip
            self._finished(incident, job)
            return
        await self._publish(
            lambda: ev.recovery_started(
                incident.id,
                ref,
                decision.action.value,
                decision.reason,
                cluster=cluster,
                at=now,
                faults=[fault],
                dry_run=self.writer.dry_run,
                budget_left=decision.budget_left,
            )
        )
        await self._execute(job, incident, decision)

    async def _execute(self, job: JobRecord, incident: Incident, decision: Decision) -> None:
        """Carry out the restart of an ``acting`` incident and move it to ``restarting`` (or ``failed``)."""
        if decision.action is Action.RESUBMIT:
            await self._resubmit(job, incident)
            return
        plan: RestartPlan | None = None
        try:
            plan = await restart_job(
                self.writer,
                _job_ref(job),
                mode=decision.mode,
                incident=incident.id,
                reason=decision.reason,
                only_pods=decision.pods,
                volcano_restart=self.settings.policy.volcano_restart,
                known_pods=self._live_pods(job),
            )
        except NotLeader:
            raise
        except Exception as e:  # an ApiException listing pods: fail this incident, keep the agent running
            detail = f"restart failed: {e!r}"[:300]
            outcome = Outcome.FAILED
        else:
            detail, outcome = plan.result.detail, plan.result.outcome
        self.metrics.action(decision.action.value, outcome.value)
        now = datetime.now(UTC)
        if plan is None or outcome is Outcome.FAILED:
            await self._action_failed(job, now, decision.action.value, detail)
            return
        restarting = self.store.restarting(job.uid, now, [p.uid for p in plan.pods])
        await self._persist(job, restarting.id)
        if plan.needs_grace_follow_up and self.spawn is not None:
            self.spawn(self._grace_follow_up(job, plan.pods, incident.id), f"grace:{incident.id}")
        if plan.needs_force_follow_up and self.spawn is not None:
            self.spawn(self._force_follow_up(job, plan, incident.id), f"grace:{incident.id}:force")
        self.metrics.incidents_open(len(self.store.open_incidents()))

    async def _action_failed(self, job: JobRecord, now: datetime, action: str, detail: str) -> None:
        """The restart or resubmission failed: the incident fails, is persisted and reported (action error)."""
        failed = self.store.fail(job.uid, now, detail)
        await self._persist(job, failed.id)
        self.metrics.recovery_failed(job.kind.value, ev.FailureReason.ACTION_ERROR.value)
        await self._publish(
            lambda: ev.recovery_failed(
                failed.id, _job_object(job), ev.FailureReason.ACTION_ERROR, cluster=self.settings.cluster_name,
                at=now, action=action, detail=detail,
            )
        )  # fmt: skip
        self._finished(failed, job)

    def _live_pods(self, job: JobRecord) -> list[PodRef]:
        """The job's pods in the watch cache that are not terminating, by name (what a label-selected list of
        the apiserver returns, without the round trip)."""
        pods = self.state.pods_of_job(job.kind, job.namespace, job.name)
        return sorted(
            (PodRef(p.namespace, p.name, p.uid) for p in pods if p.deletion_timestamp is None), key=lambda p: p.name
        )

    async def _resubmit(self, job: JobRecord, incident: Incident) -> None:
        """Delete the Failed job and create it again from its spec; the incident follows the new UID and is
        recovered when the new job runs (see :meth:`tick`). The lineage count is the ledger's resubmissions,
        already charged when the incident opened (and read back from the job's annotation after a restart)."""
        count = self.store.ledger(job.uid).resubmits_used
        try:
            result = await self.writer.resubmit_job(_job_ref(job), incident=incident.id, count=count)
        except NotLeader:
            raise
        except Exception as e:  # never let one job's resubmission stop the agent
            result = ActionResult("resubmit", str(_job_ref(job)), Outcome.FAILED, f"resubmit failed: {e!r}"[:300])
        self.metrics.action(Action.RESUBMIT.value, result.outcome.value)
        now = datetime.now(UTC)
        if result.outcome is Outcome.FAILED or (result.outcome is not Outcome.DRY_RUN and not result.uid):
            await self._action_failed(job, now, Action.RESUBMIT.value, result.detail or "resubmit gave no new job")
            return
        if result.outcome is Outcome.DRY_RUN:
            restarting = self.store.restarting(job.uid, now)
            await self._persist(job, restarting.id)
            return
        log.info(
            "job resubmitted", incident=incident.id, job=f"{job.namespace}/{job.name}", uid=result.uid, count=count
        )
        moved = self.store.resubmitted(job.uid, result.uid, now)
        self.restored.add(result.uid)  # the store already holds the new job's incident and ledger
        new_ref = JobRef(job.kind, job.namespace, job.name, result.uid)
        written = await self.writer.annotate_job(new_ref, self.store.annotations(result.uid), incident=moved.id)
        if written.outcome is Outcome.FAILED:
            log.warning("incident state not persisted on the resubmitted job", incident=moved.id, detail=written.detail)
        self.metrics.incidents_open(len(self.store.open_incidents()))

    async def _force_follow_up(self, job: JobRecord, plan: RestartPlan, incident_id: str) -> None:
        """Force mode after a RestartJob Command: the old pods go at once (grace 0) once Volcano took it."""
        try:
            result = await finish_force(
                self.writer, _job_ref(job), plan.pods, incident=incident_id, version=plan.version
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a failed read: logged, Volcano's own deletion and the deadline still apply
            log.warning("force follow-up failed", incident=incident_id, error=repr(e))
            return
        self.metrics.action("force-after-command", result.outcome.value)
        log.info("force follow-up", incident=incident_id, outcome=result.outcome.value, detail=result.detail)

    async def _grace_follow_up(self, job: JobRecord, pods: tuple[PodRef, ...], incident_id: str) -> None:
        """Grace mode: after grace-over-time, force-delete the job's pods that are still there."""
        try:
            result = await finish_grace(
                self.writer,
                _job_ref(job),
                pods,
                incident=incident_id,
                grace_over_time_s=self.settings.policy.grace_over_time_s,
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a failed read of a pod: logged, the incident's deadline still applies
            log.warning("grace follow-up failed", incident=incident_id, error=repr(e))
            return
        self.metrics.action("force-after-grace", result.outcome.value)
        log.info("grace follow-up", incident=incident_id, outcome=result.outcome.value, detail=result.detail)

    async def _claim(self, job: JobRecord, incident_id: str) -> bool:
        """The decisive write before any restart of `job` (agent.core.fence): its incident state and ledger plus
        :data:`~agent.core.fence.ACTOR_ANNOTATION` = this term's actor, conditioned on the job's resourceVersion as
        decided on. A 409 re-reads the job and claims again while no other actor has appeared on it; one that
        has (an old leader's late claim) makes this replica drop its own incident and adopt the job's from its
        annotations (the tick resumes it). Returns whether the job is claimed (dry-run counts as claimed).

        Raises:
            NotLeader: the lease fence closed before the write was sent.
        """
        ref = _job_ref(job)
        mine = self.actor()
        expected = {self.actor_baseline.get(job.uid)}
        current, version = job.annotation(ACTOR_ANNOTATION), job.resource_version
        for _ in range(4):
            if not may_claim(current, expected, mine):
                log.warning(
                    "another replica claimed this job during this term; adopting its incident instead",
                    incident=incident_id, job=f"{job.namespace}/{job.name}", actor=current,
                )  # fmt: skip
                self.store.forget(job.uid)
                self.restored.discard(job.uid)
                return False
            annotations = {**self.store.annotations(job.uid), ACTOR_ANNOTATION: mine}
            result = await self.writer.claim_job(ref, annotations, resource_version=version, incident=incident_id)
            if result.outcome in (Outcome.DONE, Outcome.DRY_RUN):
                return True  # the baseline stays: the cache may still show it until our write arrives
            if result.status != 409:
                log.warning("job not claimed; not restarting it now", incident=incident_id, detail=result.detail)
                return False
            try:
                meta = await self.writer.job_meta(ref)
            except Exception as e:  # an ApiException: the tick tries again
                log.warning("job not re-read after a conflict", incident=incident_id, error=repr(e))
                return False
            if meta is None:
                return False
            version, current = meta[0], meta[1].get(ACTOR_ANNOTATION)
        log.warning("job kept changing; not claimed", incident=incident_id)
        return False

    async def _persist(self, job: JobRecord, incident_id: str) -> None:
        result = await self.writer.annotate_job(_job_ref(job), self.store.annotations(job.uid), incident=incident_id)
        if result.outcome is Outcome.FAILED:
            log.warning("incident state not persisted", incident=incident_id, detail=result.detail)

    def _finished(self, incident: Incident, job: JobRecord) -> None:
        seconds = ((incident.closed_at or incident.first_fault_at) - incident.first_fault_at).total_seconds()
        kind = self.fault_kind.pop(incident.id, FaultKind.CHIP)
        outcome = "recovered" if incident.phase is Phase.RECOVERED else "failed"
        self.metrics.recovery(job.kind.value, kind.value, incident.action or "none", outcome, seconds)
        self.metrics.incidents_open(len(self.store.open_incidents()))

    async def _force_delete(self, fault: Fault, job: JobRecord) -> None:
        if fault.pod is None:
            return
        pod = PodRef(fault.pod.namespace, fault.pod.name, fault.pod.uid)
        result = await self.writer.delete_pod(pod, incident=f"stuck:{pod.name}", grace_seconds=0)
        self.metrics.action(Action.FORCE_DELETE_PODS.value, result.outcome.value)

    # ------------------------------------------------------------------ nodes

    def _note_quarantine(self, fault: Fault, active: bool) -> bool:
        """Track the node's active quarantine reasons (on every replica, so a new leader knows them): node faults
        (:func:`quarantine_for`), and isolated chips once ``detect.isolated_chips_taint`` of the node's chips are
        isolated. Returns True when `fault` may change the node's quarantine."""
        if fault.node and fault.chips and is_flapping(fault):
            chips = self.isolated_chips.setdefault(fault.node, {})
            release = timedelta(seconds=self.settings.detect.isolation_release_s)
            if active:
                chips[fault.key] = fault.chips
                self.flap_active[(fault.node, fault.key)] = fault.signal_time + release
            else:
                chips.pop(fault.key, None)
                self.flap_active.pop((fault.node, fault.key), None)
            isolated = {c for cs in chips.values() for c in cs}
            if not chips:
                del self.isolated_chips[fault.node]
            limit = self.settings.detect.isolated_chips_taint
            reasons = self.quarantine_reasons.setdefault(fault.node, {})
            if limit and len(isolated) >= limit:
                reasons[ISOLATED_CHIPS] = FaultLevel.MANUALLY_SEPARATE
            else:
                reasons.pop(ISOLATED_CHIPS, None)
            if not reasons:
                del self.quarantine_reasons[fault.node]
            return True
        level = quarantine_for(fault)
        if level is None:
            return False
        reasons = self.quarantine_reasons.setdefault(fault.node, {})
        if active:
            reasons[fault.key] = level
        else:
            reasons.pop(fault.key, None)
            if not reasons:
                del self.quarantine_reasons[fault.node]
        return True

    def _wanted_taint(self, node: str) -> FaultLevel | None:
        reasons = self.quarantine_reasons.get(node)
        return max(reasons.values()) if reasons else None

    def _current_taint(self, node: str) -> str | None:
        if self.writer.dry_run and node in self.dry_taints:
            return self.dry_taints[node]  # what a skipped write would have left there: said once per change
        rec = self.state.nodes.get(node)
        if rec is None:
            return None
        for taint in rec.taints:
            if taint.key == self.settings.policy.taint_key:
                return taint.value
        return None

    async def _request_taint_sync(self, node: str) -> None:
        """Bring `node`'s quarantine taint in line with its active reasons (:meth:`_sync_node`). With `spawn`
        (the running agent) the node write runs in a task of that node's own, so the recovery loop goes on to the
        next fault without waiting for it; a request made while the node's task runs makes it sync once more,
        so the node ends with the taint of the latest state."""
        if self.spawn is None:
            await self._sync_node(node)
            return
        if node in self.taint_syncing:
            self.taint_dirty.add(node)
            return
        self.taint_syncing.add(node)
        self.spawn(self._taint_worker(node), f"taint:{node}")

    async def _taint_worker(self, node: str) -> None:
        try:
            while True:
                self.taint_dirty.discard(node)
                try:
                    await self._sync_node(node)
                except asyncio.CancelledError:
                    raise
                except NotLeader:
                    return
                except Exception:  # an unexpected error on one node must not end the agent's task group
                    log.exception("quarantine taint sync failed", node=node)
                if node not in self.taint_dirty:
                    return
        finally:
            self.taint_syncing.discard(node)

    async def _sync_node(self, node: str) -> None:
        """Make `node`'s quarantine taint match its active reasons (:meth:`_sync_taint`) and persist its hold next
        to it (:meth:`_sync_hold`). Leader only; idempotent."""
        if not self.is_leader():
            return
        if not self.holds_loaded:
            self._load_holds()
        await self._sync_taint(node)
        await self._sync_hold(node)

    def _load_holds(self) -> None:
        """Adopt the quarantine holds persisted on the nodes (see :meth:`_sync_hold`): each keeps its node
        quarantined until its time (lifted by :meth:`_expire_flap_holds` at the first tick after it), whatever
        the detectors of this replica have seen. An unreadable annotation is logged and ignored."""
        key = self.settings.policy.taint_key
        for name, rec in list(self.state.nodes.items()):
            text = rec.annotation(key)
            if not text:
                continue
            try:
                level, until = parse_quarantine_hold(text)
            except ValueError as e:
                log.warning("quarantine hold annotation unreadable; ignored", node=name, key=key, error=str(e))
                continue
            hold = (name, QUARANTINE_HOLD)
            self.flap_holds[hold] = max(until, self.flap_holds.get(hold, until))
            self.quarantine_reasons.setdefault(name, {})[QUARANTINE_HOLD] = level
            self.hold_written[name] = text
            log.info(
                "quarantine hold read back from the node", node=name, until=until.isoformat(), level=level.wire_name
            )
        self.holds_loaded = True

    def _hold_until(self, node: str) -> datetime | None:
        times = [u for (n, _), u in self.flap_holds.items() if n == node]
        if ISOLATED_CHIPS in self.quarantine_reasons.get(node, {}):
            times += [u for (n, _), u in self.flap_active.items() if n == node]
        return max(times) if times else None

    async def _sync_hold(self, node: str) -> None:
        """Persist `node`'s quarantine hold (a node quarantined for its isolated chips: at least until each chip's
        fault signal time + detect.isolation_release_s; a hold read back from the node) as the annotation
        ``<policy.taint_key>: {"level": …, "until": …}`` next to the taint, so a restarted agent or a new leader
        keeps the node quarantined until that time; removed once the node has no hold. A merge patch of one
        annotation (RBAC: nodes patch, as for the taint)."""
        key = self.settings.policy.taint_key
        rec = self.state.nodes.get(node)
        if rec is None:
            return
        wanted = self._wanted_taint(node)
        until = self._hold_until(node) if wanted is not None else None
        value = None if wanted is None or until is None else encode_quarantine_hold(wanted, until)
        current = rec.annotation(key)
        if value == current or (node in self.hold_written and self.hold_written[node] == value):
            return
        result = await self.writer.annotate_node(node, {key: value})
        if result.ok:
            self.hold_written[node] = value

    async def _sync_taint(self, node: str) -> None:
        """Make `node`'s quarantine taint match its active reasons: set ``<key>=<level>:NoSchedule`` or remove
        only our taint. Leader only; idempotent (the writer re-reads the node)."""
        if not self.is_leader():
            return
        wanted = self._wanted_taint(node)
        key = self.settings.policy.taint_key
        if wanted is not None:
            if self.tainted.get(node) == wanted and self._current_taint(node) == wanted.wire_name:
                return
            result = await self.writer.taint_node(node, key=key, value=wanted.wire_name)
            self.metrics.action("taint", result.outcome.value)
            if result.ok:
                self.tainted[node] = wanted
            if result.outcome is Outcome.DRY_RUN:
                self.dry_taints[node] = wanted.wire_name
        elif node in self.tainted or self._current_taint(node) is not None:
            result = await self.writer.untaint_node(node, key=key)
            self.metrics.action("untaint", result.outcome.value)
            if result.ok:
                self.tainted.pop(node, None)
            if result.outcome is Outcome.DRY_RUN:
                self.dry_taints[node] = None

    async def handle_cleared(self, cleared: FaultCleared) -> None:
        """A fault went away: when it was the node's last quarantine reason, remove our taint (only ours).

        An isolated (flapping) chip's fault clears only when the detector releases the chip (agent.core.detect.flapping:
        healthy for its release time), so a node quarantined for its isolated chips stays so until then.

        Every cleared fault is published as ``fault.cleared`` (leader only, like ``fault.detected``): one per job
        the fault hit, keyed by the job's UID and naming its open incident, or one keyed by the node when it hit
        none (:meth:`_publish_cleared`)."""
        durable = await self._publish_cleared(cleared) if self._check_term() else _durable()
        if self._note_quarantine(cleared.fault, active=False):
            await durable  # fault.cleared on disk before the quarantine it lifts changes
            await self._request_taint_sync(cleared.fault.node)

    def _remember_jobs(self, fault: Fault) -> None:
        """Note the jobs `fault` hits now (what its fault.detected events name), for its fault.cleared."""
        pods = self.state.pods_on_node(fault.node) if fault.node else self._pods_of(fault)
        hits = correlate(fault, pods, _StateJobs(self.state)).hits
        if not hits:
            return
        jobs = self.fault_jobs.setdefault(_fault_identity(fault), {})
        jobs.update((hit.job.uid, _job_object(hit.job)) for hit in hits)
        while len(self.fault_jobs) > _FAULT_JOBS_KEPT:
            del self.fault_jobs[next(iter(self.fault_jobs))]

    async def _publish_cleared(self, cleared: FaultCleared) -> Awaitable[None]:
        """One fault.cleared per job the fault hit (when detected, or now), keyed by the job's UID like its
        fault.detected, naming the job's open incident; a node event when it hit no job. Returns what is done
        once all of them are durable (the last one's commit: commits complete in order)."""
        jobs = dict(self.fault_jobs.pop(_fault_identity(cleared.fault), {}))
        pod = cleared.fault.pod
        record = self.state.pods.get(f"{pod.namespace}/{pod.name}") if pod is not None else None
        link = record.job if record is not None else None
        job = self.state.job(link.kind, link.namespace, link.name) if link is not None else None
        if job is not None:
            jobs.setdefault(job.uid, _job_object(job))
        cluster = self.settings.cluster_name
        refs = sorted(jobs.values(), key=lambda j: (j.namespace, j.name, j.uid))
        if not refs:  # its node event's fault.detected names no incident (nothing acts on it)
            return await self._submit(lambda: ev.fault_cleared(cleared, cluster=cluster))
        fid = ev.fault_id(cleared.fault, cluster=cluster)
        durable: Awaitable[None] = _durable()
        for ref in refs:
            current = self.store.incident(ref.uid)
            incident_id = current.id if current is not None and current.phase.open else None
            # the fault.detected it ends: the last one published here, else (a predecessor's) the open incident's
            detected_link = self.detected_links.pop((fid, f"{ref.namespace}/{ref.name}"), incident_id)
            build = functools.partial(ev.fault_cleared, cleared, cluster=cluster, incident_id=incident_id, jobs=refs)
            durable = await self._submit(functools.partial(build, job=ref, detected_incident_id=detected_link))
        return durable

    async def _expire_flap_holds(self, now: datetime) -> None:
        """Lift the quarantine of healed flapping chips whose flap window has passed."""
        for (node, key), until in list(self.flap_holds.items()):
            if now < until:
                continue
            del self.flap_holds[(node, key)]
            reasons = self.quarantine_reasons.get(node, {})
            reasons.pop(key, None)
            if not reasons:
                self.quarantine_reasons.pop(node, None)
            await self._request_taint_sync(node)

    async def reconcile_taints(self) -> None:
        """Every node's quarantine taint against its active reasons: removes taints we set before a restart
        whose fault cleared while no agent was looking, and sets missing ones."""
        for node in list(self.state.nodes):
            if self._wanted_taint(node) is not None or self._current_taint(node) is not None or node in self.tainted:
                await self._request_taint_sync(node)

    async def _feed_breaker(self, fault: Fault, now: datetime) -> None:
        if fault.kind not in (FaultKind.CHIP, FaultKind.NODE) or not fault.node:
            return
        if fault.node not in self.state.nodes:
            # A ConfigMap left behind by a removed node (or written for one that never existed) is not a node
            # of this cluster turning faulty: it must not count towards the share that trips the breaker.
            return
        if not (fault.level.takes_chip_out or fault.level >= FaultLevel.PRE_SEPARATE):
            return
        # counted at the fault's own signal time: standing faults re-read after a restart are not new
        at_s = fault.signal_time.timestamp()
        trip = self.breaker.record_node_fault(fault.node, now.timestamp(), len(self.state.nodes), at_s=at_s)
        if trip is None:
            return
        log.error("circuit breaker tripped", reason=trip.reason, nodes=list(trip.faulty_nodes))
        self.metrics.breaker_open(True)
        await self._publish(
            lambda: ev.breaker_tripped(
                cluster=self.settings.cluster_name,
                at=now,
                reason=trip.reason,
                faulty_nodes=trip.faulty_nodes,
                watched_nodes=trip.watched_nodes,
                threshold_share=self.breaker.share,
                window_s=self.breaker.window_s,
            )
        )
        if self.is_leader():
            await self._write_breaker()

    async def _write_breaker(self) -> None:
        from agent.actions.breaker_store import write_breaker_state

        if self.writer.dry_run:
            return  # shadow mode writes nothing: the breaker's state stays in memory (see sync_breaker)
        if not self.is_leader():  # the writer's lease fence, for this direct write
            return
        data = self.breaker.to_data()
        try:
            await write_breaker_state(self.writer.core, self.settings, data)
        except Exception as e:  # never let the breaker's bookkeeping stop the agent
            log.warning("breaker state not written", error=repr(e))
            return
        self.breaker_seen, self.breaker_synced = data, True

    async def sync_breaker(self) -> None:
        """Follow the breaker ConfigMap: a person's ``fault-agent breaker reset`` closes our breaker.

        A reset is the ConfigMap turning ``closed`` since this replica last read or wrote it. A ``closed`` state
        read before is none: in dry-run the agent never writes the ConfigMap, so it still says what it said before
        the breaker tripped in memory (a leader whose write was lost writes again instead)."""
        from agent.actions.breaker_store import read_breaker_state

        try:
            data = await read_breaker_state(self.writer.core, self.settings)
        except Exception as e:
            log.debug("breaker state not read", error=repr(e))
            return
        if self.breaker_synced:
            changed = data != self.breaker_seen
        else:  # the first read: only a reset written after the breaker tripped (before this read) is one
            changed = data is not None and self._reset_after_trip(data)
        self.breaker_seen, self.breaker_synced = data, True
        if data is None:
            if self.breaker.is_open and self.is_leader():
                await self._write_breaker()
            return
        was_open = self.breaker.is_open
        if data.get("state") == "closed" and was_open and not changed:
            if self.is_leader():
                await self._write_breaker()
        elif data.get("state") == "closed" and was_open:
            self.breaker.reset()
            self.metrics.breaker_open(False)
            log.warning("circuit breaker reset by a person", by=data.get("reset_by", ""))
        elif data.get("state") == "open" and not was_open:
            with contextlib.suppress(ValueError):
                self.breaker.restore(data)
                self.metrics.breaker_open(True)

    def _reset_after_trip(self, data: Mapping[str, str]) -> bool:
        """Whether `data` records a reset (``reset_at``, RFC 3339) later than the open breaker's trip."""
        trip = self.breaker.trip
        try:
            reset_at = datetime.fromisoformat(data.get("reset_at", ""))
        except ValueError:
            return False
        return trip is not None and reset_at.tzinfo is not None and reset_at.timestamp() > trip.at_s

    # ------------------------------------------------------------------ time

    async def tick(self, now: datetime, *, settled: bool = True, drained: bool = True) -> None:
        """Advance incidents (recovered / deadline), resume incidents a previous leader left ``acting``, retry
        deferred restarts, and, once per leadership term when the fault queue is `drained`, re-evaluate the
        active faults (:meth:`reevaluate`)."""
        leading = self._check_term()
        await self._report_job_labels(now, leading)
        if not leading:
            return
        self._restore_all(now)
        if drained and self.reevaluate_pending:
            await self.reevaluate(now)
        await self._expire_flap_holds(now)
        if settled:
            await self.reconcile_taints()
        for incident in self.store.open_incidents():
            job = self.state.job(JobKind(incident.kind), incident.namespace, incident.name)
            if job is None or job.uid != incident.job_uid:
                if (
                    incident.action == Action.RESUBMIT.value
                    and incident.phase is Phase.RESTARTING
                    and now - incident.first_fault_at <= timedelta(seconds=self.settings.policy.recovery_deadline_s)
                ):
                    continue  # the resubmitted job is not in the cache yet
                if incident.job_uid not in self.executing:  # else its act task ends it first
                    await self._abandon(incident, now)
                continue
            if incident.id not in self.republished:
                self.republished.add(incident.id)
                await self._republish(job, incident)
            if incident.phase is Phase.ACTING:
                # `incident` is a snapshot taken before this loop awaited anything: the recovery loop may have
                # moved it on since, or be sending its restart right now; only a still-acting, idle one is resumed
                current = self.store.incident(incident.job_uid)
                if (
                    current is not None
                    and current.id == incident.id
                    and current.phase is Phase.ACTING
                    and incident.job_uid not in self.executing
                ):
                    await self._resume_acting(job, current)
                continue
            pods = self.state.pods_of_job(job.kind, job.namespace, job.name)
            changed = self.store.observe(job, pods, now, self.settings.policy.recovery_deadline_s)
            if changed is None:
                continue
            try:
                await self._persist(job, changed.id)
            except NotLeader:
                # the end is not on the job: leave the incident as the job's annotation says, so that whoever
                # leads next (this replica too, after a lost renewal) ends it and publishes that, once
                self.store.forget(job.uid)
                self.store.restore(job, now)
                raise
            self._finished(changed, job)
            await self._publish_closed(changed, job, now)
            await self._redecide_joined(job, now)
        deferred, self.deferred = self.deferred, []  # restarts the rate limit held back
        for item in deferred:
            await self.handle_fault(item.fault, now)

    async def _redecide_joined(self, job: JobRecord, now: datetime) -> int:
        """The job's incident just closed: decide again, at once, every fault that joined it and is still active
        on the job's current (not terminating) pods. A fault that joined while the restart was under way may sit
        on a pod that very restart created; nothing else would look at it again until the agent restarted.
        Returns the faults decided again."""
        joined = self.store.take_joined(job.uid)
        if not joined or self.active_faults is None:
            return 0
        active = {(f.key, f.pod): f for f in self.active_faults()}
        current = self.state.job(job.kind, job.namespace, job.name)
        if current is None or current.uid != job.uid:
            return 0
        n = 0
        for seen in joined:
            fault = active.get((seen.key, seen.pod))
            if fault is None:
                continue  # cleared since it joined
            pods = self.state.pods_on_node(fault.node) if fault.node else self._pods_of(fault)
            live = [p for p in pods if p.deletion_timestamp is None]
            for hit in correlate(fault, live, _StateJobs(self.state)).hits:
                if hit.job.uid != job.uid or not hit.actionable:
                    continue
                log.info(
                    "a fault that joined the closed incident is still active on the job's pods; deciding again",
                    job=f"{job.namespace}/{job.name}",
                    node=fault.node,
                    chips=list(fault.chips),
                )
                n += 1
                await self._handle_hit(fault, hit, now, redeciding=True)
        return n

    async def _report_job_labels(self, now: datetime, leading: bool) -> None:
        """Report each watched job's unusable ``fault-retry-times`` value once (agent.sources.jobs keeps such a job
        with a business budget of 0): a log line and fault_agent_input_rejected_total{reason=bad-fault-retry-times}
        on every replica, a ``job.misconfigured`` event from the leader (again by a new leader: same event id)."""
        from agent.sources.jobs import FAULT_RETRY_TIMES_LABEL, fault_retry_times_problem

        if len(self.labels_reported) > 10000:  # job churn must not grow these without bound
            self.labels_reported.clear()
            self.labels_published.clear()
        for store in (self.state.vcjobs, self.state.acjobs):
            for job in list(store.values()):
                value = job.label(FAULT_RETRY_TIMES_LABEL)
                problem = fault_retry_times_problem(value)
                if value is None or problem is None:
                    continue
                mark = (job.uid, FAULT_RETRY_TIMES_LABEL, value)
                if mark not in self.labels_reported:
                    self.labels_reported.add(mark)
                    log.warning("job label unusable; the job is still watched", job=f"{job.namespace}/{job.name}",
                                label=FAULT_RETRY_TIMES_LABEL, value=value[:40], problem=problem)  # fmt: skip
                    self.metrics.input_rejected(
                        "Job" if job.kind is JobKind.VOLCANO else "AscendJob", "bad-fault-retry-times"
                    )
                if leading and mark not in self.labels_published:
                    self.labels_published.add(mark)
                    build = functools.partial(
                        ev.job_misconfigured, _job_object(job), cluster=self.settings.cluster_name, at=now,
                        label=FAULT_RETRY_TIMES_LABEL, value=value, problem=problem,
                    )  # fmt: skip
                    await self._publish(build)

    async def _abandon(self, incident: Incident, now: datetime) -> None:
        """The job of an open incident is gone (deleted mid-recovery): the incident ends as abandoned, with one
        log line, one ``recovery.failed`` event (reason ``job-gone``) and one ``recovery_seconds`` sample
        (outcome ``abandoned``); then the store forgets the job."""
        detail = "job deleted while recovering"
        failed = self.store.fail(incident.job_uid, now, detail)
        self.store.forget(incident.job_uid)
        seconds = max(0.0, (now - failed.first_fault_at).total_seconds())
        kind = self.fault_kind.pop(failed.id, FaultKind.CHIP)
        log.warning(
            "job deleted while recovering; incident abandoned",
            incident=failed.id, job=f"{failed.namespace}/{failed.name}", phase=incident.phase.value, seconds=seconds,
        )  # fmt: skip
        self.metrics.recovery(failed.kind, kind.value, failed.action or "none", "abandoned", seconds)
        self.metrics.recovery_failed(failed.kind, ev.FailureReason.JOB_GONE.value)
        self.metrics.incidents_open(len(self.store.open_incidents()))
        ref = ObjectRef(failed.kind, failed.namespace, failed.name, failed.job_uid)
        await self._publish(
            lambda: ev.recovery_failed(
                failed.id, ref, ev.FailureReason.JOB_GONE, cluster=self.settings.cluster_name, at=now,
                action=failed.action, detail=detail,
            )
        )  # fmt: skip

    async def _publish_closed(self, incident: Incident, job: JobRecord, now: datetime) -> None:
        ref = _job_object(job)
        cluster = self.settings.cluster_name
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
            await self._publish(
                lambda: ev.recovery_succeeded(incident.id, ref, incident.action, durations, cluster=cluster, at=now)
            )
            return
        # the job's controller gave the job up (Volcano: Failed at retryCount == maxRetry), else the deadline passed
        reason = ev.FailureReason.JOB_FAILED if controller_ended_job(job) else ev.FailureReason.TIMEOUT
        log.warning("recovery failed", incident=incident.id, reason=reason.value, detail=incident.detail)
        self.metrics.recovery_failed(job.kind.value, reason.value)
        await self._publish(
            lambda: ev.recovery_failed(
                incident.id, ref, reason, cluster=cluster, at=now, action=incident.action, detail=incident.detail,
            )
        )  # fmt: skip

    def _acting_faults_gone(self, job: JobRecord, incident: Incident) -> bool:
        """True when an ``acting`` incident no longer needs its restart: none of its faults is still active (by the
        detectors' current view; when the incident lists only its first faults, no active fault hits the job at
        all) and the job is healthy (Running, every live pod Running and Ready). False when unsure (no view of the
        active faults)."""
        if self.active_faults is None or incident.action not in (Action.RESTART_JOB.value, Action.RESTART_PODS.value):
            return False
        listed = {_fault_place(text) for text in incident.faults}
        complete = incident.fault_count <= len(incident.faults)
        pods = self.state.pods_of_job(job.kind, job.namespace, job.name)
        for fault in self.active_faults():
            if _fault_place(describe_fault(fault)) in listed:
                return False
            if not complete and any(h.job.uid == job.uid for h in correlate(fault, pods, _StateJobs(self.state)).hits):
                return False
        return job_healthy(job, pods, None)

    async def _republish(self, job: JobRecord, incident: Incident) -> None:
        """An open incident this term did not open (a previous leader's, read back from the job's annotation):
        nothing proves that leader's first events reached Kafka (they may have been in its own outbox when it
        died), so publish them again before anything else about the incident: fault.detected for each active
        fault that hit the job, then recovery.started. Their ids are deterministic (the fault and job; the
        incident and attempt), so a consumer drops the copies of events that did arrive."""
        ref = _job_object(job)
        cluster = self.settings.cluster_name
        active = self.active_faults() if self.active_faults is not None else []
        # only the faults that opened or joined the incident (its list, when it has one not cut at
        # MAX_FAULTS_KEPT): another active fault of the job (one that needed no action) was published without the
        # incident, and its event must keep saying so under its id
        listed = {_fault_place(d) for d in incident.faults}
        complete = bool(incident.faults) and incident.fault_count <= len(incident.faults)  # else: all of the job's
        faults = [
            f
            for f in active
            if job.uid in self.fault_jobs.get(_fault_identity(f), {})
            and (_fault_place(describe_fault(f)) in listed or not complete)
        ]
        log.info("publishing the first events of an adopted incident again", incident=incident.id, faults=len(faults))
        for fault in faults:
            build = functools.partial(ev.fault_detected, fault, cluster=cluster, job=ref, incident_id=incident.id)
            await self._publish(build)
        await self._publish(
            lambda: ev.recovery_started(
                incident.id,
                ref,
                incident.action or Action.RESTART_JOB.value,
                incident.reason or "resumed by a new leader",
                cluster=cluster,
                at=incident.at(Phase.ACTING) or incident.first_fault_at,
                faults=faults,
                dry_run=self.writer.dry_run,
            )
        )

    async def _resume_acting(self, job: JobRecord, incident: Incident) -> None:
        """A previous leader opened this incident and may or may not have sent the restart. If the job's
        generation moved on, the restart happened: just mark it. If none of its faults is active any more and the
        job is healthy (:meth:`_acting_faults_gone`), close it as recovered without restarting. Else send the
        restart again (idempotent writes)."""
        if job.version != incident.generation:
            restarting = self.store.restarting(job.uid, incident.at(Phase.ACTING) or datetime.now(UTC))
            await self._persist(job, restarting.id)
            return
        if self._acting_faults_gone(job, incident):
            now = datetime.now(UTC)
            closed = self.store.recovered_unrestarted(
                job.uid, now, "faults cleared and the job healthy before the restart was sent; not restarted"
            )
            log.info(
                "incident left acting by the previous leader: its faults cleared and the job is healthy; closed "
                "as recovered without restarting",
                incident=incident.id,
                job=f"{job.namespace}/{job.name}",
            )
            await self._persist(job, closed.id)
            self._finished(closed, job)
            await self._publish_closed(closed, job, now)
            await self._redecide_joined(job, now)
            return
        decision = Decision(
            Action(incident.action) if incident.action else Action.RESTART_JOB,
            incident.reason,
            mode=job.fault_scheduling if not incident.mode else type(job.fault_scheduling)(incident.mode),
        )
        log.info("resuming an incident left acting by the previous leader", incident=incident.id)
        if not await self._claim(job, incident.id):
            return
        await self._execute(job, incident, decision)


class DetectPipeline:
    """Runs the detectors on every state change (synchronously, in the watcher's sink) and queues the faults.

    Args:
        settings: detect and kube settings.
        state: the cluster state (already applied when the change arrives).
        queue: receives Fault and FaultCleared items.
        clock: returns the current UTC time (injected for tests).
        metrics: counts each new fault, cleared fault and rejected input (None: not counted).
    """

    def __init__(
        self,
        settings: Settings,
        state: ClusterState,
        queue: asyncio.Queue[Fault | FaultCleared],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        metrics: DetectMetrics | None = None,
    ) -> None:
        from agent.core.detect import (
            ClusterDDetector,
            DeviceInfoDetector,
            FlapTracker,
            NodeDetector,
            NodeInfoDetector,
            PodDetector,
            PublicFaultDetector,
            load_shipped_table,
        )

        d = settings.detect
        table = load_shipped_table()
        flaps = FlapTracker(
            d.flap_threshold,
            timedelta(seconds=d.flap_window_s),
            table.customization,
            release=timedelta(seconds=d.isolation_release_s),
        )
        chips = self._node_chips
        self.device = DeviceInfoDetector(table, on_mismatch=d.check_code_mismatch, flapping=flaps, nodes=chips)
        self.nodeinfo = NodeInfoDetector(table, on_mismatch=d.check_code_mismatch)
        self.clusterd = ClusterDDetector(table, on_mismatch=d.check_code_mismatch, nodes=chips, flapping=flaps)
        pf_level = FaultLevel.parse(d.public_fault_default_level)
        self.publicfault = PublicFaultDetector(table, pf_level, nodes=chips, serials=state.node_by_sn)
        self.nodes = NodeDetector(
            not_ready_grace=timedelta(seconds=d.node_not_ready_grace_s),
            problem_condition_types=d.problem_condition_types,
            health_recheck=timedelta(seconds=d.node_health_recheck_s),
        )
        self.pods = PodDetector(stuck_terminating=timedelta(seconds=d.stuck_terminating_s))
        self.state = state
        self.queue = queue
        self.clock = clock
        self.metrics = metrics
        self.rejected = 0
        # device-plugin, ClusterD and public-fault changes that arrived before the Nodes were listed (their chips
        # are checked against the Node, a public fault's nodeSN and chip names come from it: they wait for it)
        self._held: list[Any] = []
        # job key -> the (reason, detail, value) of its label problems last reported (each distinct value once)
        self._job_label_problems: dict[str, frozenset[tuple[str, str, str | None]]] = {}
        # faults the detectors reported and have not cleared, by (fault key, pod): what a new leader re-evaluates
        self._active: dict[tuple[Any, ObjectRef | None], Fault] = {}

    def active_faults(self) -> list[Fault]:
        """The faults reported and not cleared since, oldest signal first (a new leader re-evaluates them)."""
        return sorted(self._active.values(), key=lambda f: f.signal_time)

    def report_depth(self) -> None:
        """Set fault_agent_queue_depth{queue="faults"} to the items waiting now."""
        if self.metrics is not None:
            self.metrics.queue_depth(FAULT_QUEUE, self.queue.qsize())

    def _emit(self, result: Any, source: str) -> None:
        label = _SIGNAL_SOURCES.get(source, source)
        # clears first: a level change clears a fault and raises it again under the same key in one result
        for cleared in result.cleared:
            self.queue.put_nowait(cleared)
            self._active.pop((cleared.fault.key, cleared.fault.pod), None)
            if self.metrics is not None:
                self.metrics.fault_cleared(cleared.fault.kind)
        for fault in result.faults:
            self.queue.put_nowait(fault)
            self._active[(fault.key, fault.pod)] = fault
            if self.metrics is not None:
                self.metrics.fault(fault.kind, fault.level, label)
        for rej in result.rejections:
            self.rejected += 1
            log.warning("input rejected", source=str(rej.source), reason=rej.reason, detail=rej.detail)
            if self.metrics is not None:
                self.metrics.input_rejected(rej.source.kind, rej.reason)
        if result.faults or result.cleared:
            self.report_depth()

    def __call__(self, change: Any) -> None:
        """The watchers' sink: one change in, its faults queued. Never raises on bad input."""
        from agent.kube.watch import ChangeType

        now = self.clock()
        if change.type is ChangeType.RESUMED:
            if change.source == "nodes":  # the agent was blind to node heartbeats until now
                self.nodes.resumed(now)
            return
        if change.type is ChangeType.LISTED:
            if change.source == "nodes" and self._held and self.state.listed("nodes"):
                held, self._held = self._held, []
                for item in held:
                    self(item)
            return
        if change.source in ("deviceinfo", "clusterinfo", "publicfault") and not self.state.listed("nodes"):
            self._held.append(change)
            return
        new, old = change.new, change.old
        try:
            if change.source == "deviceinfo":
                if new is not None:
                    self._emit(self.device.update(new, now), change.source)
                elif old is not None:
                    self._emit(self.device.delete(old.namespace, old.name, now, uid=old.uid), change.source)
            elif change.source == "nodeinfo":
                if new is not None:
                    self._emit(self.nodeinfo.update(new, now), change.source)
                elif old is not None:
                    self._emit(self.nodeinfo.delete(old.namespace, old.name, now, uid=old.uid), change.source)
            elif change.source == "nodes":
                if isinstance(new, NodeRecord):
                    self._emit(self.nodes.update(new, now), change.source)
                elif old is not None:
                    self._emit(self.nodes.delete(old.name, now), change.source)
                self._recheck_device(old, new, now)
            elif change.source == "pods":
                if new is not None:
                    self._emit(self.pods.update(new, now, self.nodes.down_nodes()), change.source)
                elif old is not None:
                    self._emit(self.pods.delete(old, now), change.source)
            elif change.source == "faultconfig":
                self._reload_levels(new, now)
            elif change.source == "clusterinfo":
                if new is not None:
                    self._emit(self.clusterd.update(new, now), change.source)
                elif old is not None:
                    self._emit(self.clusterd.delete(old.namespace, old.name, now), change.source)
            elif change.source == "publicfault":
                if new is not None:
                    self._emit(self.publicfault.update(new, now), change.source)
                elif old is not None:
                    self._emit(self.publicfault.delete(old.namespace, old.name, now, uid=old.uid), change.source)
            elif change.source in ("vcjobs", "acjobs"):
                self._check_job_labels(f"{change.source}:{change.key}", new)
        except Exception:  # a detector bug must not stop the watch; logged with the object
            log.exception("detector failed", source=change.source, key=change.key)

    def _node_chips(self, node: str) -> NodeChips | None:
        """The device detectors' Node lookup: the Node's NPU resource and capacity, None when it does not exist.
        Without a nodes watcher (a pipeline fed by hand) every node counts as existing, capacity unknown."""
        if not self.state.expects("nodes"):
            return NodeChips()
        rec = self.state.nodes.get(node)
        return None if rec is None else NodeChips(rec.npu_resource, rec.npu_capacity)

    def _recheck_device(self, old: NodeRecord | None, new: NodeRecord | None, now: datetime) -> None:
        """A Node appeared, went, or changed its NPU resource or capacity: its device ConfigMap is read again
        (its chips are checked against the Node). ClusterD's entries are checked at its next write."""
        rec = new or old
        if rec is None or not self.state.listed("nodes"):
            return
        if (
            old is not None
            and new is not None
            and (old.npu_resource, old.npu_capacity)
            == (
                new.npu_resource,
                new.npu_capacity,
            )
        ):
            return
        cm = self.state.device_info_by_node.get(rec.name)
        if cm is not None:
            self._emit(self.device.recheck(cm, now), "deviceinfo")

    def _check_job_labels(self, key: str, job: JobRecord | None) -> None:
        """Report a job's unusable labels (agent.sources.jobs.label_rejections) once per distinct value: a new
        bad value is reported even when the previous write's rejection read the same; a deleted job is forgotten."""
        from agent.sources.jobs import label_rejections

        if job is None:
            self._job_label_problems.pop(key, None)
            return
        ref = ObjectRef("Job" if job.kind is JobKind.VOLCANO else "AscendJob", job.namespace, job.name, job.uid)
        found = label_rejections(job, ref)
        value = job.label(FAULT_SCHEDULING_LABEL)  # the whole value: two long ones may share a truncated detail
        marks = frozenset((r.reason, r.detail, value) for r in found)
        before = self._job_label_problems.get(key, frozenset())
        if marks:
            self._job_label_problems[key] = marks
        else:
            self._job_label_problems.pop(key, None)
        fresh = [r for r in found if (r.reason, r.detail, value) not in before]
        if fresh:
            from agent.core.detect import DetectResult

            self._emit(DetectResult(rejections=fresh), "jobs")

    def _reload_levels(self, cm: Any, now: datetime) -> None:
        """The ``mindx-dl-fault-config`` ConfigMap changed: apply its overrides to every ConfigMap detector and
        re-classify the faults already held (a changed level clears the fault and raises it again). A deleted
        ConfigMap removes the overrides; an unreadable one keeps the previous overrides (and is rejected)."""
        from agent.core.detect import DetectResult, parse_fault_config
        from agent.core.detect.levels import FaultConfig

        overrides: Mapping[str, FaultLevel] | None = FaultConfig({}, {}, {}, None)
        if cm is not None:
            overrides, rejections = parse_fault_config(cm)
            self._emit(DetectResult(rejections=rejections), "faultconfig")
        if overrides is None:
            return
        table = self.device.table.with_overrides(overrides)
        rules = table.customization
        log.info("fault levels reloaded", overrides=len(overrides), frequency_rules=len(rules.frequency),
                 duration_rules=len(rules.duration))  # fmt: skip
        self._emit(self.device.set_table(table, now), "deviceinfo")
        self._emit(self.clusterd.set_table(table, now), "clusterinfo")
        # NodeD reports its own FaultLevel per device; the table only decides codes it leaves without one.
        self.nodeinfo.table = table
        self._emit(self.publicfault.set_table(table, now), "publicfault")

    def tick(self) -> None:
        """Time-based detections: NotReady past the grace, pods stuck terminating, flapping chips released and
        faults past a duration rule's timeout (their clears are emitted before the faults raised again)."""
        from agent.core.detect import DetectResult

        now = self.clock()
        self._emit(self.nodes.tick(now), "nodes")
        self._emit(self.pods.tick(now, self.nodes.down_nodes()), "pods")
        self._emit(self.publicfault.tick(now), "publicfault")  # `once` public faults past their hold
        for source, res in (("deviceinfo", self.device.tick(now)), ("clusterinfo", self.clusterd.tick(now))):
            self._emit(DetectResult(cleared=res.cleared), source)
            self._emit(DetectResult(faults=res.faults, rejections=res.rejections), source)


# ---------------------------------------------------------------------------------------------- running


async def _recovery_loop(
    engine: RecoveryEngine,
    state: ClusterState,
    queue: asyncio.Queue[Fault | FaultCleared],
    stop: asyncio.Event,
    on_depth: Callable[[], None] | None = None,
) -> None:
    # No decision before every source has listed; readiness is a property of the state, not an event.
    while not state.ready and not stop.is_set():  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    while not stop.is_set():
        get = asyncio.ensure_future(queue.get())
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({get, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if not get.done():
            get.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await get
            return
        item = get.result()
        if on_depth is not None:
            on_depth()
        try:
            if isinstance(item, FaultCleared):
                await engine.handle_cleared(item)
            else:
                await engine.handle_fault(item, datetime.now(UTC))
        except asyncio.CancelledError:
            raise
        except NotLeader as e:
            log.warning("fault left to the leader: no longer leading", detail=str(e))
        except Exception:  # one fault's failure must not stop recovery of the others
            log.exception("handling a fault failed")


async def _tick_loop(
    engine: RecoveryEngine, pipeline: DetectPipeline, state: ClusterState, stop: asyncio.Event, period_s: float
) -> None:
    n = 0
    ready_ticks = 0
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=period_s)
        if stop.is_set() or not state.ready:
            continue
        ready_ticks += 1
        try:
            pipeline.tick()
            # taints are reconciled only once the faults found by the first lists have been handled
            settled = ready_ticks >= 5 and pipeline.queue.empty()
            await engine.tick(datetime.now(UTC), settled=settled, drained=pipeline.queue.empty())
            n += 1
            if n % 5 == 0:
                await engine.sync_breaker()
        except asyncio.CancelledError:
            raise
        except NotLeader as e:
            log.warning("tick stopped: no longer leading", detail=str(e))
        except Exception:
            log.exception("tick failed")


async def run_agent(
    settings: Settings,
    stop: asyncio.Event,
    *,
    identity: str | None = None,
    on_engine: Callable[[RecoveryEngine], None] | None = None,
) -> RecoveryEngine:
    """Run the whole agent until `stop` is set; returns the engine. See the module docstring.

    Args:
        identity: leader-election identity (default: pod name plus a random suffix).
        on_engine: called with the engine once it is built (tests inspect its incidents and decisions).

    Raises:
        agent.kube.errors.KubeConfigError: no usable Kubernetes credentials.
        OSError: the HTTP server could not bind.
    """
    from prometheus_client import CollectorRegistry

    from agent.kube.client import ApiTransport, new_api_client
    from agent.leader import LeaderElector
    from agent.server import HealthServer
    from agent.sinks.metrics import AgentMetrics

    registry = CollectorRegistry()
    topics = (settings.kafka.faults_topic, settings.kafka.recoveries_topic)
    metrics = AgentMetrics(registry, cluster=settings.cluster_name, topics=topics)
    recorder = None
    if settings.record.dir is not None:
        from agent.kube.record import Recorder

        recorder = Recorder(settings.record.dir, settings.record)
        recorder.open()  # RecordError: a clear message before anything starts
    api = await new_api_client(settings.kube.kubeconfig, settings.kube.context)
    state = ClusterState()
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    pipeline = DetectPipeline(settings, state, queue, metrics=metrics)
    transport = ApiTransport(api)
    watchers = build_watchers(
        settings.kube,
        transport,
        state,
        observer=metrics,
        sink=pipeline,
        node_annotation_keys=(settings.policy.taint_key,),
        tap=recorder.tap if recorder is not None else None,
    )
    tasks: list[asyncio.Task[Any]] = []

    def leadership_changed(leading: bool) -> None:
        metrics.leader(leading)
        if not leading:  # in-flight actions stop at once (their writes are fenced too, agent.core.fence)
            for task in list(tasks):
                if task.get_name().startswith(("grace:", "act:", "taint:")):
                    task.cancel()

    elector: LeaderElector | None = None
    if settings.leader.enabled:
        elector = LeaderElector(api, settings.leader, identity=identity, on_change=leadership_changed)
    else:
        metrics.leader(True)
    writer = ClusterWriter(
        api,
        dry_run=settings.policy.dry_run,
        timeout_s=settings.kube.request_timeout_s,
        fence=elector.lease_remaining if elector is not None else None,
    )
    publisher: Any = None
    if settings.kafka.enabled:
        from agent.sinks.kafka import KafkaPublisher

        publisher = KafkaPublisher(settings.kafka, metrics=metrics)
    try:
        if publisher is not None:
            await publisher.start()
        async with asyncio.TaskGroup() as tg:

            def spawn(coro: Coroutine[Any, Any, Any], name: str) -> Any:
                task = tg.create_task(coro, name=name)
                tasks.append(task)
                # finished tasks leave the list (the long-lived loops never finish before the group ends)
                task.add_done_callback(lambda t: tasks.remove(t) if t in tasks else None)
                return task

            async def cancel_on_stop() -> None:
                await stop.wait()
                # Grace follow-ups may sleep for up to grace-over-time, and a write to an apiserver that stopped
                # answering has no deadline: end them. An incident left ``acting`` is resumed by the next leader
                # (its writes are idempotent); taints are reconciled at the next start.
                for task in list(tasks):
                    if task.get_name().startswith(("grace:", "act:", "taint:")):
                        task.cancel()

            engine = RecoveryEngine(
                settings,
                state,
                writer,
                events=publisher,
                is_leader=(lambda: elector.is_leader) if elector is not None else (lambda: True),
                spawn=spawn,
                metrics=metrics,
                active_faults=pipeline.active_faults,
                actor=(lambda: elector.actor) if elector is not None else (lambda: "agent"),
            )
            if on_engine is not None:
                on_engine(engine)
            for w in watchers:
                spawn(w.run(stop), f"watch:{w.resource.watcher_id}")
            spawn(_recovery_loop(engine, state, queue, stop, pipeline.report_depth), "recovery")
            spawn(_tick_loop(engine, pipeline, state, stop, 1.0), "tick")
            if elector is not None:
                spawn(elector.run(stop), "leader")
            readiness = {"cache-synced": _ready_probe(state), "events": _events_probe(publisher, settings)}
            server = HealthServer(settings.server, registry, readiness=readiness)
            spawn(server.serve(stop), "server")
            spawn(cancel_on_stop(), "cancel-on-stop")
            if recorder is not None:
                spawn(recorder.run(stop), "record")
        return engine
    finally:
        if publisher is not None:
            await publisher.stop()
        await api.close()


def _events_probe(publisher: Any, settings: Settings) -> Any:
    """/readyz check "events": Kafka or the outbox can take events. Ready while Kafka is connected, or while
    events spill to an outbox that still has room; not ready when the publisher stopped or the outbox is full."""
    from agent.server import Check

    def probe() -> Check:
        if publisher is None:
            return Check(True, "kafka disabled (kafka.enabled=false)")
        mode = getattr(publisher.mode, "value", str(publisher.mode))
        if mode == "stopped":
            return Check(False, "event publisher stopped")
        outbox = publisher.outbox
        if outbox is not None and outbox.size_bytes >= settings.kafka.outbox_max_bytes:
            return Check(False, f"outbox full ({outbox.size_bytes} bytes, kafka.outbox_max_bytes)")
        if mode == "direct":
            return Check(True, "kafka connected")
        reason = publisher.last_error.reason.value if publisher.last_error is not None else "replaying"
        pending = outbox.pending if outbox is not None else 0
        return Check(True, f"kafka unavailable ({reason}); {pending} events kept in the outbox")

    return probe


def _ready_probe(state: ClusterState) -> Any:
    from agent.server import Check

    def probe() -> Check:
        return Check(state.ready, "every source listed" if state.ready else f"waiting for {sorted(state.not_listed)}")

    return probe


def main(args: argparse.Namespace) -> int:
    """`fault-agent run`: load settings, configure logs, run until SIGTERM/SIGINT. Returns the exit code."""
    from agent.logs import configure_logging
    from agent.settings import SettingsError

    try:
        settings = load_settings(getattr(args, "config", None))
    except SettingsError as e:
        print(f"fault-agent: {e}")
        return 2
    record_dir = getattr(args, "record", None)
    if record_dir is not None:
        settings = settings.model_copy(update={"record": settings.record.model_copy(update={"dir": record_dir})})
    configure_logging(settings.log)

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_agent(settings, stop, identity=getattr(args, "identity", None))

    from agent.kube.errors import KubeConfigError
    from agent.kube.record import RecordError
    from agent.sinks.outbox import OutboxError

    failed = False
    try:
        asyncio.run(runner())
    except* (OSError, KubeConfigError, OutboxError, RecordError) as group:
        # A port already in use, no kubeconfig, an unwritable outbox folder: one clear line each, no traceback.
        failed = True
        for err in group.exceptions:
            log.error("agent cannot run", error=str(err))
    return 1 if failed else 0


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `run`'s arguments and set its function (see agent.cli)."""
    parser.add_argument("--identity", help="leader-election identity (default: pod name plus a random suffix)")
    parser.add_argument(
        "--record",
        metavar="DIR",
        help="record every object the watches deliver to rotating gzip JSON-lines files in DIR (setting record.dir)",
    )
    parser.set_defaults(func=main)
