"""Builders of the agent's records and faults for tests: keyword-only, with defaults, so a test names only what it
is about. Not a test module.

Defaults describe one healthy, opted-in Volcano job ``ns/job`` (UID ``uid-job``, Running, version "0", force mode,
max retry 3, minAvailable 2) with Running, Ready pods on node ``n1``, and a SeparateNPU chip fault on chip 0 of
that node read from its device-plugin ConfigMap, all at :data:`T0`. Every builder takes the record's own field
names; ``label``/``labels`` and ``annotations`` take plain dicts.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from agent.core.cluster import (
    ConfigMapRecord,
    FaultScheduling,
    JobKind,
    JobRecord,
    JobRef,
    NodeCondition,
    NodeRecord,
    PodRecord,
    Taint,
)
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    Incident,
    Phase,
    encode_incident,
    encode_ledger,
    make_incident_id,
)
from agent.core.policy import RetryLedger
from agent.kube.watch import Change, ChangeType
from agent.settings import Settings
from agent.sinks.events import Message, Stream
from agent.sources.state import ClusterState

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
"""The tests' fixed "now": never the wall clock (the unit tier also runs under faketime)."""

SETTINGS = Settings.model_validate({"kafka": {"enabled": False}})
"""The agent's default settings with Kafka off (events go to the test's sink only)."""

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
"""tests/fixtures: the API objects and ConfigMaps the tests read."""

FORCE = (("fault-scheduling", "force"),)
"""The labels of a job opted in to rescheduling in force mode."""


def _pairs(values: Mapping[str, str] | tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(values.items())) if isinstance(values, Mapping) else tuple(values)


def job(
    name: str = "job",
    *,
    kind: JobKind = JobKind.VOLCANO,
    namespace: str = "ns",
    uid: str | None = None,
    resource_version: str = "1",
    generation: int = 1,
    labels: Mapping[str, str] | tuple[tuple[str, str], ...] = FORCE,
    fault_scheduling: FaultScheduling | None = None,
    fault_retry_times: int | None = None,
    pod_rescheduling: bool = False,
    sub_healthy_strategy: str = "ignore",
    max_retry: int = 3,
    min_available: int | None = 2,
    phase: str = "Running",
    version: str = "0",
    retry_count: int = 0,
    annotations: Mapping[str, str] | tuple[tuple[str, str], ...] = (),
    created_at: datetime | None = T0,
    restarts_on_eviction: bool = False,
) -> JobRecord:
    """A :class:`JobRecord` (uid ``uid-<name>`` unless given; fault_scheduling follows the ``fault-scheduling``
    label unless given: force, grace, or off; `restarts_on_eviction`: its policies restart it on a deleted pod)."""
    pairs = _pairs(labels)
    if fault_scheduling is None:
        label = dict(pairs).get("fault-scheduling", "")
        fault_scheduling = {"force": FaultScheduling.FORCE, "grace": FaultScheduling.GRACE}.get(
            label, FaultScheduling.OFF
        )
    return JobRecord(
        kind=kind,
        namespace=namespace,
        name=name,
        uid=uid if uid is not None else f"uid-{name}",
        resource_version=resource_version,
        generation=generation,
        labels=pairs,
        job_labels=pairs,
        fault_scheduling=fault_scheduling,
        fault_retry_times=fault_retry_times,
        pod_rescheduling=pod_rescheduling,
        sub_healthy_strategy=sub_healthy_strategy,
        max_retry=max_retry,
        min_available=min_available,
        phase=phase,
        version=version,
        retry_count=retry_count,
        annotations=_pairs(annotations),
        created_at=created_at,
        restarts_on_eviction=restarts_on_eviction,
    )


def pod(
    name: str = "job-0",
    *,
    namespace: str = "ns",
    uid: str | None = None,
    resource_version: str = "1",
    node: str = "n1",
    phase: str = "Running",
    ready: bool = True,
    job: str | JobRef | None = "job",
    job_kind: JobKind = JobKind.VOLCANO,
    chips: tuple[str, ...] = ("Ascend910-0",),
    rank: int | None = 0,
    terminations: tuple[Any, ...] = (),
    deletion_timestamp: datetime | None = None,
    disruption: str = "",
    status_reason: str = "",
    created_at: datetime | None = T0,
    restart_policy: str = "",
    fault_type: str = "",
) -> PodRecord:
    """A :class:`PodRecord` (uid ``uid-<name>`` unless given) of job `job` in its namespace (a name, a
    :class:`JobRef`, or None for a pod no job owns)."""
    link = JobRef(job_kind, namespace, job) if isinstance(job, str) else job
    return PodRecord(
        namespace=namespace,
        name=name,
        uid=uid if uid is not None else f"uid-{name}",
        resource_version=resource_version,
        node=node,
        phase=phase,
        ready=ready,
        job=link,
        chips=chips,
        rank=rank,
        terminations=terminations,
        deletion_timestamp=deletion_timestamp,
        disruption=disruption,
        status_reason=status_reason,
        created_at=created_at,
        restart_policy=restart_policy,
        fault_type=fault_type,
    )


def node(
    name: str = "n1",
    *,
    uid: str | None = None,
    resource_version: str = "1",
    ready: str = "True",
    conditions: tuple[NodeCondition, ...] | None = None,
    taints: tuple[Taint, ...] = (),
    labels: Mapping[str, str] | tuple[tuple[str, str], ...] = (),
    unschedulable: bool = False,
    npu_allocatable: int | None = 8,
    annotations: Mapping[str, str] | tuple[tuple[str, str], ...] = (),
    npu_capacity: int | None = None,
    npu_resource: str = "",
    at: datetime = T0,
) -> NodeRecord:
    """A :class:`NodeRecord` (uid ``uid-<name>`` unless given) whose Ready condition is `ready` since `at`,
    unless `conditions` are given."""
    return NodeRecord(
        name=name,
        uid=uid if uid is not None else f"uid-{name}",
        resource_version=resource_version,
        conditions=conditions if conditions is not None else (NodeCondition("Ready", ready, "", at),),
        taints=taints,
        labels=_pairs(labels),
        unschedulable=unschedulable,
        npu_allocatable=npu_allocatable,
        annotations=_pairs(annotations),
        npu_capacity=npu_capacity,
        npu_resource=npu_resource,
    )


def configmap(
    name: str,
    data: Mapping[str, str] | None = None,
    *,
    namespace: str = "kube-system",
    uid: str | None = None,
    resource_version: str = "1",
    labels: Mapping[str, str] | tuple[tuple[str, str], ...] = (),
) -> ConfigMapRecord:
    """A :class:`ConfigMapRecord` (uid ``uid-<name>`` unless given) holding `data` as-is (a device-info, NodeD,
    public-fault, ClusterD or job-record ConfigMap: the detectors parse the strings)."""
    return ConfigMapRecord(
        namespace=namespace,
        name=name,
        uid=uid if uid is not None else f"uid-{name}",
        resource_version=resource_version,
        labels=_pairs(labels),
        data=dict(data or {}),
    )


def fault(
    *,
    kind: FaultKind = FaultKind.CHIP,
    level: FaultLevel = FaultLevel.SEPARATE,
    node: str = "n1",
    chips: tuple[str, ...] = ("Ascend910-0",),
    codes: tuple[str, ...] = ("80E01801",),
    at: datetime = T0,
    observed_at: datetime | None = None,
    source: ObjectRef | None = None,
    reason: str = "CardUnhealthy",
    check_code_ok: bool = True,
    pod: ObjectRef | None = None,
) -> Fault:
    """A :class:`Fault` signalled at `at` and observed then (unless `observed_at`), from the node's device-plugin
    ConfigMap ``kube-system/mindx-dl-deviceinfo-<node>`` unless `source` is given."""
    return Fault(
        kind=kind,
        level=level,
        node=node,
        chips=chips,
        codes=codes,
        signal_time=at,
        observed_at=observed_at if observed_at is not None else at,
        source=source if source is not None else ObjectRef("ConfigMap", "kube-system", f"mindx-dl-deviceinfo-{node}"),
        reason=reason,
        check_code_ok=check_code_ok,
        pod=pod,
    )


def change(source: str, key: str, new: Any, old: Any = None, *, type: ChangeType = ChangeType.MODIFIED) -> Change[Any]:
    """A watch change of `source` for `key`, as the watch engine hands it to the state (its receive time is
    never asserted on)."""
    return Change(type, source, key, new, old, False, time.time())


def one_job_state(
    now: datetime = T0,
    *,
    version: str = "0",
    annotations: Mapping[str, str] | tuple[tuple[str, str], ...] = (),
    phase: str = "Running",
    restarts_on_eviction: bool = False,
    pod_versions: Sequence[str] | None = None,
    pods_ready: bool = True,
) -> ClusterState:
    """A cluster state with node ``n1`` and Volcano job ``ns/job`` (force mode, job version `version` in `phase`,
    the given annotations, `restarts_on_eviction` as given) of two Running pods ``job-0``/``job-1`` (Ready unless
    `pods_ready` is False) on chips Ascend910-0 and -1, all created at `now`. `pod_versions`: the pods' links carry
    the job's UID and these ``volcano.sh/job-version`` values, one a pod (as many pods as values)."""
    state = ClusterState()
    state.apply(change("nodes", "n1", node(at=now)))
    made_job = job(
        created_at=now, version=version, annotations=annotations, phase=phase, restarts_on_eviction=restarts_on_eviction
    )
    state.apply(change("vcjobs", "ns/job", made_job))
    links: list[str | JobRef] = ["job", "job"]
    if pod_versions is not None:
        links = [JobRef(JobKind.VOLCANO, "ns", "job", "uid-job", v) for v in pod_versions]
    for i, link in enumerate(links):
        chips = (f"Ascend910-{i}",)
        made = pod(f"job-{i}", uid=f"uid-pod-{i}", ready=pods_ready, job=link, chips=chips, rank=i, created_at=now)
        state.apply(change("pods", f"ns/job-{i}", made))
    return state


RESTART_AT = T0 + timedelta(seconds=1)
"""When the restart of :func:`left_incident` went out (by default), a second after its fault."""

OLD_PODS = ("job-0", "job-1")
"""The pods of :func:`left_restart_state`'s job, as the previous leader's restart found them."""


def left_incident(
    action: str = "restart-job",
    mode: str = "force",
    *,
    generation: str = "0",
    pods: tuple[str, ...] = (),
    at: datetime = T0,
    restart_at: datetime | None = RESTART_AT,
) -> Incident:
    """The incident a previous leader wrote for job ``ns/job``: opened at generation `generation` by :func:`fault`
    at `at`, acting at `at` (`action` in `mode`, reason "r", naming `pods`), restarting at `restart_at` (None: left
    acting)."""
    incident = Incident(
        id=make_incident_id("job", "uid-job", generation, 1), job_uid="uid-job", kind="vcjob", namespace="ns",
        name="job", generation=generation, phase=Phase.DETECTED, first_fault_at=at, steps=((Phase.DETECTED, at),),
    ).join(fault(at=at))  # fmt: skip
    incident = incident.move(Phase.ACTING, at, action=action, mode=mode, reason="r", pods=pods)
    if restart_at is None:
        return incident
    return incident.move(Phase.RESTARTING, restart_at, restart_at=restart_at)


def left_restart_state(
    incident: Incident,
    *,
    version: str,
    labels: Mapping[str, str] | None = None,
    terminating: tuple[str, ...] = OLD_PODS,
    recorded: bool = True,
    pod_version: str | None = None,
    restarts_on_eviction: bool = False,
) -> ClusterState:
    """The cluster as a previous leader left a restart: node ``n1`` and job ``ns/job`` (generation `version` now,
    one retry, `labels` (force mode unless given), pod rescheduling on when its label is, `restarts_on_eviction`)
    carrying `incident` and a ledger of one restart naming :data:`OLD_PODS` as the agent's (unless not `recorded`:
    the claim's ledger, before the restart); those pods (created a minute before :data:`T0`; their links carry
    job-version `pod_version` when given) still there, the `terminating` ones being deleted since
    :data:`RESTART_AT` (Volcano honours their grace period; on a dead node that never ends)."""
    labels = dict(FORCE) if labels is None else labels
    stopped = tuple(f"uid-{n}" for n in OLD_PODS) if recorded else ()
    ledger = RetryLedger(restarts_used=1, incidents=1, agent_pod_uids=stopped)
    state = ClusterState()
    state.apply(change("nodes", "n1", node("n1")))
    made_job = job(
        labels=labels, version=version, retry_count=1, pod_rescheduling=labels.get("pod-rescheduling") == "on",
        annotations=((INCIDENT_ANNOTATION, encode_incident(incident)), (LEDGER_ANNOTATION, encode_ledger(ledger))),
        restarts_on_eviction=restarts_on_eviction,
    )  # fmt: skip
    state.apply(change("vcjobs", "ns/job", made_job))
    link: str | JobRef = "job" if pod_version is None else JobRef(JobKind.VOLCANO, "ns", "job", "uid-job", pod_version)
    for i, name in enumerate(OLD_PODS):
        gone = RESTART_AT if name in terminating else None
        made = pod(name, rank=i, job=link, deletion_timestamp=gone, created_at=T0 - timedelta(minutes=1))
        state.apply(change("pods", f"ns/{name}", made))
    return state


def left_acting_state(now: datetime = T0, *, pods_ready: bool = True) -> ClusterState:
    """:func:`one_job_state` whose job carries an incident a previous leader left ``acting`` (a force restart of
    :func:`fault` decided at `now`, one restart used) in its annotations; the pods Ready unless `pods_ready` is
    False."""
    annotations = (
        (INCIDENT_ANNOTATION, encode_incident(left_incident(at=now, restart_at=None))),
        (LEDGER_ANNOTATION, encode_ledger(RetryLedger(restarts_used=1, incidents=1))),
    )
    return one_job_state(now, annotations=annotations, pods_ready=pods_ready)


def outbox_message(i: int, *, size: int = 100) -> Message:
    """The `i`-th outbox message of a test (agent.sinks.outbox): event id ``id-<i>``, keyed by one of seven jobs,
    alternating between the faults and recoveries streams, its value padded to `size` bytes."""
    return Message(
        stream=Stream.FAULTS if i % 2 else Stream.RECOVERIES,
        key=f"job-{i % 7}".encode(),
        value=(f'{{"n":{i}}}'.encode()).ljust(size, b" "),
        headers=(("content-type", b"application/cloudevents+json"), ("ce_id", f"id-{i}".encode())),
        event_id=f"id-{i}",
        event_type="io.faultagent.fault.detected.v1",
    )


def pod_body(
    name: str,
    *,
    namespace: str = "ns",
    uid: str | None = None,
    resource_version: str | None = None,
    node: str = "n1",
    phase: str = "Running",
    labels: Mapping[str, str] | None = None,
    deletion_timestamp: str | None = None,
) -> dict[str, Any]:
    """A pod as the apiserver serves it (JSON object), uid ``uid-<name>`` unless given; only the metadata fields
    given (resourceVersion, labels, deletionTimestamp) are set."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid if uid is not None else f"uid-{name}"}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    if labels is not None:
        meta["labels"] = dict(labels)
    if deletion_timestamp is not None:
        meta["deletionTimestamp"] = deletion_timestamp
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


def seed_vcjob_body() -> dict[str, Any]:
    """The Volcano Job of tests/fixtures/seed-vcjob.yaml as the apiserver serves it (uid ``u-1``, resourceVersion
    100, created 2026-01-01T00:00:00Z), Running at version 2 after one retry, with the agent's incident annotation
    ``i-1`` and one other annotation."""
    doc = next(d for d in yaml.safe_load_all((FIXTURES / "seed-vcjob.yaml").read_text()) if d and d["kind"] == "Job")
    body = copy.deepcopy(doc)
    body["metadata"].setdefault("uid", "u-1")
    body["metadata"].setdefault("resourceVersion", "100")
    body["metadata"].setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
    body["metadata"]["annotations"] = {"fault-agent.io/incident": "i-1", "other": "x"}
    body["status"] = {"state": {"phase": "Running"}, "version": 2, "retryCount": 1}
    return body
