"""Read-only views of the state cache in the shapes the core and the writer take."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

from agent.actions import PodRef
from agent.core.cluster import JobKey, JobRecord, JobRef, PodRecord
from agent.core.faults import Fault, ObjectRef
from agent.core.records import JobStateRecord, from_legacy_annotations
from agent.sources.state import ClusterState


class StateJobs(Mapping[JobKey, JobRecord]):
    """The state's two job stores seen as the correlate module's job index."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state

    def __getitem__(self, key: JobKey) -> JobRecord:
        job = self._state.job(*key)
        if job is None:
            raise KeyError(key)
        return with_podgroup_strategy(job, self._state.podgroup_strategy(job))

    def __iter__(self) -> Iterator[JobKey]:
        for store in self._state.job_stores():
            for job in store.values():
                yield (job.kind, job.namespace, job.name)

    def __len__(self) -> int:
        return sum(len(store) for store in self._state.job_stores())


def with_podgroup_strategy(job: JobRecord, podgroup_strategy: str | None) -> JobRecord:
    """`job` with its PodGroup's ``ProcessRecoverStrategy`` when the job carries none itself.

    MindCluster reads the annotation from the PodGroup (``component/ascend-for-volcano/internal/rescheduling/
    job.go`` ``isDealFaultByExternal``), which the job controller copies from the job when it creates it and a
    recovery platform may set later (ClusterD ``pkg/application/recover/fault_recover_platform_plugin.go``); the
    strategy counts when present on either. Pure.
    """
    if job.process_recover_strategy is not None or podgroup_strategy is None:
        return job
    return replace(job, process_recover_strategy=podgroup_strategy, process_recover_strategy_from="PodGroup")


def pods_for(state: ClusterState, fault: Fault) -> list[PodRecord]:
    """The pods `fault` may hit: every pod on its node, or its own pod for a pod fault."""
    if fault.node:
        return state.pods_on_node(fault.node)
    if fault.pod is None:
        return []
    pod = state.pods.get(f"{fault.pod.namespace}/{fault.pod.name}")
    return [] if pod is None else [pod]


def live_pods(state: ClusterState, job: JobRecord) -> list[PodRef]:
    """The job's pods in the watch cache that are not terminating, by name (what a label-selected list of the
    apiserver returns, without the round trip), less those whose controller ownerReference names another job of
    that name (an earlier one). A pod linked by its labels only stays here; the writer's own list
    (:meth:`agent.actions.writer.ClusterWriter.list_job_pods`) leaves it alone before anything is deleted."""
    pods = [
        p
        for p in state.pods_of_job(job.kind, job.namespace, job.name)
        if not (job.uid and p.job is not None and p.job.uid and p.job.uid != job.uid)
    ]
    return sorted(
        (
            PodRef(p.namespace, p.name, p.uid, p.job.version if p.job is not None else "")
            for p in pods
            if p.deletion_timestamp is None
        ),
        key=lambda p: p.name,
    )


def job_ref(job: JobRecord) -> JobRef:
    """The writer's reference to `job`."""
    return JobRef(job.kind, job.namespace, job.name, job.uid)


def job_object(job: JobRecord) -> ObjectRef:
    """The events' reference to `job`."""
    return ObjectRef(job.kind.value, job.namespace, job.name, job.uid)


def stored_record(state: ClusterState, job: JobRecord) -> JobStateRecord | None:
    """What is persisted for `job`: its record as the watch last delivered it (agent.core.records), else what an
    earlier version wrote on the job itself (``legacy``: read once to migrate it, never written), else None."""
    return state.job_record(job.uid) or from_legacy_annotations(job)
