"""An incident and a retry ledger as JSON, and the checks a decoded incident must pass before it is adopted. Pure.

Shapes: :func:`encode_incident` / :func:`decode_incident` and :func:`encode_ledger` / :func:`decode_ledger` write
and read compact JSON objects with sorted keys (times as ISO 8601 strings with a time zone; field names in
camelCase: ``jobUID``, ``firstFaultAt``, ``steps`` as ``[[phase, time], …]``, ``restartAt``; the ledger's
``businessRetriesUsed``, ``restartsUsed``, ``resubmitsUsed``, ``incidents``, ``agentPodUIDs``). The job's record
(agent.core.records) stores these texts; earlier versions wrote them into the job annotations
:data:`INCIDENT_ANNOTATION` and :data:`LEDGER_ANNOTATION`, still read once to migrate such a job. The lineage
annotations a resubmitted job carries are here too.

Errors: :class:`IncidentDecodeError` (names the annotation and the field) for text that is not such JSON;
:func:`check_incident` returns why a well-formed incident cannot be this job's own (None when it can).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from agent.core.cluster import FaultScheduling, JobRecord
from agent.core.incidents.lifecycle import NEXT_PHASES, Incident, Phase, make_incident_id
from agent.core.policy import MAX_AGENT_PODS_KEPT, Action, RetryLedger

ANNOTATION_PREFIX = "fault-agent.io/"
INCIDENT_ANNOTATION = ANNOTATION_PREFIX + "incident"
"""Earlier versions' job annotation holding the incident (read to migrate; the job record's ``incident`` now)."""
LEDGER_ANNOTATION = ANNOTATION_PREFIX + "ledger"
"""Earlier versions' job annotation holding the ledger (read to migrate; the job record's ``ledger`` now)."""
RESUBMITTED_FROM_ANNOTATION = ANNOTATION_PREFIX + "resubmitted-from"
"""On a resubmitted job: the UID of the job it replaces (lineage)."""
RESUBMIT_COUNT_ANNOTATION = ANNOTATION_PREFIX + "resubmit-count"
"""On a resubmitted job: resubmissions of its lineage so far (1 after the first); the resubmit budget reads it,
so the count survives the old job's deletion and agent restarts."""
MAX_CLOCK_SKEW = timedelta(seconds=60)
"""How far ahead of `now` a time on a restored incident may be (the writing replica's clock was ahead): beyond
it the annotation is not trusted (a future restart time would make every real fault look older than it)."""
EARLIEST_INCIDENT = datetime(2000, 1, 1, tzinfo=UTC)


class IncidentDecodeError(ValueError):
    """A job's incident or ledger annotation could not be read. `key` names the annotation."""

    def __init__(self, key: str, detail: str) -> None:
        super().__init__(f"annotation {key}: {detail}")
        self.key = key
        self.detail = detail


def _ts(value: datetime) -> str:
    return value.isoformat()


def _parse_ts(key: str, what: str, value: object) -> datetime:
    if not isinstance(value, str):
        raise IncidentDecodeError(key, f"{what} must be an ISO 8601 string, got {type(value).__name__}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise IncidentDecodeError(key, f"{what} is not an ISO 8601 time: {value!r}") from None
    if parsed.tzinfo is None:
        raise IncidentDecodeError(key, f"{what} has no time zone: {value!r}")
    return parsed


def encode_incident(incident: Incident) -> str:
    """The JSON written to :data:`INCIDENT_ANNOTATION` (compact, keys sorted)."""
    doc = {
        "id": incident.id,
        "jobUID": incident.job_uid,
        "kind": incident.kind,
        "namespace": incident.namespace,
        "name": incident.name,
        "generation": incident.generation,
        "phase": incident.phase.value,
        "firstFaultAt": _ts(incident.first_fault_at),
        "steps": [[p.value, _ts(t)] for p, t in incident.steps],
        "faults": list(incident.faults),
        "faultCount": incident.fault_count,
        "action": incident.action,
        "mode": incident.mode,
        "reason": incident.reason,
        "restartAt": None if incident.restart_at is None else _ts(incident.restart_at),
        "detail": incident.detail,
    }
    if incident.pods:  # written only when set: older annotations stay byte for byte what they were
        doc["pods"] = list(incident.pods)
    if incident.escalated:
        doc["escalated"] = True
    if incident.pod_status:
        doc["podStatus"] = incident.pod_status
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def _load_object(key: str, text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise IncidentDecodeError(key, f"not valid JSON ({e.msg} at offset {e.pos})") from None
    if not isinstance(doc, dict):
        raise IncidentDecodeError(key, f"must be a JSON object, got {type(doc).__name__}")
    return doc


def _field(key: str, doc: Mapping[str, Any], name: str, kind: type, default: Any = ...) -> Any:
    if name not in doc:
        if default is ...:
            raise IncidentDecodeError(key, f"missing field {name!r}")
        return default
    value = doc[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise IncidentDecodeError(key, f"field {name!r} must be an integer, got {value!r}")
    if kind is int and value < 0:
        raise IncidentDecodeError(key, f"field {name!r} must not be negative, got {value}")
    if not isinstance(value, kind):
        raise IncidentDecodeError(key, f"field {name!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def decode_incident(text: str) -> Incident:
    """Read :data:`INCIDENT_ANNOTATION` JSON written by :func:`encode_incident`.

    Raises:
        IncidentDecodeError: not JSON, not an object, a missing or mistyped field, an unknown phase, or a
            time without a time zone; the message names the field.
    """
    key = INCIDENT_ANNOTATION
    doc = _load_object(key, text)
    phase_text = _field(key, doc, "phase", str)
    try:
        phase = Phase(phase_text)
    except ValueError:
        raise IncidentDecodeError(key, f"unknown phase {phase_text!r}") from None
    steps_raw = _field(key, doc, "steps", list, [])
    steps: list[tuple[Phase, datetime]] = []
    for i, step in enumerate(steps_raw):
        if not (isinstance(step, list) and len(step) == 2 and isinstance(step[0], str)):
            raise IncidentDecodeError(key, f"steps[{i}] must be [phase, time], got {step!r}")
        try:
            step_phase = Phase(step[0])
        except ValueError:
            raise IncidentDecodeError(key, f"steps[{i}] has unknown phase {step[0]!r}") from None
        steps.append((step_phase, _parse_ts(key, f"steps[{i}] time", step[1])))
    faults = _field(key, doc, "faults", list, [])
    if not all(isinstance(f, str) for f in faults):
        raise IncidentDecodeError(key, "field 'faults' must be a list of strings")
    restart_raw = doc.get("restartAt")
    pods = _field(key, doc, "pods", list, [])
    if not all(isinstance(p, str) for p in pods):
        raise IncidentDecodeError(key, "field 'pods' must be a list of strings")
    return Incident(
        id=_field(key, doc, "id", str),
        job_uid=_field(key, doc, "jobUID", str),
        kind=_field(key, doc, "kind", str, ""),
        namespace=_field(key, doc, "namespace", str, ""),
        name=_field(key, doc, "name", str, ""),
        generation=_field(key, doc, "generation", str, ""),
        phase=phase,
        first_fault_at=_parse_ts(key, "firstFaultAt", doc.get("firstFaultAt")),
        steps=tuple(steps),
        faults=tuple(faults),
        fault_count=_field(key, doc, "faultCount", int, 0),
        action=_field(key, doc, "action", str, ""),
        mode=_field(key, doc, "mode", str, ""),
        reason=_field(key, doc, "reason", str, ""),
        restart_at=None if restart_raw is None else _parse_ts(key, "restartAt", restart_raw),
        detail=_field(key, doc, "detail", str, ""),
        pods=tuple(pods),
        escalated=_field(key, doc, "escalated", bool, False),
        pod_status=_field(key, doc, "podStatus", str, ""),
    )


def encode_ledger(ledger: RetryLedger) -> str:
    """The JSON written to :data:`LEDGER_ANNOTATION`."""
    doc = {
        "businessRetriesUsed": ledger.business_retries_used,
        "restartsUsed": ledger.restarts_used,
        "resubmitsUsed": ledger.resubmits_used,
        "incidents": ledger.incidents,
        "agentPodUIDs": list(ledger.agent_pod_uids),
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def decode_ledger(text: str) -> RetryLedger:
    """Read :data:`LEDGER_ANNOTATION` JSON written by :func:`encode_ledger`.

    Raises:
        IncidentDecodeError: not JSON, not an object, or a count that is not a non-negative integer.
    """
    key = LEDGER_ANNOTATION
    doc = _load_object(key, text)
    uids = _field(key, doc, "agentPodUIDs", list, [])
    if not all(isinstance(u, str) for u in uids):
        raise IncidentDecodeError(key, "field 'agentPodUIDs' must be a list of strings")
    return RetryLedger(
        business_retries_used=_field(key, doc, "businessRetriesUsed", int, 0),
        restarts_used=_field(key, doc, "restartsUsed", int, 0),
        resubmits_used=_field(key, doc, "resubmitsUsed", int, 0),
        incidents=_field(key, doc, "incidents", int, 0),
        agent_pod_uids=tuple(uids[-MAX_AGENT_PODS_KEPT:]),
    )


def check_incident(
    incident: Incident, job: JobRecord, ledger: RetryLedger, now: datetime | None, *, skew: timedelta = MAX_CLOCK_SKEW
) -> str | None:
    """Why a decoded incident annotation cannot be this job's own, or None when it can. Pure.

    An incident the agent wrote names its job (UID, kind, namespace, name), carries the id
    :func:`incident_id` gives for the job's generation and the ledger's incident count (on a resubmitted job:
    for the UID in :data:`RESUBMITTED_FROM_ANNOTATION`), steps that start with ``detected``, follow the
    lifecycle in time order and end in `incident.phase`, a restart time exactly when it reached
    ``restarting``, known action and mode values, and no time after `now` + `skew` (None: times unchecked)
    or before 2000. A hand-edited or made-up annotation fails one of these and must not be adopted: a future
    time would make every real fault look already handled, a made-up open incident would absorb them.
    """
    if incident.job_uid != job.uid:
        return f"jobUID {incident.job_uid[:40]!r} is not the job's UID {job.uid!r}"
    if (incident.kind, incident.namespace, incident.name) != (job.kind.value, job.namespace, job.name):
        return f"names {incident.kind}/{incident.namespace}/{incident.name}"[:120] + ", not this job"
    uids = [job.uid]
    lineage = job.annotation(RESUBMITTED_FROM_ANNOTATION)
    if lineage:
        uids.append(lineage)
    # a held incident charged nothing yet: it carries the id its acting step will keep (the next sequence number)
    seq = ledger.incidents + (1 if incident.phase is Phase.HELD else 0)
    expected = {make_incident_id(job.name, uid, incident.generation, seq) for uid in uids}
    if incident.id not in expected:
        return (
            f"id {incident.id[:80]!r} is not the id of incident {seq} of this job (generation {incident.generation!r})"
        )
    if not incident.steps or incident.steps[0][0] is not Phase.DETECTED:
        return "steps do not start with detected"
    for (before, t_before), (after, t_after) in zip(incident.steps, incident.steps[1:], strict=False):
        if after not in NEXT_PHASES[before]:
            return f"steps go from {before} to {after}"
        if t_after < t_before:
            return f"step {after} is before step {before}"
    acting_steps = sum(1 for p, _ in incident.steps if p is Phase.ACTING)
    if acting_steps > 1 + int(incident.escalated):
        return f"{acting_steps} acting steps" + ("" if incident.escalated else " without an escalation")
    if incident.steps[-1][0] is not incident.phase:
        return f"phase {incident.phase} is not its last step {incident.steps[-1][0]}"
    if (incident.restart_at is None) != (incident.at(Phase.RESTARTING) is None):
        return "restartAt and a restarting step go together"
    if incident.fault_count < len(incident.faults):
        return f"faultCount {incident.fault_count} is less than the {len(incident.faults)} faults listed"
    if incident.action and incident.action not in {a.value for a in Action}:
        return f"unknown action {incident.action[:40]!r}"
    if incident.mode and incident.mode not in {m.value for m in FaultScheduling}:
        return f"unknown mode {incident.mode[:40]!r}"
    times = [("firstFaultAt", incident.first_fault_at), *((f"step {p}", t) for p, t in incident.steps)]
    if incident.restart_at is not None:
        times.append(("restartAt", incident.restart_at))
    for what, when in times:
        if when < EARLIEST_INCIDENT:
            return f"{what} {when.isoformat()} is before {EARLIEST_INCIDENT.year}"
        if now is not None and when > now + skew:
            return f"{what} {when.isoformat()} is in the future (now {now.isoformat()})"
    return None
