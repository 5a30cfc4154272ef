"""Volcano PodGroups → :class:`~agent.core.cluster.PodGroupRecord`.

MindCluster's rescheduler reads ``ProcessRecoverStrategy`` from the PodGroup's annotations
(``component/ascend-for-volcano/internal/rescheduling/job.go`` ``isDealFaultByExternal``), and a recovery
platform may set it there at runtime (ClusterD ``component/clusterd/pkg/application/recover/
fault_recover_platform_plugin.go``), and the job's fault-tolerance labels from the PodGroup's labels
(``plugin/job.go`` ``getJobLabelFromVcJob``, agent.core.job_labels). The Volcano job controller names a
Job's PodGroup ``<job>-<uid>`` (older releases ``<job>``) and the Ascend Operator likewise; both set a
controller ownerReference to the job. Only the owner, that one annotation and those labels are kept.
"""

from __future__ import annotations

from typing import Any

from agent.core.cluster import JobKind, PodGroupRecord
from agent.core.faults import Rejection
from agent.core.job_labels import SETTING_LABELS
from agent.sources.common import Bad, Metadata, controller_owner, intern, object_ref
from agent.sources.jobs import PROCESS_RECOVER_STRATEGY_ANNOTATION

_OWNER_KINDS = {(kind.api_group, kind.api_kind): kind for kind in JobKind}


def convert_podgroup(obj: dict[str, Any]) -> PodGroupRecord | Rejection:
    """Convert one raw PodGroup. Never raises.

    Rejection reasons: ``missing-metadata``, ``wrong-type`` (metadata or an ownerReference malformed).
    A PodGroup owned by something other than a Volcano Job or an AscendJob keeps ``owner_kind`` None (its
    name may still tie it to a job: agent.sources.state.ClusterState.podgroup_of).
    """
    try:
        m = Metadata(obj, "PodGroup")
        owner = controller_owner(m.owners)
        kind: JobKind | None = None
        owner_name = owner_uid = ""
        if owner is not None:
            group = str(owner.get("apiVersion", "")).split("/", 1)[0]
            kind = _OWNER_KINDS.get((group, str(owner.get("kind", ""))))
            if kind is not None:
                owner_name = str(owner.get("name", ""))
                owner_uid = str(owner.get("uid", ""))
        return PodGroupRecord(
            namespace=m.namespace,
            name=intern(m.name),
            uid=m.uid,
            resource_version=m.rv,
            owner_kind=kind,
            owner_name=intern(owner_name),
            owner_uid=owner_uid,
            process_recover_strategy=m.annotations.get(PROCESS_RECOVER_STRATEGY_ANNOTATION),
            labels=tuple(sorted((intern(k), intern(v)) for k, v in m.labels.items() if k in SETTING_LABELS)),
        )
    except Bad as e:
        return Rejection(object_ref(obj, "PodGroup"), e.reason, e.detail)
