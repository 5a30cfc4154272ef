"""Builders of the fault-stream events: a fault detected or cleared (one per job it hit, or a node event), and a
node's quarantine released. Pure: no clock reads, no I/O; bad arguments raise
:class:`~agent.sinks.events.vocabulary.EventBuildError`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from cloudevents.core.v1.event import CloudEvent

from agent.core.faults import Fault, FaultCleared, ObjectRef
from agent.sinks.events.build import (
    ID_NAMESPACE,
    build_event,
    check_aware,
    check_non_empty,
    fault_data,
    fault_ident,
    incident_link,
    job_data,
    occurrence_id,
    ref_data,
    rfc3339,
    subject_and_key,
)
from agent.sinks.events.vocabulary import FAULT_CLEARED, FAULT_DETECTED, QUARANTINE_RELEASED


def fault_detected(
    fault: Fault,
    *,
    cluster: str,
    job: ObjectRef | None = None,
    incident_id: str | None = None,
) -> CloudEvent:
    """A fault was seen (one event per fault and affected job; node-wide with `job` None).

    Args:
        fault: the fault (agent.core.faults.Fault); its ``signal_time`` becomes the event time.
        cluster: Settings.cluster_name.
        job: the training job hit (kind vcjob/acjob, namespace, name, uid); None for a fault with no job, which is
            then a node event (subject ``node/<node>``, key the node name).
        incident_id: the incident it opened or joined, if any.

    Raises:
        EventBuildError: naive datetimes, a job without namespace/name, a node event without a node.
    """
    t = FAULT_DETECTED
    subject, key = subject_and_key(t, job, fault.node)
    check_aware(t, "fault.signal_time", fault.signal_time)
    data = {
        "fault": fault_data(t, fault),
        "fault_id": fault_id(fault, cluster=cluster),
        "job": job_data(job),
        "incident_id": incident_id,
    }
    ident = (subject, *fault_ident(fault), incident_link(incident_id))
    return build_event(t, cluster, subject, key, fault.signal_time, ident, data)


def fault_id(fault: Fault, *, cluster: str) -> str:
    """The fault's own identity, the same in its ``fault.detected`` and ``fault.cleared`` events and for every
    job it hit: a UUIDv5 of the cluster, kind, node, chips, codes and signal time (``data.fault_id``)."""
    return str(uuid.uuid5(ID_NAMESPACE, "\x1f".join(("fault", cluster, *fault_ident(fault)))))


def detected_id(fault: Fault, *, cluster: str, job: ObjectRef | None = None, incident_id: str | None = None) -> str:
    """The CloudEvents id of the ``fault.detected`` event :func:`fault_detected` builds for `fault`, `job` and
    `incident_id` (``data.detected_id`` of the matching ``fault.cleared``). The incident link is part of the id:
    the same fault and job published again linked to another incident (or to none) is another event, so it has
    another id, and a consumer de-duplicating by id keeps both.

    Raises:
        EventBuildError: as :func:`fault_detected`.
    """
    subject, _ = subject_and_key(FAULT_DETECTED, job, fault.node)
    return occurrence_id(FAULT_DETECTED, cluster, (subject, *fault_ident(fault), incident_link(incident_id)))


def fault_cleared(
    cleared: FaultCleared,
    *,
    cluster: str,
    job: ObjectRef | None = None,
    incident_id: str | None = None,
    jobs: Sequence[ObjectRef] = (),
    detected_incident_id: str | None = None,
) -> CloudEvent:
    """The cluster no longer reports a fault (chip healthy, NodeD ConfigMap deleted, node Ready).

    Published like :func:`fault_detected`: one event per job the fault hit, subject and key that job (so it
    follows the job's ``fault.detected`` in the job's ordered stream), or one node event when it hit none.
    ``data.fault_id`` is the fault's identity (:func:`fault_id`, as in its ``fault.detected``),
    ``data.detected_id`` the id of the ``fault.detected`` event this one ends (same fault, same job, linked to
    `detected_incident_id`: the incident that event named, None for none; :func:`detected_id`), and
    ``data.jobs`` every job the fault hit (`jobs`; `job` is added when missing).
    ``data.fault_duration_s`` = cleared_at - fault.signal_time, seconds (0 when the clocks disagree).

    Raises:
        EventBuildError: as :func:`fault_detected`.
    """
    t = FAULT_CLEARED
    fault = cleared.fault
    subject, key = subject_and_key(t, job, fault.node)
    check_aware(t, "cleared_at", cleared.cleared_at)
    check_aware(t, "fault.signal_time", fault.signal_time)
    hit = list(jobs) if job is None or job in jobs else [job, *jobs]
    for other in hit:
        subject_and_key(t, other, fault.node)  # the same checks as `job`
    data = {
        "fault": fault_data(t, fault),
        "fault_id": fault_id(fault, cluster=cluster),
        "detected_id": detected_id(fault, cluster=cluster, job=job, incident_id=detected_incident_id),
        "job": job_data(job),
        "jobs": [ref_data(j) for j in sorted(hit, key=lambda j: (j.namespace, j.name, j.uid))],
        "incident_id": incident_id,
        "cleared_at": rfc3339(cleared.cleared_at),
        "fault_duration_s": max(0.0, (cleared.cleared_at - fault.signal_time).total_seconds()),
        "cleared_by": ref_data(cleared.source),
    }
    ident = (subject, *fault_ident(fault), rfc3339(cleared.cleared_at))
    return build_event(t, cluster, subject, key, cleared.cleared_at, ident, data)


def quarantine_released(
    node: str,
    *,
    cluster: str,
    at: datetime,
    by: str,
    reason: str = "",
    chips: Sequence[str] = (),
    hold_until: datetime | None = None,
    still_quarantined: str | None = None,
) -> CloudEvent:
    """A person released `node`'s quarantine early (``fault-agent quarantine release``): the isolation of `chips`
    and the hold until `hold_until` are lifted; `still_quarantined` names the level a fault still reported keeps
    the node at (None: the node is free). Subject ``node/<node>``, key the node name; one event per node and
    release time (`at`).

    Raises:
        EventBuildError: empty node or `by`, naive times.
    """
    t = QUARANTINE_RELEASED
    check_non_empty(t, "node", node)
    check_non_empty(t, "by", by)
    check_aware(t, "at", at)
    if hold_until is not None:
        check_aware(t, "hold_until", hold_until)
    data = {
        "node": node,
        "by": by,
        "reason": reason,
        "chips": list(chips),
        "hold_until": rfc3339(hold_until) if hold_until else None,
        "still_quarantined": still_quarantined,
    }
    return build_event(t, cluster, f"node/{node}", node, at, (node, rfc3339(at)), data)
