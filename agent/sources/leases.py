"""Heartbeat Leases (``coordination.k8s.io/v1``) → :class:`~agent.core.progress.LeaseRecord`.

Only the Leases labelled ``fault-agent.io/progress=lease`` are listed (a label selector on the watch), so the
agent never reads the node heartbeats or the leader-election Leases of other components. Kept: the job label,
``spec.holderIdentity``, ``spec.renewTime``, ``spec.leaseDurationSeconds`` and the progress annotations
(agent.core.progress.LEASE_ANNOTATIONS); the shape is argued in docs/progress.md.
"""

from __future__ import annotations

from typing import Any

from agent.core.faults import Rejection
from agent.core.progress import LEASE_ANNOTATIONS, LEASE_JOB_LABEL, PROGRESS_LABEL, PROGRESS_LEASE, LeaseRecord
from agent.sources.common import Bad, Metadata, get_dict, get_int, get_str, intern, object_ref, parse_time

LEASE_SELECTOR = f"{PROGRESS_LABEL}={PROGRESS_LEASE}"
"""The watch's label selector."""


def convert_lease(obj: dict[str, Any]) -> LeaseRecord | Rejection:
    """Convert one raw Lease. Never raises.

    Rejection reasons: ``missing-metadata``, ``wrong-type`` (metadata or spec malformed), ``bad-timestamp``
    (``spec.renewTime`` not RFC 3339).
    """
    try:
        m = Metadata(obj, "Lease")
        spec = get_dict(obj, "spec", "")
        return LeaseRecord(
            namespace=m.namespace,
            name=intern(m.name),
            uid=m.uid,
            resource_version=m.rv,
            job=intern(m.labels.get(LEASE_JOB_LABEL, "")),
            holder=get_str(spec, "holderIdentity", "spec"),
            renew_time=parse_time(spec.get("renewTime"), "spec.renewTime"),
            duration_s=get_int(spec, "leaseDurationSeconds", "spec"),
            annotations=tuple(sorted((k, v) for k, v in m.annotations.items() if k in LEASE_ANNOTATIONS)),
        )
    except Bad as e:
        return Rejection(object_ref(obj, "Lease"), e.reason, e.detail)
