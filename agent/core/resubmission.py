"""A resubmission made durable: the ConfigMap written before a Failed job is deleted, and what to do with one left.

Resubmitting deletes the old job and creates it again from a body built from it (agent.actions.writer
``resubmission_body``). Between the two the body existed only in memory: an agent that died, lost its lease, or
whose create failed for good left the job deleted, its spec and its incident lost. So the body is written first
to a ConfigMap in the agent's own namespace (``leader.namespace``), named from the old job's UID
(:func:`configmap_name`) and labelled :data:`RESUBMISSION_LABEL`; it is deleted once the new job exists. A leader
that finds one left over decides with :func:`leftover_action` what to do with it.

Pure: no I/O. The data keys are :data:`KEYS`; ``body`` is the job to create as JSON; ``incident-state`` and
``ledger`` are the old job's incident and ledger annotations as they were when it was deleted (agent.core.incidents
encodings), so the incident can follow the new job even when nobody remembers it.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.core.cluster import JobKind
from agent.core.incidents import RESUBMITTED_FROM_ANNOTATION

RESUBMISSION_LABEL = "fault-agent.io/resubmission"
"""Label (value ``true``) on every resubmission ConfigMap: a leader lists them by it."""
CONFIGMAP_PREFIX = "fault-agent-resubmit-"
CONFIGMAP_LIMIT_BYTES = 1024 * 1024
"""The apiserver's limit on a ConfigMap's data (keys and values together), bytes: 1 MiB."""
KEYS = ("body", "from-uid", "incident", "count", "kind", "namespace", "name", "incident-state", "ledger")


class ResubmissionDecodeError(ValueError):
    """A resubmission ConfigMap that cannot be read; `reason` is a short slug (metrics label), `detail` a sentence."""

    def __init__(self, name: str, reason: str, detail: str) -> None:
        super().__init__(f"ConfigMap {name}: {detail}")
        self.name = name
        self.reason = reason
        self.detail = detail


class BodyTooLarge(ValueError):
    """The job's resubmission record would not fit in a ConfigMap (:data:`CONFIGMAP_LIMIT_BYTES`)."""

    def __init__(self, size: int) -> None:
        super().__init__(
            f"resubmission record is {size} bytes, over the {CONFIGMAP_LIMIT_BYTES}-byte ConfigMap limit; "
            "the job is not deleted"
        )
        self.size = size


@dataclass(frozen=True, slots=True)
class PendingResubmission:
    """One resubmission recorded before its delete.

    body: the job to create (apiVersion, kind, metadata, spec) with its lineage annotations; from_uid: the deleted
    job's UID; incident: the incident id; count: the lineage count; incident_state / ledger: the old job's
    annotations of those ("" when it had none).
    """

    kind: JobKind
    namespace: str
    name: str
    from_uid: str
    incident: str
    count: int
    body: Mapping[str, Any]
    incident_state: str = ""
    ledger: str = ""

    @property
    def configmap(self) -> str:
        """The ConfigMap's name (:func:`configmap_name` of `from_uid`)."""
        return configmap_name(self.from_uid)

    def __str__(self) -> str:
        return f"{self.kind.value}/{self.namespace}/{self.name}"


def configmap_name(from_uid: str) -> str:
    """``fault-agent-resubmit-<uid>``: deterministic, so a retried resubmission of the same job writes the same one
    (a UID is 36 characters: the name stays a DNS subdomain)."""
    return CONFIGMAP_PREFIX + from_uid.lower()


def encode(pending: PendingResubmission) -> dict[str, str]:
    """The ConfigMap data of `pending` (keys :data:`KEYS`, values text).

    Raises:
        BodyTooLarge: the data would exceed :data:`CONFIGMAP_LIMIT_BYTES`.
    """
    data = {
        "body": json.dumps(pending.body, sort_keys=True, separators=(",", ":")),
        "from-uid": pending.from_uid,
        "incident": pending.incident,
        "count": str(pending.count),
        "kind": pending.kind.value,
        "namespace": pending.namespace,
        "name": pending.name,
        "incident-state": pending.incident_state,
        "ledger": pending.ledger,
    }
    size = sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_LIMIT_BYTES:
        raise BodyTooLarge(size)
    return data


def decode(name: str, data: Mapping[str, str]) -> PendingResubmission:
    """Read a resubmission ConfigMap named `name` with `data` back (the inverse of :func:`encode`).

    Raises:
        ResubmissionDecodeError: a key is missing or unreadable, or the name does not match the UID.
    """
    missing = [k for k in KEYS if k not in data and k not in ("incident-state", "ledger")]
    if missing:
        raise ResubmissionDecodeError(name, "missing-key", f"missing keys {', '.join(missing)}")
    try:
        kind = JobKind(data["kind"])
    except ValueError:
        raise ResubmissionDecodeError(name, "bad-kind", f"unknown job kind {data['kind'][:40]!r}") from None
    try:
        count = int(data["count"])
    except ValueError:
        raise ResubmissionDecodeError(name, "bad-count", f"count not an integer: {data['count'][:40]!r}") from None
    try:
        body = json.loads(data["body"])
    except ValueError as e:
        raise ResubmissionDecodeError(name, "bad-body", f"body is not JSON: {e}") from e
    meta = body.get("metadata") if isinstance(body, dict) else None
    if not isinstance(meta, dict) or meta.get("name") != data["name"] or meta.get("namespace") != data["namespace"]:
        raise ResubmissionDecodeError(name, "bad-body", "body is not the named job")
    if (meta.get("annotations") or {}).get(RESUBMITTED_FROM_ANNOTATION) != data["from-uid"]:
        raise ResubmissionDecodeError(name, "bad-body", "body's lineage does not name from-uid")
    if configmap_name(data["from-uid"]) != name:
        raise ResubmissionDecodeError(name, "bad-name", f"name does not match from-uid {data['from-uid'][:40]!r}")
    return PendingResubmission(
        kind=kind,
        namespace=data["namespace"],
        name=data["name"],
        from_uid=data["from-uid"],
        incident=data["incident"],
        count=count,
        body=body,
        incident_state=data.get("incident-state", ""),
        ledger=data.get("ledger", ""),
    )


class Leftover(enum.StrEnum):
    """What a leader does with a resubmission ConfigMap it found."""

    FINISHED = "finished"  # the new job exists (resubmitted from that UID): only the ConfigMap is left to delete
    OLD_EXISTS = "old-exists"  # the old job is still there: the incident on it resumes the resubmission
    CREATE = "create"  # neither exists: create the job from the stored body (the case that lost the job before)
    CONFLICT = "conflict"  # the name holds an unrelated object: never touched; the ConfigMap is kept


def leftover_action(pending: PendingResubmission, current: Mapping[str, Any] | None) -> Leftover:
    """Decide what to do with `pending` given `current`, the object of that kind, namespace and name as the
    apiserver has it now (None: no such object)."""
    if current is None:
        return Leftover.CREATE
    meta = current.get("metadata") or {}
    if meta.get("uid") == pending.from_uid:
        return Leftover.OLD_EXISTS
    if (meta.get("annotations") or {}).get(RESUBMITTED_FROM_ANNOTATION) == pending.from_uid:
        return Leftover.FINISHED
    return Leftover.CONFLICT
