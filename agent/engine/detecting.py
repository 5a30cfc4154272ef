"""Detecting: every state change through its source's detector, the faults onto the engine's queue.

Each watched source has one :class:`ChangeDetector` (one interface, typed by the record it reads), chosen once
when the pipeline is built; a change goes to its source's detector, whose result is queued and counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

import structlog

from agent.core.clock import Clock
from agent.core.cluster import ConfigMapRecord, JobKind, JobRecord, NodeRecord, PodRecord
from agent.core.detect import (
    ClusterDDetector,
    DetectResult,
    DeviceInfoDetector,
    FlapTracker,
    NodeDetector,
    NodeInfoDetector,
    PodDetector,
    PublicFaultDetector,
    load_shipped_table,
    parse_fault_config,
)
from agent.core.detect.chips import NodeChips
from agent.core.detect.levels import FaultConfig
from agent.core.faults import Fault, FaultCleared, FaultLevel, ObjectRef, fault_identity
from agent.core.goodput import ProgressHistory
from agent.core.job_labels import FAULT_SCHEDULING_LABEL
from agent.core.progress import (
    PROGRESS_LABEL,
    SIGNALS,
    Hang,
    HangDetector,
    HangSettings,
    LeaseRecord,
    Resumed,
    SignalCheck,
)
from agent.core.quarantine import RELEASE_ANNOTATION, parse_release
from agent.core.straggler import Straggler, StragglerDetector, StragglerEnded, StragglerSettings
from agent.engine.ports import DetectMetrics
from agent.kube.watch import Change, ChangeType
from agent.settings import Settings
from agent.sources.catalog import CATALOG, source
from agent.sources.jobs import label_rejections
from agent.sources.state import ClusterState

log = structlog.get_logger(__name__)

PRUNE_EVERY = timedelta(minutes=1)
"""How often the flap counts past their windows are dropped (agent.core.detect.flapping.FlapTracker.prune)."""

FAULT_QUEUE = "faults"
"""The ``queue`` label of fault_agent_queue_depth for the detect pipeline's fault queue."""

FAULT_SOURCES = tuple(s.detector for s in CATALOG if s.fault_kinds)
"""The ``source`` labels of fault_agent_faults_total the detectors below count faults under (agent.sources.catalog
``Source.detector``)."""

Emit = Callable[[DetectResult, str], None]
"""Queues and counts a detector's result under a ``source`` label of fault_agent_faults_total."""


class ChangeDetector(Protocol):
    """The detector of one watched source: a record at `key` written (`new`) or deleted (`old`, `new` None).

    It emits what it found (:data:`Emit`); `needs_nodes`: its changes wait until the Nodes are listed (their chips
    are checked against the Node)."""

    needs_nodes: bool

    def changed(self, key: str, new: Any, old: Any, now: datetime) -> None: ...

    def resumed(self, now: datetime) -> None:
        """The source's watch is back after a gap (the agent was blind to it until `now`)."""

    def listed(self) -> None:
        """The source's first (or a new) complete list has been applied."""


class _Between:
    """What most detectors do between changes: nothing."""

    def resumed(self, now: datetime) -> None:
        return None

    def listed(self) -> None:
        return None


@dataclass(eq=False)
class ConfigMapChanges(_Between):
    """Device-plugin, NodeD and public-fault ConfigMaps: ``update(cm)``, ``delete(namespace, name, uid=)``."""

    detector: DeviceInfoDetector | NodeInfoDetector | PublicFaultDetector
    emit: Emit
    label: str
    needs_nodes: bool = False

    def changed(self, key: str, new: ConfigMapRecord | None, old: ConfigMapRecord | None, now: datetime) -> None:
        if new is not None:
            self.emit(self.detector.update(new, now), self.label)
        elif old is not None:
            self.emit(self.detector.delete(old.namespace, old.name, now, uid=old.uid), self.label)


@dataclass(eq=False)
class ClusterDChanges(_Between):
    """ClusterD's ``cluster-info-*`` ConfigMaps (their deletion carries no UID)."""

    detector: ClusterDDetector
    emit: Emit
    label: str  # the source label it is counted under (agent.sources.catalog Source.detector)
    needs_nodes: bool = True

    def changed(self, key: str, new: ConfigMapRecord | None, old: ConfigMapRecord | None, now: datetime) -> None:
        if new is not None:
            self.emit(self.detector.update(new, now), self.label)
        elif old is not None:
            self.emit(self.detector.delete(old.namespace, old.name, now), self.label)


@dataclass(eq=False)
class PodChanges(_Between):
    """Pods (a pod on a node that is down is not stuck terminating)."""

    detector: PodDetector
    nodes: NodeDetector
    emit: Emit
    label: str  # the source label it is counted under (agent.sources.catalog Source.detector)
    needs_nodes: bool = False

    def changed(self, key: str, new: PodRecord | None, old: PodRecord | None, now: datetime) -> None:
        if new is not None:
            self.emit(self.detector.update(new, now, self.nodes.down_nodes()), self.label)
        elif old is not None:
            self.emit(self.detector.delete(old, now), self.label)


@dataclass(eq=False)
class NodeChanges:
    """Nodes; then a Node that appeared, went, or changed its NPU resource or capacity has its device and NodeD
    ConfigMaps read again (`recheck`: they are checked against the Node). Once listed, the changes that waited for the
    Nodes go through (`on_listed`)."""

    detector: NodeDetector
    recheck: Callable[[NodeRecord | None, NodeRecord | None, datetime], None]
    emit: Emit
    on_listed: Callable[[], None]
    label: str  # the source label it is counted under (agent.sources.catalog Source.detector)
    needs_nodes: bool = False

    def resumed(self, now: datetime) -> None:
        self.detector.resumed(now)  # the agent was blind to node heartbeats until now

    def listed(self) -> None:
        self.on_listed()  # the changes that waited for the Nodes go through now

    def changed(self, key: str, new: NodeRecord | None, old: NodeRecord | None, now: datetime) -> None:
        if isinstance(new, NodeRecord):
            self.emit(self.detector.update(new, now), self.label)
        elif old is not None:
            self.emit(self.detector.delete(old.name, now), self.label)
        self.recheck(old, new, now)


@dataclass(eq=False)
class FaultConfigChanges(_Between):
    """The ``mindx-dl-fault-config`` ConfigMap: level overrides for every ConfigMap detector (`reload`)."""

    reload: Callable[[ConfigMapRecord | None, datetime], None]
    needs_nodes: bool = False

    def changed(self, key: str, new: ConfigMapRecord | None, old: ConfigMapRecord | None, now: datetime) -> None:
        self.reload(new, now)


@dataclass(eq=False)
class LeaseChanges(_Between):
    """Training-progress heartbeat Leases (agent.core.progress): the step changes the hang detector times."""

    detector: HangDetector
    emit: Emit
    label: str  # the source label it is counted under (agent.sources.catalog Source.detector)
    needs_nodes: bool = False
    stragglers: StragglerDetector | None = None  # the per-rank step times (agent.core.straggler)
    ended: list[StragglerEnded] = field(default_factory=list)  # straggler episodes ended by a Lease's deletion
    history: ProgressHistory | None = None  # the good readings, for the effective-training account

    def changed(self, key: str, new: LeaseRecord | None, old: LeaseRecord | None, now: datetime) -> None:
        if new is not None:
            self.emit(self.detector.update(new, now), self.label)
            if self.stragglers is not None:
                self.emit(DetectResult(rejections=self.stragglers.update(new, now)), self.label)
            track = self.detector.tracks.get(new.key)
            if self.history is not None and track is not None and new.key not in self.detector.rejected:
                self.history.observe(new.namespace, new.job, track.progress, now)
        elif old is not None:
            self.emit(self.detector.delete(key, now), self.label)
            if self.stragglers is not None:
                self.ended += self.stragglers.delete(key, now)
            if self.history is not None:
                self.history.forget(old.namespace, old.job)


@dataclass(eq=False)
class JobLabelChanges(_Between):
    """Volcano Jobs or AscendJobs (`source`): their unusable labels (agent.sources.jobs.label_rejections),
    reported once per distinct value: a new bad value is reported even when the previous write's rejection read
    the same; a deleted job is forgotten."""

    source: str
    emit: Emit
    label: str  # the source label it is counted under (agent.sources.catalog Source.detector)
    problems: dict[str, frozenset[tuple[str, str, str | None]]] = field(default_factory=dict)
    needs_nodes: bool = False

    def changed(self, key: str, new: JobRecord | None, old: JobRecord | None, now: datetime) -> None:
        mark_key = f"{self.source}:{key}"
        if new is None:
            self.problems.pop(mark_key, None)
            return
        job = new
        ref = ObjectRef(job.kind.api_kind, job.namespace, job.name, job.uid)
        found = label_rejections(job, ref)
        value = job.label(FAULT_SCHEDULING_LABEL)  # the whole value: two long ones may share a truncated detail
        marks = frozenset((r.reason, r.detail, value) for r in found)
        before = self.problems.get(mark_key, frozenset())
        if marks:
            self.problems[mark_key] = marks
        else:
            self.problems.pop(mark_key, None)
        fresh = [r for r in found if (r.reason, r.detail, value) not in before]
        if fresh:
            self.emit(DetectResult(rejections=fresh), self.label)


class DetectPipeline:
    """Runs the detectors on every state change (synchronously, in the watcher's sink) and queues the faults.

    Args:
        settings: detect and kube settings.
        state: the cluster state (already applied when the change arrives).
        queue: receives Fault and FaultCleared items.
        clock: the clock every fault is dated by (agent.core.clock.Clock; the running agent passes
            agent.runtime.clock.SystemClock). Required: nothing in the engine picks a clock itself.
        metrics: counts each new fault, cleared fault and rejected input (None: not counted).
    """

    def __init__(
        self,
        settings: Settings,
        state: ClusterState,
        queue: asyncio.Queue[Fault | FaultCleared],
        clock: Clock,
        metrics: DetectMetrics | None = None,
    ) -> None:
        d = settings.detect
        table = load_shipped_table()
        flaps = FlapTracker(
            d.flap_threshold,
            timedelta(seconds=d.flap_window_s),
            table.customization,
            release=timedelta(seconds=d.isolation_release_s),
        )
        chips = self._node_chips
        self.flapping = flaps  # shared by the device-plugin and ClusterD detectors
        self._pruned_at: datetime | None = None
        self.bad_releases: dict[str, str] = {}  # node -> an unreadable release annotation already reported
        self.device = DeviceInfoDetector(table, on_mismatch=d.check_code_mismatch, flapping=flaps, nodes=chips)
        self.nodeinfo = NodeInfoDetector(table, on_mismatch=d.check_code_mismatch, nodes=chips)
        self.clusterd = ClusterDDetector(table, on_mismatch=d.check_code_mismatch, nodes=chips, flapping=flaps)
        pf_level = FaultLevel.parse(d.public_fault_default_level)
        self.publicfault = PublicFaultDetector(table, pf_level, nodes=chips, serials=state.node_by_sn)
        self.nodes = NodeDetector(
            not_ready_grace=timedelta(seconds=d.node_not_ready_grace_s),
            problem_condition_types=d.problem_condition_types,
            health_recheck=timedelta(seconds=d.node_health_recheck_s),
        )
        self.pods = PodDetector(stuck_terminating=timedelta(seconds=d.stuck_terminating_s))
        self.hang = HangDetector(
            HangSettings(d.hang_timeout_floor_s, d.hang_timeout_ceiling_s, d.hang_step_time_multiple,
                         d.hang_checkpoint_max_s)
        )  # fmt: skip
        self.hang.lookup = self._progress_job
        self.progress = ProgressHistory()  # the heartbeat readings, for the effective-training account
        self.hangs: dict[tuple[object, ...], Hang] = {}  # the hang faults raised (by identity), for job.hung
        self.signals = SignalCheck(grace_s=d.hang_timeout_ceiling_s)
        self.signals_started = False  # the first signal check (every job) is done: later ones read what changed
        self.touched = state.follow_jobs(related=True)  # jobs, pods and Leases touched: what the ticks look at
        self.straggler = StragglerDetector(
            StragglerSettings(d.straggler_step_time_multiple, d.straggler_windows, d.straggler_min_ranks)
        )
        self._stragglers: tuple[list[Straggler], list[StragglerEnded]] = ([], [])  # found since the last take
        self.state = state
        self.queue = queue
        self.clock: Clock = clock
        self.metrics = metrics
        self.rejected = 0
        # device-plugin, NodeD, ClusterD and public-fault changes that arrived before the Nodes were listed (their
        # node must exist and their chips are checked against it, a public fault's nodeSN and chip names come from
        # it: they wait for it)
        self._held: list[Change[Any]] = []
        # faults the detectors reported and have not cleared, by (fault key, pod): what a new leader re-evaluates
        self._active: dict[tuple[Any, ObjectRef | None], Fault] = {}
        emit = self._emit
        # the one detector of each watched source that has one, counted under the label its catalog entry names
        # (agent.sources.catalog)
        label = {s.name: s.detector for s in CATALOG}
        self.detectors: dict[str, ChangeDetector] = {
            "deviceinfo": ConfigMapChanges(self.device, emit, label["deviceinfo"], needs_nodes=True),
            "nodeinfo": ConfigMapChanges(self.nodeinfo, emit, label["nodeinfo"], needs_nodes=True),
            "publicfault": ConfigMapChanges(self.publicfault, emit, label["publicfault"], needs_nodes=True),
            "clusterinfo": ClusterDChanges(self.clusterd, emit, label["clusterinfo"]),
            "nodes": NodeChanges(self.nodes, self._recheck_node_configmaps, emit, self._release_held,
                                 label=label["nodes"]),
            "pods": PodChanges(self.pods, self.nodes, emit, label["pods"]),
            "faultconfig": FaultConfigChanges(self._reload_levels),
            "vcjobs": JobLabelChanges("vcjobs", emit, label=label["vcjobs"]),
            "acjobs": JobLabelChanges("acjobs", emit, label=label["acjobs"]),
            "jobsets": JobLabelChanges("jobsets", emit, label=label["jobsets"]),
            "leases": LeaseChanges(self.hang, emit, label["leases"], stragglers=self.straggler, history=self.progress),
        }  # fmt: skip

    def active_faults(self) -> list[Fault]:
        """The faults reported and not cleared since, oldest signal first (a new leader re-evaluates them)."""
        return sorted(self._active.values(), key=lambda f: f.signal_time)

    def take_resumed(self) -> list[Resumed]:
        """The first training steps after a restart the hang detector found since the last call (then forgotten)."""
        taken, self.hang.resumed = self.hang.resumed, []
        return taken

    def take_stragglers(self) -> tuple[list[Straggler], list[StragglerEnded], list[Straggler]]:
        """The straggler episodes found and ended since the last call (then forgotten), and those going on now
        (agent.engine.stragglers.StragglerFeed)."""
        leases = self.detectors["leases"]
        assert isinstance(leases, LeaseChanges)
        found, ended = self._stragglers
        ended, leases.ended = leases.ended + ended, []
        self._stragglers = ([], [])
        return found, ended, self.straggler.active()

    def hang_of(self, fault: Fault) -> Hang | None:
        """What the hang detector found when it raised `fault` (None: not a hang fault, or forgotten)."""
        return self.hangs.get(fault_identity(fault))

    def _progress_job(self, namespace: str, name: str) -> tuple[JobRecord | None, list[PodRecord]]:
        """The hang detector's lookup: the job `namespace/name` that opted in with ``fault-agent.io/progress``
        (``lease`` or ``prometheus``; a Volcano Job first, then an AscendJob) and its pods; (None, []) when there is
        none."""
        for kind in JobKind:
            job = self.state.job(kind, namespace, name)
            if job is not None and job.label(PROGRESS_LABEL) in SIGNALS.values():
                return job, self.state.pods_of_job(kind, namespace, name)
        return None, []

    def emit_progress(self, result: DetectResult) -> None:
        """Queue and count what a progress source outside the watches found (agent.engine.progress_prometheus)."""
        self._emit(result, "progress")

    def report_depth(self) -> None:
        """Set fault_agent_queue_depth{queue="faults"} to the items waiting now."""
        if self.metrics is not None:
            self.metrics.queue_depth(FAULT_QUEUE, self.queue.qsize())

    def _emit(self, result: DetectResult, label: str) -> None:
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

    def __call__(self, change: Change[Any]) -> None:
        """The watchers' sink: one change in, its faults queued. Never raises on bad input."""
        now = self.clock.now()
        detector = self.detectors.get(change.source)
        if detector is None:
            return
        if change.type is ChangeType.RESUMED:
            detector.resumed(now)
            return
        if change.type is ChangeType.LISTED:
            detector.listed()
            return
        if detector.needs_nodes and not self.state.listed("nodes"):
            self._held.append(change)
            return
        try:
            detector.changed(change.key, change.new, change.old, now)
        except Exception:  # last resort of the watch consumer: a detector bug must not stop it; logged with the object
            log.exception("detector failed", source=change.source, key=change.key)

    def _release_held(self) -> None:
        """The Nodes are listed: the device-plugin, NodeD, ClusterD and public-fault changes that waited for them
        go through."""
        if self._held and self.state.listed("nodes"):
            held, self._held = self._held, []
            for item in held:
                self(item)

    def _node_chips(self, node: str) -> NodeChips | None:
        """The ConfigMap detectors' Node lookup: the Node's NPU resource and capacity, None when it does not exist.
        Without a nodes watcher (a pipeline fed by hand) every node counts as existing, capacity unknown."""
        if not self.state.expects("nodes"):
            return NodeChips()
        rec = self.state.nodes.get(node)
        return None if rec is None else NodeChips(rec.npu_resource, rec.npu_capacity)

    def _recheck_node_configmaps(self, old: NodeRecord | None, new: NodeRecord | None, now: datetime) -> None:
        """A Node appeared, went, or changed its NPU resource or capacity: its device ConfigMap is read again (its
        chips are checked against the Node); one that appeared or went has its NodeD ConfigMap read again too (a
        NodeD ConfigMap of a node that does not exist is rejected as unknown-node). So are the node's entries in
        ClusterD's ConfigMaps (ClusterDDetector.recheck)."""
        rec = new or old
        if rec is None or not self.state.listed("nodes"):
            return
        if old is None or new is None:  # NodeD's faults are node-wide: only whether the Node exists matters
            noded = self.state.node_info_by_node.get(rec.name)
            if noded is not None:
                self._emit(self.nodeinfo.recheck(noded, now), "noded")
        elif (old.npu_resource, old.npu_capacity) == (new.npu_resource, new.npu_capacity):
            return
        cm = self.state.device_info_by_node.get(rec.name)
        if cm is not None:
            self._emit(self.device.recheck(cm, now), "device-plugin")
        self._emit(self.clusterd.recheck(rec.name, now), "clusterd")

    def _reload_levels(self, cm: ConfigMapRecord | None, now: datetime) -> None:
        """The ``mindx-dl-fault-config`` ConfigMap changed: apply its overrides to every ConfigMap detector and
        re-classify the faults already held (a changed level clears the fault and raises it again). A deleted
        ConfigMap removes the overrides; an unreadable one keeps the previous overrides (and is rejected)."""
        overrides: Mapping[str, FaultLevel] | None = FaultConfig({}, {}, {}, None)
        if cm is not None:
            overrides, rejections = parse_fault_config(cm)
            self._emit(DetectResult(rejections=rejections), source("faultconfig").detector)
        if overrides is None:
            return
        table = self.device.table.with_overrides(overrides)
        rules = table.customization
        log.info("fault levels reloaded", overrides=len(overrides), frequency_rules=len(rules.frequency),
                 duration_rules=len(rules.duration))  # fmt: skip
        self._emit(self.device.set_table(table, now), "device-plugin")
        self._emit(self.clusterd.set_table(table, now), "clusterd")
        # NodeD reports its own FaultLevel per device; the table only decides codes it leaves without one.
        self.nodeinfo.table = table
        self._emit(self.publicfault.set_table(table, now), source("publicfault").detector)

    def apply_releases(self) -> list[tuple[str, str]]:
        """End the isolation of the chips a person released (``fault-agent quarantine release``: the node annotation
        :data:`~agent.core.quarantine.RELEASE_ANNOTATION`), on every replica; the next detector tick sends the held
        clears of those that are healthy. Looks only at nodes with isolated chips. An unreadable release is logged
        once and counted (``input_rejected{reason="bad-release"}``). Returns the (node, chip) released."""
        released: list[tuple[str, str]] = []
        for node in sorted({n for n, _ in self.flapping.isolated}):
            rec = self.state.nodes.get(node)
            text = rec.annotation(RELEASE_ANNOTATION) if rec is not None else None
            if not text:
                continue
            try:
                release = parse_release(text)
            except ValueError as e:
                if self.bad_releases.get(node) != text:  # said once per value
                    self.bad_releases[node] = text
                    log.warning("quarantine release unreadable; ignored", node=node, error=str(e))
                    if self.metrics is not None:
                        self.metrics.input_rejected("Node", "bad-release")
                continue
            self.bad_releases.pop(node, None)
            chips = self.flapping.release_node(node, release.at)
            if chips:
                log.warning("isolated chips released by a person", node=node, chips=[c for _, c in chips],
                            by=release.by, reason=release.reason)  # fmt: skip
                released += chips
        return released

    def tick(self) -> None:
        """Time-based detections: NotReady past the grace, pods stuck terminating, flapping chips released,
        faults past a duration rule's timeout (their clears are emitted before the faults raised again) and jobs
        whose training step stopped for their hang timeout (agent.core.progress.HangDetector). The hang detector, the
        straggler detector and the signal check look only at the jobs touched since the last tick (:attr:`touched`),
        the Leases written and the deadlines passed."""
        now = self.clock.now()
        self.apply_releases()
        if self._pruned_at is None or now - self._pruned_at >= PRUNE_EVERY:
            self.flapping.prune(now)  # counts past their windows: memory bounded by recent faults, not by history
            self._pruned_at = now
        self._emit(self.nodes.tick(now), "node")
        self._emit(self.pods.tick(now, self.nodes.down_nodes()), "pod")
        self._emit(self.publicfault.tick(now), source("publicfault").detector)  # `once` public faults past their hold
        for label, res in (("device-plugin", self.device.tick(now)), ("clusterd", self.clusterd.tick(now))):
            self._emit(DetectResult(cleared=res.cleared), label)
            self._emit(DetectResult(faults=res.faults, rejections=res.rejections), label)
        touched = self.touched.take()
        found, hangs = self.hang.tick(now, self._progress_job, touched)
        if len(self.hangs) > 10000:  # bounded: the event of a hang older than that many others is not needed
            self.hangs.clear()
        for hang in hangs:
            self.hangs[fault_identity(hang.fault)] = hang
            log.warning("training hung: no step within its timeout", job=f"{hang.job.namespace}/{hang.job.name}",
                        step=hang.step, idle_s=round(hang.idle_s, 1), timeout_s=hang.timeout_s,
                        timeout_from=hang.timeout_from)  # fmt: skip
        self._emit(found, "progress")
        news = self.straggler.tick(now, self._progress_job, touched)
        self._stragglers[0].extend(news.found)
        self._stragglers[1].extend(news.ended)
        if len(self._stragglers[0]) + len(self._stragglers[1]) > 10000:  # bounded when nothing takes them
            self._stragglers = ([], [])
        self._emit(DetectResult(rejections=news.rejections), "progress")
        if self.state.expects("leases") and self.state.listed("leases"):
            if self.signals_started:  # only the jobs touched since the last tick, and those whose grace ended
                problems = self.signals.check_touched(touched, self.state, now)
            else:
                self.signals_started = True
                jobs = [j for store in self.state.job_stores() for j in store.values()]
                problems = self.signals.check(
                    jobs, lambda j: self.state.pods_of_job(j.kind, j.namespace, j.name), set(self.state.leases), now
                )
            self._emit(DetectResult(rejections=problems), "progress")
