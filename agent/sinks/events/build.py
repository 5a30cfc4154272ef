"""What every builder of :mod:`agent.sinks.events` shares: the CloudEvent's attributes (id, source, subject, key,
time, dataschema), the argument checks that raise :class:`~agent.sinks.events.vocabulary.EventBuildError`, and the
``data`` shapes of an object reference and a fault. Pure: no clock reads, no I/O.

Ids are UUIDv5 in :data:`ID_NAMESPACE` of the type, the cluster and what identifies the occurrence (``\x1f``
joined), so a re-send of one occurrence has the same id.
"""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from cloudevents.core.v1.event import CloudEvent

from agent.core.detect.levels import level_name
from agent.core.faults import Fault, FaultKind, ObjectRef
from agent.sinks.events.vocabulary import ACTED_BY, DATA_CONTENT_TYPE, PARTITION_KEY, EventBuildError

# Namespace of the UUIDv5 event ids (fixed forever: changing it changes every id).
ID_NAMESPACE: Final = uuid.UUID("5b0f2f64-3c1e-4f7e-9a53-6f1d2c7a9e10")


def rfc3339(t: datetime) -> str:
    """`t` (timezone-aware) as RFC 3339 UTC with microseconds, e.g. ``2025-01-02T03:04:05.000006Z``."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def source_for(cluster: str) -> str:
    """The CloudEvents ``source`` of this agent in `cluster`: ``/fault-agent/<cluster, percent-quoted>``."""
    return "/fault-agent/" + urllib.parse.quote(cluster, safe="")


def build_event(
    event_type: str,
    cluster: str,
    subject: str,
    key: str,
    at: datetime,
    ident: Sequence[str],
    data: Mapping[str, Any],
) -> CloudEvent:
    check_non_empty(event_type, "cluster", cluster)
    attributes: dict[str, Any] = {
        "id": occurrence_id(event_type, cluster, ident),
        "source": source_for(cluster),
        "type": event_type,
        "specversion": "1.0",
        "subject": subject,
        "time": at.astimezone(UTC),
        "datacontenttype": DATA_CONTENT_TYPE,
        "dataschema": f"urn:fault-agent:schema:{event_type}",
        PARTITION_KEY: key,
    }
    return CloudEvent(attributes, dict(data))


def check_acted_by(event_type: str, acted_by: str) -> None:
    if acted_by not in ACTED_BY:
        raise EventBuildError(event_type, "acted_by", f"must be one of {', '.join(ACTED_BY)}, got {acted_by!r}")


def occurrence_id(event_type: str, cluster: str, ident: Sequence[str]) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, "\x1f".join((event_type, cluster, *ident))))


def subject_and_key(event_type: str, job: ObjectRef | None, node: str) -> tuple[str, str]:
    if job is None:
        if not node:
            raise EventBuildError(event_type, "job", "no job and no node: the event would have no subject")
        return f"node/{node}", node
    if not job.namespace or not job.name:
        raise EventBuildError(event_type, "job", f"needs namespace and name, got {job}")
    subject = f"{job.namespace}/{job.name}"
    return subject, job.uid or subject


def check_aware(event_type: str, field: str, t: datetime) -> None:
    if not isinstance(t, datetime) or t.tzinfo is None or t.utcoffset() is None:
        raise EventBuildError(event_type, field, f"must be a timezone-aware datetime, got {t!r}")


def check_non_empty(event_type: str, field: str, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise EventBuildError(event_type, field, f"must be a non-empty string, got {value!r}")


def check_recovery_common(event_type: str, incident_id: str, attempt: int, at: datetime) -> None:
    check_non_empty(event_type, "incident_id", incident_id)
    if not isinstance(attempt, int) or attempt < 1:
        raise EventBuildError(event_type, "attempt", f"must be an integer ≥ 1, got {attempt!r}")
    check_aware(event_type, "at", at)


def ref_data(ref: ObjectRef | None) -> dict[str, str] | None:
    if ref is None:
        return None
    return {"kind": ref.kind, "namespace": ref.namespace, "name": ref.name, "uid": ref.uid}


def job_data(job: ObjectRef | None) -> dict[str, str] | None:
    return ref_data(job)


def incident_link(incident_id: str | None) -> str:
    """The fault.detected id's part for its incident link (``data.incident_id``); "none" cannot be an id's
    part for a real incident, whose part is prefixed."""
    return "none" if incident_id is None else f"incident:{incident_id}"


def fault_ident(fault: Fault) -> tuple[str, ...]:
    return (fault.kind.value, fault.node, ",".join(fault.chips), ",".join(fault.codes), rfc3339(fault.signal_time))


def fault_data(event_type: str, fault: Fault) -> dict[str, Any]:
    check_aware(event_type, "fault.signal_time", fault.signal_time)
    check_aware(event_type, "fault.observed_at", fault.observed_at)
    if fault.kind is not FaultKind.BUSINESS and fault.kind is not FaultKind.DISRUPTION and not fault.node:
        raise EventBuildError(event_type, "fault.node", f"a {fault.kind.value} fault needs its node")
    return {
        "kind": fault.kind.value,
        "level": level_name(fault),  # NodeD's own names for a NodeD fault (SeparateFault, ...)
        "node": fault.node,
        "chips": list(fault.chips),
        "codes": list(fault.codes),
        "reason": fault.reason,
        "signal_time": rfc3339(fault.signal_time),
        "observed_at": rfc3339(fault.observed_at),
        "detection_lag_s": max(0.0, (fault.observed_at - fault.signal_time).total_seconds()),
        "check_code_ok": fault.check_code_ok,
        "source": ref_data(fault.source),
        "pod": ref_data(fault.pod),
        "detail": fault.detail,  # the reporter's words, e.g. a condition's "XidError48: DBE"
        "devices": list(fault.devices),  # e.g. "GPU:GPU-8f3c…", "PCI:0000:3b:00"
    }
