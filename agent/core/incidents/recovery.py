"""When a restarted job counts as recovered, read from the job and its pods as watched. Pure.

Inputs: :class:`~agent.core.incidents.lifecycle.Incident` (its ``action``, ``pods`` and ``restart_at``), the job's
:class:`~agent.core.cluster.JobRecord` and its :class:`~agent.core.cluster.PodRecord` list; times compared at whole
seconds (Kubernetes' ``creationTimestamp`` resolution). Nothing raises. The hot-switch backup pod's name is the
Ascend Operator's (component/ascend-operator/pkg/controllers/v1/pod.go ``createHotSwitchPod``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from agent.core.cluster import JobKind, JobRecord, PodRecord
from agent.core.incidents.lifecycle import Incident
from agent.core.policy import Action
from agent.core.resetconfig import pod_level_update_wanted


def recovered(incident: Incident, job: JobRecord, pods: Iterable[PodRecord], *, faults_on_job: bool) -> bool:
    """True when `incident` (``restarting``) counts as recovered from what the job and its pods show. Pure.

    - ``restart-pods`` (pod-rescheduling, process-recover-enable): the job Running, every live pod Running and
      Ready, and each stopped pod (`incident.pods`) replaced by a pod of the same name created at or after the
      restart: the pods that were not stopped keep their age. For a job that gets MindCluster's pod-level
      reset-config update (agent.core.resetconfig ``pod_level_update_wanted``) the pods that were not stopped
      need only be Running: their processes restart on that update, which this recovery triggers (MindCluster
      writes it once the pods are placed, plugin/job.go ``updateResetConfigMap``), so waiting for their
      readiness would never end when they stopped for a graceful exit or hang on the collective.
    - ``hand-off`` (``ProcessRecoverStrategy``: the agent stopped nothing): the job Running, every live pod
      Running and Ready, and `faults_on_job` False: no active fault hits the job's live pods any more (the
      chip recovered in place, or the platform moved the pod off it). The processes themselves are not visible
      in any object the agent reads; the pods' state and the fault's clearing are.
    - anything else: :func:`job_healthy` for pods created since the restart.

    An AscendJob is judged from its pods alone (the checks above, on pods only, plus at least ``minAvailable``
    live pods; a whole-job restart's pods are all new, so all of the new ``version``): the Ascend Operator
    re-appends ``Created`` after ``Running`` at each restart and leaves ``Running`` as it was once the pods run
    again, so its conditions may say anything in between; only its ``Failed`` (the operator gave up) counts, and
    that ends the incident elsewhere (:meth:`IncidentStore.observe`).
    """
    if job.kind is JobKind.ASCEND:
        pods = list(pods)
        if job.phase in ("Failed", "Succeeded") or not _ascend_pods_enough(job, pods):
            return False
        job = replace(job, phase="Running")  # the pods say it runs; the checks below read the pods
    if incident.action in (Action.HAND_OFF.value, Action.MARK_PODS.value):
        return not faults_on_job and job_healthy(job, pods, None)
    if incident.action == Action.RESTART_PODS.value and incident.pods:
        live = list(pods)
        if pod_level_update_wanted(dict(job.labels)):
            replaced = [p for p in live if p.name in incident.pods]
            untouched = [p for p in live if p.name not in incident.pods]
            if not job_healthy(job, replaced, None) or any(
                p.phase != "Running" for p in untouched if p.deletion_timestamp is None
            ):
                return False
        elif not job_healthy(job, live, None):
            return False
        since = incident.restart_at
        floor = None if since is None else since.replace(microsecond=0)
        fresh = {
            p.name
            for p in live
            if p.deletion_timestamp is None and (floor is None or (p.created_at is not None and p.created_at >= floor))
        }
        # a hot switch's backup pod stands in for the pod ClusterD asked to delete: the Ascend Operator names it
        # <old pod>-hot-<4 digits> and creates it before the deletion (component/ascend-operator/pkg/controllers/v1/
        # pod.go createHotSwitchPod); no pod of the old name comes back
        backups = [p.name for p in live if p.deletion_timestamp is None and p.phase == "Running" and p.ready]
        return all(
            name in fresh or any(b.startswith(name + HOT_SWITCH_BACKUP_INFIX) for b in backups)
            for name in incident.pods
        )
    return job_healthy(job, pods, incident.restart_at)


HOT_SWITCH_BACKUP_INFIX = "-hot-"
"""A hot switch's backup pod is named ``<old pod><infix><4 digits>`` by the Ascend Operator
(``component/ascend-operator/pkg/controllers/v1/pod.go`` ``createHotSwitchPod``)."""


def _ascend_pods_enough(job: JobRecord, pods: Sequence[PodRecord]) -> bool:
    """At least ``minAvailable`` (when set) of an AscendJob's pods are live: the operator creates its pods one by
    one, so a moment with only some of them there, all Running, is not the job running again."""
    return job.min_available is None or sum(p.deletion_timestamp is None for p in pods) >= job.min_available


def job_healthy(job: JobRecord, pods: Iterable[PodRecord], since: datetime | None) -> bool:
    """True when `job` counts as recovered: phase Running, at least one pod, and every pod (not being
    deleted) Running and Ready and created at or after `since` (the restart; compared at whole seconds,
    the resolution of Kubernetes' creationTimestamp)."""
    if job.phase != "Running":
        return False
    live = [p for p in pods if p.deletion_timestamp is None]
    if not live:
        return False
    floor = None if since is None else since.replace(microsecond=0)
    return all(
        p.phase == "Running" and p.ready and (floor is None or (p.created_at is not None and p.created_at >= floor))
        for p in live
    )
