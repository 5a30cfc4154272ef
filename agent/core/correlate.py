"""Correlation: which training jobs (and which of their pods) a fault hits. Pure: no I/O, no clock reads.

Rules (shared/DOMAIN.md §1.4, §2):
- chip / network fault: the pods on the fault's node whose chip allocation annotation (e.g.
  ``huawei.com/Ascend910: Ascend910-0,Ascend910-1``) names one of the fault's chips;
- chip / network fault whose devices DRA allocated (agent.core.dra): the pods reserving the ResourceClaims that
  hold those devices (``devices`` passed in); a device named by UUID or PCI address that no ResourceSlice publishes
  (a device plugin assigned it, and which pod holds which GPU is not visible): every job pod on the node;
- node fault: every job pod on the node; one that names its devices (``Fault.devices``, e.g. NVSentinel's
  ``GPU:<uuid>``), each of them allocated through DRA: the pods whose claims hold them;
- business failure / disruption, and any fault naming its pod (``Fault.pod``: ClusterD's ``fault-type`` pod label,
  agent.core.detect.pods): the fault's own pod.
Pods link to jobs through the Volcano or AscendJob labels or the controller ownerReference, already read into
`PodRecord.job` by the sources. Only jobs labelled ``fault-scheduling=force|grace`` are *actionable*; the others
are still returned so the agent can record and publish the fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.core.cluster import JobKey, JobRecord, PodRecord
from agent.core.devices import device_refs
from agent.core.dra import DeviceAllocations
from agent.core.faults import Fault, FaultKind

"""(kind, namespace, name) of a job, the key of the job index passed to :func:`correlate`."""

_FINISHED_PHASES = frozenset({"Succeeded"})


def job_key(job: JobRecord) -> JobKey:
    """The index key of a job record: (kind, namespace, name)."""
    return (job.kind, job.namespace, job.name)


@dataclass(frozen=True, slots=True)
class JobHit:
    """One job hit by a fault.

    Attributes:
        job: the job record.
        pods: the job's pods the fault touches (for node faults every job pod on the node), sorted by name.
        actionable: True when the job opted in (``fault-scheduling`` force, grace, external-force, external-grace).
    """

    job: JobRecord
    pods: tuple[PodRecord, ...]
    actionable: bool

    @property
    def ranks(self) -> tuple[int, ...]:
        """The `hccl/rankIndex` of the hit pods that carry one, sorted."""
        return tuple(sorted(p.rank for p in self.pods if p.rank is not None))


@dataclass(frozen=True, slots=True)
class Correlation:
    """What a fault hits.

    Attributes:
        hits: one entry per job, sorted by (namespace, name).
        orphan_pods: hit pods that belong to no known job (not a job pod, or the job is not in the index
            yet); recorded only.
    """

    hits: tuple[JobHit, ...]
    orphan_pods: tuple[PodRecord, ...]

    @property
    def actionable(self) -> tuple[JobHit, ...]:
        """The hits whose job opted in to fault scheduling."""
        return tuple(h for h in self.hits if h.actionable)


def pods_hit(fault: Fault, pods: Iterable[PodRecord], devices: DeviceAllocations | None = None) -> list[PodRecord]:
    """The pods among `pods` that `fault` touches, per the rules in the module docstring.

    Args:
        fault: the fault; `fault.node` and `fault.chips` matter for chip/network/node faults, `fault.pod`
            for business failures and disruptions.
        pods: candidate pods, typically the state index's pods on `fault.node` (any pods may be passed;
            pods on other nodes are ignored for hardware faults).
        devices: the DRA join of ResourceSlices and ResourceClaims (None or empty: DRA not in use).

    Returns the matching pods, finished (Succeeded) pods excluded. A business fault or disruption without
    `fault.pod` hits nothing; any fault that names a pod (such as a hot switch's ``HotSwitchDelete``,
    agent.core.detect.pods) hits that pod only.
    """
    if fault.kind in (FaultKind.BUSINESS, FaultKind.DISRUPTION) or fault.pod is not None:
        ref = fault.pod
        if ref is None:
            return []
        return [
            p for p in pods if p.namespace == ref.namespace and p.name == ref.name and (not ref.uid or p.uid == ref.uid)
        ]
    if not fault.node:
        return []
    on_node = [p for p in pods if p.node == fault.node and p.phase not in _FINISHED_PHASES]
    refs = device_refs(fault)
    if fault.kind is FaultKind.NODE:
        # a node-wide report that names its GPUs (NVSentinel's conditions): by claim when DRA knows each of them
        holding = devices.pods_holding(refs) if devices and refs else None
        if holding is None or holding.unresolved:
            return on_node
        return [p for p in on_node if DeviceAllocations.holds(holding.pods, p.namespace, p.name, p.uid)]
    if devices:
        holding = devices.pods_holding(refs)
        held, unresolved = holding.pods, holding.unresolved
    else:
        held, unresolved = frozenset(), refs
    if any(ref.vendor_scoped for ref in unresolved):
        return on_node  # a GPU no slice publishes: a device plugin's, whose holder the agent cannot see
    wanted = set(fault.chips) if not devices else {ref.name for ref in unresolved}
    return [
        p for p in on_node if DeviceAllocations.holds(held, p.namespace, p.name, p.uid) or wanted.intersection(p.chips)
    ]


def correlate(
    fault: Fault,
    pods: Iterable[PodRecord],
    jobs: Mapping[JobKey, JobRecord],
    devices: DeviceAllocations | None = None,
) -> Correlation:
    """Map `fault` to the jobs it hits.

    Args:
        fault: a detected fault.
        pods: candidate pods (see :func:`pods_hit`).
        jobs: the job index, keyed by :data:`JobKey`.
        devices: the DRA join (see :func:`pods_hit`); None: DRA not in use.

    Returns a :class:`Correlation`. A pod whose job link names a UID different from the indexed job's UID
    (a job deleted and recreated under the same name) is treated as an orphan, never as the new job's pod.
    Pure; never raises on well-typed input.
    """
    grouped: dict[JobKey, list[PodRecord]] = {}
    orphans: list[PodRecord] = []
    for pod in pods_hit(fault, pods, devices):
        link = pod.job
        if link is None:
            orphans.append(pod)
            continue
        key: JobKey = (link.kind, link.namespace or pod.namespace, link.name)
        job = jobs.get(key)
        if job is None or (link.uid and job.uid and link.uid != job.uid):
            orphans.append(pod)
            continue
        grouped.setdefault(key, []).append(pod)
    hits = [
        JobHit(
            job=jobs[key],
            pods=tuple(sorted(group, key=lambda p: p.name)),
            actionable=jobs[key].fault_scheduling.opted_in,
        )
        for key, group in grouped.items()
    ]
    hits.sort(key=lambda h: (h.job.namespace, h.job.name))
    orphans.sort(key=lambda p: (p.namespace, p.name))
    return Correlation(hits=tuple(hits), orphan_pods=tuple(orphans))
