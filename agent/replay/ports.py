"""The replay's ports: a cluster writer that records intended writes, and an event sink that records events.

What a replayed write does to the replayed state: **nothing**. The recording carries what really happened in the
cluster (pods deleted by a restart, Volcano's new pods, a resubmitted job's new UID, taints), so a replayed
restart Command, pod deletion, taint or resubmission is printed as an intended write, answered as the apiserver
would accept it (``done``; ``dry_run`` under ``policy.dry_run``), and the state moves on only with the recording.
The exceptions are what the agent owns: its job records (agent.core.records: the replayed agent's claims and
persisted steps are applied to the replayed state at once, as the watch of its own ConfigMaps would deliver them;
recorded records are never read), and on objects a node's quarantine taint and hold and an earlier version's job
annotations under ``fault-agent.io/``: the recorded objects carry the *recorded* agent's values, which would be the
replayed agent's output fed back as its input, so :class:`AgentOwned` keeps them as the replay first saw them
(overlaid with what the replayed agent wrote, for nodes).

Reads answer from the replayed state: a job's pods, the pods still there, a job's version and metadata; a
resubmission waits (virtual time) for the recording to show the job with a new UID. The breaker ConfigMap lives in
the writer's memory, as do MindCluster's bookkeeping ConfigMaps (none is watched).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from agent.actions import ActionResult, Outcome, PodRef
from agent.core.clock import Clock
from agent.core.cluster import ConfigMapRecord, JobKind, JobRef, Taint
from agent.core.incidents import ANNOTATION_PREFIX
from agent.core.records import JobStateRecord, record_body
from agent.core.resetconfig import ResetConfigUpdate
from agent.core.resubmission import Leftover, PendingResubmission, ResubmissionDecodeError
from agent.engine.context import durable
from agent.kube.watch import Change, ChangeType
from agent.settings import Settings
from agent.sources.state import ClusterState

DECISION = "decision"
WRITE = "write"
EVENT = "event"


@dataclass(frozen=True, slots=True)
class Output:
    """One line of a replay's output.

    Attributes:
        t: the virtual time it happened at (UTC).
        kind: ``decision`` (the policy's, per fault and job), ``write`` (an intended cluster write) or ``event``.
        job: ``namespace/name`` of the job it is about, None when none (a node event, a taint).
        action: the decision's action, the write's slug (``restart-command``, ``delete-pods``, ``taint-node``…),
            or the event's action ("" when it has none).
        reason: the decision's reason, the write's target and detail, the event's reason or fault.
        event_type: the CloudEvent type for an event (``fault.detected``…), else None.
    """

    t: datetime
    kind: str
    job: str | None
    action: str
    reason: str
    event_type: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` line's object: ``{"t", "kind", "job", "action", "reason", "event_type"}``."""
        return {
            "t": rfc3339_ms(self.t),
            "kind": self.kind,
            "job": self.job,
            "action": self.action,
            "reason": self.reason,
            "event_type": self.event_type,
        }


def rfc3339_ms(t: datetime) -> str:
    """``2026-12-01T13:00:00.123Z``: UTC, milliseconds."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


class Collector:
    """Orders the outputs: by virtual millisecond, and within one millisecond by job (a stable sort: one job's
    lines keep the order they happened in), so that no set's iteration order can reach the output.

    Args:
        emit: receives each output, in that order.
    """

    def __init__(self, emit: Callable[[Output], None]) -> None:
        self.emit = emit
        self._ms: str | None = None
        self._group: list[Output] = []
        self.counts: dict[str, int] = {DECISION: 0, WRITE: 0, EVENT: 0}

    def add(self, out: Output) -> None:
        ms = rfc3339_ms(out.t)
        if ms != self._ms:
            self.flush()
            self._ms = ms
        self._group.append(out)
        self.counts[out.kind] += 1

    def flush(self) -> None:
        """Hand the buffered millisecond's outputs on."""
        group, self._group = self._group, []
        for out in sorted(group, key=lambda o: o.job or ""):
            self.emit(out)


class RecordingSink:
    """:class:`agent.engine.ports.EventSink` that records each event as an :data:`EVENT` output, durable at once."""

    def __init__(self, clock: Clock, collector: Collector) -> None:
        self.clock = clock
        self.collector = collector

    async def submit(self, event: Any) -> Awaitable[None]:
        data = event.get_data() or {}
        subject = str(event.get_subject() or "")
        job = subject if "/" in subject and not subject.startswith("node/") else None
        raw_fault = data.get("fault")
        fault: dict[str, Any] = raw_fault if isinstance(raw_fault, dict) else {}
        reason = str(data.get("reason") or fault.get("reason") or "")
        where = subject if job is None else ""
        if where and reason:
            reason = f"{where}: {reason}"
        elif where:
            reason = where
        self.collector.add(
            Output(self.clock.now(), EVENT, job, str(data.get("action") or ""), reason, event.get_type())
        )
        return durable()


_REMOVED = object()
_JOB_RESOURCES = {JobKind.VOLCANO: "vcjobs", JobKind.ASCEND: "acjobs", JobKind.JOBSET: "jobsets"}


class AgentOwned:
    """The parts of recorded objects the agent itself writes, kept as the *replayed* agent wrote them.

    An earlier version's job annotations under ``fault-agent.io/`` (incident, ledger, actor; the agent writes its
    job records instead now, agent.core.records, which :class:`RecordingWriter` applies itself) and, on nodes, the
    quarantine taint and the hold annotation (both keyed ``policy.taint_key``). In a recording they are the recorded
    agent's output; fed back they would make the replayed agent adopt the recorded agent's incidents, see its claim
    as another replica's, or find its quarantine done. So each object keeps the values it carried when the replay
    first saw it (what a new leader adopts, or migrates from the job's annotations), overlaid on nodes with what the
    replayed agent wrote: written at once to the replayed state (as the apiserver's answer to the write would show),
    and kept over every later recorded version of the object.

    Args:
        taint_key: ``policy.taint_key``.
        echo: applies a changed record to the replayed state (the watchers' sink: state and detectors).
    """

    def __init__(self, taint_key: str, echo: Callable[[Change[Any]], None] | None = None) -> None:
        self.taint_key = taint_key
        self.echo = echo
        self.job_first: dict[str, dict[str, str]] = {}
        self.node_first: dict[str, tuple[Any, Any]] = {}  # node -> (taint dict | None, hold value | None)
        self.node_taint: dict[str, Any] = {}  # node -> taint dict written, or _REMOVED
        self.node_hold: dict[str, Any] = {}  # node -> hold value written, or _REMOVED
        self._echoes = 0

    @staticmethod
    def job_key(kind: JobKind, namespace: str, name: str) -> str:
        return f"{_JOB_RESOURCES[kind]}/{namespace}/{name}"

    def rewrite(self, resource: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """`obj` (a recorded job or node) with the agent-owned parts as the replayed agent has them (a new dict when
        they change; other objects as they are)."""
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return obj
        if resource == "nodes":
            return self._rewrite_node(obj, meta)
        if resource not in _JOB_RESOURCES.values():
            return obj
        raw = meta.get("annotations")
        annotations: dict[str, Any] = raw if isinstance(raw, dict) else {}
        key = f"{resource}/{meta.get('namespace', '')}/{meta.get('name', '')}"
        ours = {k: v for k, v in annotations.items() if k.startswith(ANNOTATION_PREFIX)}
        first = self.job_first.setdefault(key, ours)
        kept = {k: v for k, v in annotations.items() if not k.startswith(ANNOTATION_PREFIX)}
        merged = {**kept, **first}
        if merged == annotations:
            return obj
        return {**obj, "metadata": {**meta, "annotations": merged}}

    def _rewrite_node(self, obj: Mapping[str, Any], meta: dict[str, Any]) -> Mapping[str, Any]:
        name = str(meta.get("name", ""))
        key = self.taint_key
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        taints = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
        raw = meta.get("annotations")
        annotations: dict[str, Any] = raw if isinstance(raw, dict) else {}
        first = self.node_first.get(name)
        if (
            first == (None, None)
            and name not in self.node_taint
            and name not in self.node_hold
            and key not in annotations
            and all(t.get("key") != key for t in taints)
        ):
            return obj  # nothing of the agent's on it, then or now (most nodes): as the rewrite below finds
        recorded_taint = next((t for t in taints if t.get("key") == key), None)
        if first is None:
            first = self.node_first.setdefault(name, (recorded_taint, annotations.get(key)))
        taint = self.node_taint.get(name, first[0])
        hold = self.node_hold.get(name, first[1])
        want_taints = [t for t in taints if t.get("key") != key] + ([taint] if isinstance(taint, dict) else [])
        want_annotations = {k: v for k, v in annotations.items() if k != key}
        if isinstance(hold, str):
            want_annotations[key] = hold
        if want_taints == taints and want_annotations == annotations:
            return obj
        return {**obj, "metadata": {**meta, "annotations": want_annotations}, "spec": {**spec, "taints": want_taints}}

    # ---- the replayed agent's writes

    def wrote_taint(self, state: ClusterState, node: str, value: str | None) -> None:
        """The replayed agent set (`value`) or removed (None) its quarantine taint on `node`."""
        self.node_taint[node] = {"key": self.taint_key, "value": value, "effect": "NoSchedule"} if value else _REMOVED
        rec = state.nodes.get(node)
        if rec is not None:
            kept = tuple(t for t in rec.taints if t.key != self.taint_key)
            new = kept + ((Taint(self.taint_key, value, "NoSchedule"),) if value else ())
            self._apply("nodes", node, rec, replace(rec, taints=new))

    def wrote_hold(self, state: ClusterState, node: str, annotations: Mapping[str, str | None]) -> None:
        """The replayed agent wrote the quarantine hold annotation(s) on `node` (None removes one)."""
        if self.taint_key not in annotations:
            return
        value = annotations[self.taint_key]
        self.node_hold[node] = value if value is not None else _REMOVED
        rec = state.nodes.get(node)
        if rec is not None:
            kept = tuple((k, v) for k, v in rec.annotations if k != self.taint_key)
            new = kept + (((self.taint_key, value),) if value is not None else ())
            self._apply("nodes", node, rec, replace(rec, annotations=new))

    def _apply(self, source: str, key: str, old: Any, new: Any) -> None:
        if self.echo is None or new == old:
            return
        self._echoes += 1
        new = replace(new, resource_version=f"{old.resource_version}+replay.{self._echoes}")
        self.echo(Change(ChangeType.MODIFIED, source, key, new, old, False, 0.0))


class RecordingWriter:
    """:class:`agent.engine.ports.ClusterWriterPort` for a replay (see the module docstring).

    Args:
        settings: ``policy.dry_run`` decides the outcome of the writes (``dry_run`` instead of ``done``).
        state: the replayed state the reads answer from.
        clock: the virtual clock (the writes' times).
        collector: where the :data:`WRITE` outputs go.
        owned: the agent-owned parts of nodes (:class:`AgentOwned`): taints and
            holds are written there (not in dry-run: nothing is written).
    """

    def __init__(
        self, settings: Settings, state: ClusterState, clock: Clock, collector: Collector, owned: AgentOwned
    ) -> None:
        self._dry_run = settings.policy.dry_run
        self.state = state
        self.clock = clock
        self.collector = collector
        self.owned = owned
        self.incident_jobs: dict[str, str] = {}  # incident id -> ns/name (the pod writes name their incident)
        self.breaker: dict[str, str] | None = None
        self.configmaps: dict[tuple[str, str], dict[str, str]] = {}  # MindCluster's bookkeeping (not watched)
        self.records_namespace = settings.leader.namespace
        self._record_versions = 0

    @property
    def dry_run(self) -> bool:
        return self._dry_run

    def _outcome(self) -> Outcome:
        return Outcome.DRY_RUN if self._dry_run else Outcome.DONE

    def _write(self, action: str, target: str, job: str | None, detail: str = "", **extra: Any) -> ActionResult:
        reason = f"{target} {detail}".strip()
        self.collector.add(Output(self.clock.now(), WRITE, job, action, reason))
        return ActionResult(action, target, self._outcome(), detail, **extra)

    def _job_of_pod(self, pod: PodRef, incident: str) -> str | None:
        if incident in self.incident_jobs:
            return self.incident_jobs[incident]
        rec = self.state.pods.get(f"{pod.namespace}/{pod.name}")
        return f"{rec.job.namespace}/{rec.job.name}" if rec is not None and rec.job is not None else None

    # ---- reads

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        pods = self.state.pods_of_job(job.kind, job.namespace, job.name)
        found = {p.uid: PodRef(p.namespace, p.name, p.uid) for p in pods if p.deletion_timestamp is None}
        return sorted(found.values(), key=lambda p: p.name)

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        left = []
        for pod in pods:
            rec = self.state.pods.get(f"{pod.namespace}/{pod.name}")
            if rec is not None and (not pod.uid or rec.uid == pod.uid):
                left.append(pod)
        return left

    def _job(self, job: JobRef) -> Any:
        rec = self.state.job(job.kind, job.namespace, job.name)
        return rec if rec is not None and (not job.uid or rec.uid == job.uid) else None

    async def job_version(self, job: JobRef) -> str | None:
        rec = self._job(job)
        return None if rec is None else rec.version

    async def job_meta(self, job: JobRef) -> tuple[str, dict[str, str]] | None:
        rec = self._job(job)
        return None if rec is None else (rec.resource_version, dict(rec.annotations))

    async def read_record(self, job: JobRef) -> JobStateRecord | None:
        return self.state.job_record(job.uid)

    async def read_breaker(self, settings: Settings) -> dict[str, str] | None:
        return None if self.breaker is None else dict(self.breaker)

    # ---- writes

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        self.incident_jobs[incident] = f"{job.namespace}/{job.name}"
        return self._write("restart-command", f"Job/{job.namespace}/{job.name}", f"{job.namespace}/{job.name}", reason)

    async def reset_rings_config(self, namespace: str, job_name: str, *, incident: str) -> ActionResult:
        return self._write("reset-rings", f"ConfigMap/{namespace}/rings-config-{job_name}", f"{namespace}/{job_name}")

    async def delete_pod(self, pod: PodRef, *, incident: str, grace_seconds: int | None) -> ActionResult:
        how = "grace=default" if grace_seconds is None else f"grace={grace_seconds}"
        return self._write("delete-pod", f"Pod/{pod.namespace}/{pod.name}", self._job_of_pod(pod, incident), how)

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        how = "grace=default" if grace_seconds is None else f"grace={grace_seconds}"
        names = ",".join(p.name for p in pods)
        job = self.incident_jobs.get(incident) or (self._job_of_pod(pods[0], incident) if pods else None)
        return self._write("delete-pods", target or "pods", job, f"{how} [{names}]")

    def _record_write(self, job: JobRef, data: Mapping[str, str], *, merge: bool) -> None:
        """Apply the replayed agent's write of `job`'s record to the replayed state (as its watch would)."""
        if self._dry_run:
            return
        key = f"{self.records_namespace}/fault-agent-job-{job.uid}"
        old = self.state.job_records.get(key)
        merged = {**(old.data if old is not None and merge else {}), **data}
        self._record_versions += 1
        body = record_body(self.records_namespace, job.uid, job.kind, job.namespace, job.name, merged)
        labels = tuple(sorted(body["metadata"]["labels"].items()))
        new = ConfigMapRecord(self.records_namespace, key.split("/", 1)[1], f"record-{job.uid}",
                              f"replay.{self._record_versions}", labels, merged)  # fmt: skip
        kind = ChangeType.ADDED if old is None else ChangeType.MODIFIED
        self.state.apply(Change(kind, "jobrecords", key, new, old, False, 0.0))

    async def claim_record(
        self, job: JobRef, data: Mapping[str, str], *, resource_version: str, incident: str
    ) -> ActionResult:
        self.incident_jobs[incident] = f"{job.namespace}/{job.name}"
        self._record_write(job, data, merge=False)
        name = f"{job.namespace}/{job.name}"
        return self._write("claim-record", f"{job.kind.api_kind}/{name}", name, f"incident={incident}")

    async def write_record(self, job: JobRef, data: Mapping[str, str], *, incident: str) -> ActionResult:
        self._record_write(job, data, merge=True)
        return self._write(
            "write-record", f"{job.kind.api_kind}/{job.namespace}/{job.name}", f"{job.namespace}/{job.name}",
            f"incident={incident}",
        )  # fmt: skip

    async def delete_record(self, job_uid: str, *, incident: str = "") -> ActionResult:
        key = f"{self.records_namespace}/fault-agent-job-{job_uid}"
        old = self.state.job_records.get(key)
        if not self._dry_run and old is not None:
            self.state.apply(Change(ChangeType.DELETED, "jobrecords", key, None, old, False, 0.0))
        return self._write("delete-record", f"ConfigMap/{key}", None, "")

    async def resubmit_job(
        self, job: JobRef, *, incident: str, count: int, wait_s: float = 30.0, poll_s: float = 0.2
    ) -> ActionResult:
        name = f"{job.namespace}/{job.name}"
        result = self._write("resubmit-job", f"{job.kind.api_kind}/{name}", name, f"count={count}")
        if self._dry_run:
            return result
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:  # the recording shows the job made again (a new UID) when it really was
            rec = self.state.job(job.kind, job.namespace, job.name)
            if rec is not None and rec.uid != job.uid:
                return ActionResult("resubmit", name, Outcome.DONE, "resubmitted", uid=rec.uid, name=job.name)
            if loop.time() >= deadline:
                return ActionResult("resubmit", name, Outcome.FAILED, f"the recording shows no new job in {wait_s:g} s")
            await asyncio.sleep(poll_s)

    async def pending_resubmissions(self) -> tuple[list[PendingResubmission], list[ResubmissionDecodeError]]:
        # a replay resubmits only through resubmit_job, which the recording finishes: no record is ever left
        return [], []

    async def finish_resubmission(self, pending: PendingResubmission) -> tuple[Leftover, ActionResult, dict[str, str]]:
        return Leftover.OLD_EXISTS, ActionResult("resubmit-recover", str(pending), Outcome.ALREADY_DONE), {}

    async def forget_resubmission(self, from_uid: str, *, incident: str) -> ActionResult:
        return ActionResult("resubmit-forget", from_uid, Outcome.ALREADY_DONE)

    async def annotate_node(
        self, node: str, annotations: Mapping[str, str | None], *, incident: str = ""
    ) -> ActionResult:
        keys = ",".join(sorted(annotations))
        result = self._write("annotate-node", f"Node/{node}", None, keys)
        if not self._dry_run:
            self.owned.wrote_hold(self.state, node, annotations)
        return result

    async def annotate_pod(self, pod: PodRef, annotations: Mapping[str, str], *, incident: str) -> ActionResult:
        marks = ",".join(f"{k}={v}" for k, v in sorted(annotations.items()))
        return self._write("annotate-pod", str(pod), self._job_of_pod(pod, incident), marks)

    async def taint_node(self, node: str, *, key: str, value: str, incident: str = "") -> ActionResult:
        result = self._write("taint-node", f"Node/{node}", None, f"{key}={value}:NoSchedule")
        if not self._dry_run and key == self.owned.taint_key:
            self.owned.wrote_taint(self.state, node, value)
        return result

    async def untaint_node(self, node: str, *, key: str, incident: str = "") -> ActionResult:
        result = self._write("untaint-node", f"Node/{node}", None, key)
        if not self._dry_run and key == self.owned.taint_key:
            self.owned.wrote_taint(self.state, node, None)
        return result

    async def update_configmap_keys(
        self,
        namespace: str,
        name: str,
        update: Callable[[Mapping[str, str]], Mapping[str, str]],
        *,
        incident: str,
        tries: int = 5,
        annotations: Mapping[str, str] | None = None,
    ) -> ActionResult:
        """MindCluster's bookkeeping ConfigMaps: not watched, so they live here (like the breaker's); the output
        names the keys set, and the job of each restart the write carries (a coalesced write, agent.engine.
        bookkeeping, names its incidents joined by commas: their jobs are joined so too; a round that carries
        only jobs' remain-retry-times entries names those jobs' scheduler ids)."""
        stored = self.configmaps.get((namespace, name), {})
        keys = dict(update(stored))
        # a round of jobs' remain-retry-times entries only names their scheduler job ids (namespace/name-uid)
        jobs = [j for j in (self.incident_jobs.get(i) or (i if "/" in i else None) for i in incident.split(",")) if j]
        job = ",".join(jobs) if jobs else None
        result = self._write("update-configmap", f"ConfigMap/{namespace}/{name}", job, ",".join(sorted(keys)))
        if not self._dry_run:
            self.configmaps[(namespace, name)] = {**stored, **keys}
        return result

    async def update_reset_config(self, update: ResetConfigUpdate, *, incident: str) -> ActionResult:
        """The job's ``reset-config-<job>`` (not watched): recorded and answered as written (the live writer's 404
        for a job submitted without one cannot be known here)."""
        job = f"{update.namespace}/{update.job_name}"
        return self._write(f"reset-config-{update.change}", f"ConfigMap/{update.namespace}/{update.name}", job)

    async def write_breaker(self, settings: Settings, data: dict[str, str]) -> bool:
        self._write("write-breaker", f"ConfigMap/{settings.leader.namespace}/{settings.policy.breaker_configmap}",
                    None, ",".join(f"{k}={v}" for k, v in sorted(data.items())))  # fmt: skip
        if self._dry_run:
            return False
        self.breaker = dict(data)
        return True
