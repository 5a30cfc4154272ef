"""Incidents: one per (job UID, job generation); the single place that decides "already handled". Pure.

An incident opens when the policy first acts on a job and every later fault for that job joins it until it is
closed, so a fault storm causes one restart. Lifecycle (each step time-stamped)::

    detected → acting → restarting → recovered      (job Running, all pods Running and Ready, newer than
                                   ↘ failed          the restart) | failed (budget used up, or no recovery
                                                     within the recovery deadline)

A restart the open circuit breaker refuses holds the incident: detected → held-by-breaker, which is open (later
faults of the job join it) but charges no budget; after a person's reset the job is decided again and the same
incident (same id) goes on to acting, or ends recovered (its faults cleared, the job healthy: nothing restarted) or
failed (the recovery deadline passed while held).

A pod-level restart whose replacement pods stay unplaced escalates once: restarting → acting (action
``restart-job``, ``escalated``) → restarting. What "recovered" means depends on the action
(:func:`recovered`): a pod-level restart needs only the stopped pods replaced, a hand-off (the job's
``ProcessRecoverStrategy``: nothing stopped) needs no active fault left on the job's pods.

The job generation is Volcano's ``status.version`` or the AscendJob ``version`` label (`JobRecord.version`).
The incident and the job's retry ledger are serialised as JSON into the job's record, a ConfigMap the agent owns in
its own namespace (agent.core.records; never the job object, which its controller updates read-modify-write), so
that a new leader resumes them: after a failover there is no second restart and the recovery time still counts from
the first fault's own timestamp. Earlier versions wrote the same JSON into two job annotations
(:data:`INCIDENT_ANNOTATION`, :data:`LEDGER_ANNOTATION`), read once to migrate such a job. Everything here is pure:
time is passed in, writing the record is `agent.actions`' job.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from agent.core.cluster import FaultScheduling, JobKind, JobRecord, PodRecord
from agent.core.faults import Fault
from agent.core.policy import MAX_AGENT_PODS_KEPT, Action, Decision, RetryLedger, controller_ended_job
from agent.core.resetconfig import pod_level_update_wanted

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
MAX_FAULTS_KEPT = 20  # faults listed on an incident (the count keeps going): keeps the annotation small
MAX_JOINED_KEPT = 256  # faults that joined an open incident, kept in memory to decide again when it closes


class IncidentDecodeError(ValueError):
    """A job's incident or ledger annotation could not be read. `key` names the annotation."""

    def __init__(self, key: str, detail: str) -> None:
        super().__init__(f"annotation {key}: {detail}")
        self.key = key
        self.detail = detail


class Phase(enum.StrEnum):
    DETECTED = "detected"
    HELD = "held-by-breaker"  # the policy would restart the job, the open circuit breaker refused it
    ACTING = "acting"
    RESTARTING = "restarting"
    RECOVERED = "recovered"
    FAILED = "failed"

    @property
    def open(self) -> bool:
        """True while the incident is not closed (recovered or failed)."""
        return self not in (Phase.RECOVERED, Phase.FAILED)


_NEXT: dict[Phase, frozenset[Phase]] = {
    Phase.DETECTED: frozenset({Phase.ACTING, Phase.FAILED, Phase.RECOVERED, Phase.HELD}),
    # held-by-breaker → acting: decided again after a person's reset; → recovered: its faults cleared meanwhile
    Phase.HELD: frozenset({Phase.ACTING, Phase.FAILED, Phase.RECOVERED}),
    # acting → recovered: a new leader found the faults cleared and the job healthy before the restart was sent
    Phase.ACTING: frozenset({Phase.RESTARTING, Phase.FAILED, Phase.RECOVERED}),
    # restarting → acting: a pod-level restart escalated to the whole job (once: Incident.escalated)
    Phase.RESTARTING: frozenset({Phase.RECOVERED, Phase.FAILED, Phase.ACTING}),
    Phase.RECOVERED: frozenset(),
    Phase.FAILED: frozenset(),
}


class TransitionError(ValueError):
    """An incident was asked to move to a phase its lifecycle does not allow (a bug in the caller)."""


@dataclass(frozen=True, slots=True)
class Incident:
    """One incident of one job.

    Attributes:
        id: deterministic id: ``<job name>-<10 hex>`` from (job UID, generation, sequence number).
        job_uid, kind, namespace, name: the job.
        generation: the job generation when the incident opened.
        phase: lifecycle phase.
        first_fault_at: the first fault's own timestamp (`Fault.signal_time`); recovery time counts from it.
        steps: (phase, when) for each step taken, in order.
        faults: short descriptions of the faults that joined (first :data:`MAX_FAULTS_KEPT`).
        fault_count: faults that joined, all of them.
        action, mode, reason: the decision that was taken ("" before acting).
        restart_at: when the restart request was sent, for the recovery check.
        detail: why it failed, when it did.
        pods: names of the pods a pod-level restart stops (from ``acting`` on, so a successor resumes it as such;
            recovered once each has a newer Running, Ready pod).
        escalated: the pod-level restart was escalated to the whole job (never a second time).
        pod_status: for a ``mark-pods`` incident (``fault-scheduling: external-*``), the ``huawei.com/pod-status``
            value its pods get, so a successor resuming it marks them the same; else "".
    """

    id: str
    job_uid: str
    kind: str
    namespace: str
    name: str
    generation: str
    phase: Phase
    first_fault_at: datetime
    steps: tuple[tuple[Phase, datetime], ...]
    faults: tuple[str, ...] = ()
    fault_count: int = 0
    action: str = ""
    mode: str = ""
    reason: str = ""
    restart_at: datetime | None = None
    detail: str = ""
    pods: tuple[str, ...] = ()
    escalated: bool = False
    pod_status: str = ""

    def at(self, phase: Phase) -> datetime | None:
        """When the incident entered `phase`, or None."""
        for p, when in self.steps:
            if p is phase:
                return when
        return None

    @property
    def closed_at(self) -> datetime | None:
        return self.at(Phase.RECOVERED) or self.at(Phase.FAILED)

    @property
    def recovery_seconds(self) -> float | None:
        """Seconds from the first fault's own timestamp to recovery, or None while not recovered."""
        done = self.at(Phase.RECOVERED)
        return None if done is None else (done - self.first_fault_at).total_seconds()

    def move(self, phase: Phase, now: datetime, **changes: Any) -> Incident:
        """The incident in `phase` at `now` (plus field `changes`).

        Raises:
            TransitionError: the lifecycle does not allow this step (e.g. recovered → acting).
        """
        if phase not in _NEXT[self.phase]:
            raise TransitionError(f"incident {self.id}: cannot go from {self.phase} to {phase}")
        return replace(self, phase=phase, steps=(*self.steps, (phase, now)), **changes)

    def may_hold(self, fault: Fault) -> bool:
        """Whether `fault` opened or joined this incident as far as its list tells: named on it (at any level,
        :func:`fault_place`), or the list is empty or was cut at :data:`MAX_FAULTS_KEPT` (then any fault of the
        job may be one of its)."""
        complete = bool(self.faults) and self.fault_count <= len(self.faults)
        return not complete or self.names(fault)

    def names(self, fault: Fault) -> bool:
        """Whether this incident's fault list names `fault`'s place (its node, chips or pod; any level), and the
        fault began before the restart was sent (else before the incident ended): a later fault of the same chip,
        once the job's pods had left it, never joined this incident."""
        bound = self.restart_at or (self.steps[-1][1] if not self.phase.open and self.steps else None)
        if bound is not None and fault.signal_time > bound:
            return False
        place = fault_place(describe_fault(fault))
        return any(fault_place(text) == place for text in self.faults)

    def join(self, fault: Fault) -> Incident:
        """The incident with `fault` joined (listed while fewer than MAX_FAULTS_KEPT, always counted)."""
        faults = self.faults if len(self.faults) >= MAX_FAULTS_KEPT else (*self.faults, describe_fault(fault))
        return replace(self, faults=faults, fault_count=self.fault_count + 1)


def describe_fault(fault: Fault) -> str:
    """A short, stable text for a fault: ``kind:level@node[chips]codes``."""
    chips = f"[{','.join(fault.chips)}]" if fault.chips else ""
    pod = f"pod={fault.pod.name}" if fault.pod is not None else ""
    return f"{fault.kind.value}:{fault.level.wire_name}@{fault.node}{chips}{pod} {','.join(fault.codes)}".strip()


def fault_place(described: str) -> str:
    """An incident's fault text (:func:`describe_fault`, ``kind:level@node[chips]… codes``) without its level: the
    same chip or node still faulty at another level (a flap escalation the new leader's detectors have not made)
    is still the same fault."""
    head, at, rest = described.partition("@")
    return f"{head.partition(':')[0]}{at}{rest}"


def incident_id(job: JobRecord, seq: int) -> str:
    """Deterministic incident id for the `seq`-th incident of `job` (same inputs, same id, on any replica)."""
    return make_incident_id(job.name, job.uid, job.version, seq)


def make_incident_id(name: str, uid: str, generation: str, seq: int) -> str:
    """The id of the `seq`-th incident of job `name` with UID `uid` at job generation `generation`."""
    digest = hashlib.sha256(f"{uid}\x00{generation}\x00{seq}".encode()).hexdigest()[:10]
    return f"{name}-{digest}"


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


# ---------------------------------------------------------------- (de)serialisation of the annotations


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
        if after not in _NEXT[before]:
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


# ---------------------------------------------------------------- the store


class Admission(enum.StrEnum):
    """What :meth:`IncidentStore.admit` made of a fault."""

    NEW = "new"  # no open incident: the caller decides, then opens one if it acts
    JOINED = "joined"  # joined the open incident: nothing more to do
    HELD = "held"  # the job's incident is held by the breaker: the caller joins it (breaker open) or decides
    STALE = "stale"  # older than the job's last closed incident of the same generation: ignore


@dataclass(slots=True)
class _Entry:
    ledger: RetryLedger = field(default_factory=RetryLedger)
    incident: Incident | None = None  # the open one, or the last closed one
    # faults that joined the open incident, by (fault key, pod): decided again when it closes (in memory only)
    joined: dict[tuple[Any, ...], Fault] = field(default_factory=dict)

    def remember(self, fault: Fault) -> None:
        key = (fault.key, fault.pod)
        self.joined.pop(key, None)
        self.joined[key] = fault
        while len(self.joined) > MAX_JOINED_KEPT:
            del self.joined[next(iter(self.joined))]


def _unrecorded_restart_after(job: JobRecord, ledger: RetryLedger, fault: Fault, pods: Sequence[PodRecord]) -> bool:
    """A restart of the Volcano `job` that no incident records (its ``retryCount`` above `ledger`'s
    ``restarts_used``) came after `fault`: every pod in `pods` was created at or after the fault's own second
    (see :meth:`IncidentStore.covers`)."""
    if job.kind is not JobKind.VOLCANO or job.retry_count <= ledger.restarts_used or not pods:
        return False
    since = fault.signal_time.replace(microsecond=0)
    return all(p.created_at is not None and p.created_at >= since for p in pods)


class IncidentStore:
    """Incidents and retry ledgers of all jobs, by job UID. In memory; the engine persists what :meth:`encoded`
    returns in the job's record after each change, and :meth:`restore` reads it back."""

    def __init__(self) -> None:
        self._jobs: dict[str, _Entry] = {}

    def restore(
        self,
        job: JobRecord,
        now: datetime | None = None,
        *,
        incident_text: str | None = None,
        ledger_text: str | None = None,
    ) -> list[IncidentDecodeError]:
        """Adopt the incident and ledger persisted for `job` (`incident_text`, `ledger_text`: the job record's
        ``incident`` and ``ledger``, agent.core.records, "" for none; both None: an earlier version's
        :data:`INCIDENT_ANNOTATION` and :data:`LEDGER_ANNOTATION` on the job, which only a job without a record is
        read from), unless this store already knows the job (its own memory is newer). The resubmission count
        comes from the job's lineage annotation (written when the job was created). Returns what could not be read
        (each skipped), including an incident that :func:`check_incident` does not accept at `now` (then the job
        starts with no incident, so no real fault is held back by it)."""
        errors: list[IncidentDecodeError] = []
        if job.uid in self._jobs:
            return errors
        entry = _Entry()
        if incident_text is None and ledger_text is None:
            incident_text, ledger_text = job.annotation(INCIDENT_ANNOTATION), job.annotation(LEDGER_ANNOTATION)
        if ledger_text:
            try:
                entry.ledger = decode_ledger(ledger_text)
            except IncidentDecodeError as e:
                errors.append(e)
        count_text = job.annotation(RESUBMIT_COUNT_ANNOTATION)
        if count_text:
            try:
                count = int(count_text)
            except ValueError:
                errors.append(IncidentDecodeError(RESUBMIT_COUNT_ANNOTATION, f"not an integer: {count_text[:40]!r}"))
            else:
                if count > entry.ledger.resubmits_used:
                    entry.ledger = replace(entry.ledger, resubmits_used=count)
        if incident_text:
            try:
                incident = decode_incident(incident_text)
            except IncidentDecodeError as e:
                errors.append(e)
            else:
                problem = check_incident(incident, job, entry.ledger, now)
                if problem is None:
                    entry.incident = incident
                else:
                    errors.append(IncidentDecodeError(INCIDENT_ANNOTATION, f"not adopted: {problem}"))
        self._jobs[job.uid] = entry
        return errors

    def adopt_resubmission(self, job_uid: str, incident_text: str, ledger_text: str) -> list[IncidentDecodeError]:
        """Adopt the incident and ledger that a resubmission record (agent.core.resubmission) kept for the
        deleted job `job_uid`, unless this store already knows that UID. Only an ``acting`` incident is adopted
        (the resubmission it was carrying out is what is being finished). Returns what could not be read."""
        errors: list[IncidentDecodeError] = []
        if job_uid in self._jobs:
            return errors
        entry = _Entry()
        if ledger_text:
            try:
                entry.ledger = decode_ledger(ledger_text)
            except IncidentDecodeError as e:
                errors.append(e)
        if incident_text:
            try:
                incident = decode_incident(incident_text)
            except IncidentDecodeError as e:
                errors.append(e)
            else:
                if incident.phase is Phase.ACTING and incident.job_uid == job_uid:
                    entry.incident = incident
                else:
                    errors.append(IncidentDecodeError(INCIDENT_ANNOTATION, "not adopted: not the acting incident"))
        self._jobs[job_uid] = entry
        return errors

    def forget(self, job_uid: str) -> None:
        """Drop a deleted job."""
        self._jobs.pop(job_uid, None)

    def ledger(self, job_uid: str) -> RetryLedger:
        entry = self._jobs.get(job_uid)
        return entry.ledger if entry else RetryLedger()

    def incident(self, job_uid: str) -> Incident | None:
        """The job's open incident, or its last closed one, or None."""
        entry = self._jobs.get(job_uid)
        return entry.incident if entry else None

    def naming(self, fault: Fault) -> list[Incident]:
        """The incidents (each job's open or last closed one) whose fault list names `fault`
        (:meth:`Incident.names`): the jobs a predecessor's fault.detected of it may have named."""
        return [e.incident for e in self._jobs.values() if e.incident is not None and e.incident.names(fault)]

    def open_incidents(self) -> list[Incident]:
        return [e.incident for e in self._jobs.values() if e.incident is not None and e.incident.phase.open]

    def admit(self, job: JobRecord, fault: Fault, pods: Sequence[PodRecord] = ()) -> Admission:
        """Classify `fault` for `job`: join the open incident (JOINED), ignore it as older than the restart of the
        job's last closed incident of the same generation, or than a restart no incident records (STALE: see
        :meth:`covers`; `pods` are the job's pods the fault hits), or report that no incident covers it (NEW).
        HELD: the job's incident is held by the breaker; nothing is changed (the caller joins the fault to it with
        :meth:`join_held` while the breaker is open, else decides the fault again and opens on the held incident)."""
        entry = self._jobs.setdefault(job.uid, _Entry())
        current = entry.incident
        if current is not None and current.phase is Phase.HELD:
            return Admission.HELD
        if current is not None and current.phase.open:
            entry.incident = current.join(fault)
            entry.remember(fault)
            return Admission.JOINED
        if current is not None and current.generation == job.version:
            # The last restart already covered faults from before it. Compared at whole seconds because
            # Kubernetes times (a container's finishedAt) have second resolution.
            covered = current.restart_at or current.at(Phase.ACTING) or current.first_fault_at
            if fault.signal_time < covered.replace(microsecond=0):
                return Admission.STALE
        if _unrecorded_restart_after(job, entry.ledger, fault, pods):
            return Admission.STALE
        return Admission.NEW

    def note_joined(self, job: JobRecord, fault: Fault) -> bool:
        """Remember `fault` as one the job's open incident absorbs (a new leader re-evaluating an active fault
        the open incident covers), without counting it again. Returns False when the job has no open incident."""
        entry = self._jobs.get(job.uid)
        if entry is None or entry.incident is None or not entry.incident.phase.open:
            return False
        entry.remember(fault)
        return True

    def take_joined(self, job_uid: str) -> list[Fault]:
        """The faults that joined the job's incident since it opened, oldest first, and forget them. Called when
        the incident closes: those still active on the job's current pods are decided again (a fault that
        joined a restart in progress may sit on a pod that restart created)."""
        entry = self._jobs.get(job_uid)
        if entry is None:
            return []
        joined, entry.joined = list(entry.joined.values()), {}
        return joined

    def covers(self, job: JobRecord, fault: Fault, pods: Sequence[PodRecord] = ()) -> bool:
        """True when `job`'s incident (open but not held by the breaker, or closed having restarted the job, in any
        generation) already covers `fault`: it is open, or its restart (else its acting step, else its closing: an
        abort) is at or after the fault's own time (whole seconds). Used when a new leader re-evaluates faults that
        are still active.

        Also True for a restart no incident records: the job's Volcano ``retryCount`` is above the ledger's
        ``restarts_used`` (every restart the agent sends is charged to the ledger in the same write that records
        its incident, the claim; a restart written without it is one whose claim was lost: a leader that died
        between its concurrent writes, agent.engine.sending) and every pod in `pods` (those the fault hits) was
        created at or after the fault's own second: those pods were started by a restart that came after the
        fault. (A person's or Volcano's own restart looks the same and is treated the same.) Volcano counts every
        RestartJob (``status.retryCount++`` in pkg/controllers/job/state/running.go, RestartJobAction); an
        AscendJob has no such counter, so a restart by pod deletions whose claim was lost is not recognised here."""
        entry = self._jobs.get(job.uid)
        current = entry.incident if entry else None
        if current is not None and current.phase is Phase.HELD:
            return False  # nothing was done for it yet: decided again (joined while the breaker stays open)
        if current is not None:
            if current.phase.open:
                return True
            acted = current.restart_at or current.at(Phase.ACTING) or current.closed_at
            if acted is not None and fault.signal_time.replace(microsecond=0) <= acted:
                return True
        return _unrecorded_restart_after(job, entry.ledger if entry else RetryLedger(), fault, pods)

    def open(self, job: JobRecord, fault: Fault, decision: Decision, now: datetime) -> Incident:
        """Open an incident for `job` acting on `decision` (phase ``acting``; ``detected`` is stamped with
        the fault's own time). The ledger is charged at once, so a crash after this point cannot spend the
        budget twice.

        Raises:
            TransitionError: the job already has an open incident (call :meth:`admit` first).
        """
        entry = self._jobs.setdefault(job.uid, _Entry())
        held = entry.incident if entry.incident is not None and entry.incident.phase is Phase.HELD else None
        if entry.incident is not None and entry.incident.phase.open and held is None:
            raise TransitionError(f"job {job.namespace}/{job.name} already has open incident {entry.incident.id}")
        seq = entry.ledger.incidents + 1
        if job.kind is JobKind.VOLCANO and job.retry_count > entry.ledger.restarts_used:
            # Volcano restarted the job without us (a policy, a person): the ledger follows the job's own counter
            entry.ledger = replace(entry.ledger, restarts_used=job.retry_count)
        if held is not None:
            # the incident the breaker held goes on (same id: it charged nothing, so `seq` is still its number)
            incident = held if held.names(fault) else held.join(fault)
        else:
            incident = self._new(job, fault, seq, now)
        if decision.action.value == "abort":
            incident = replace(incident, action=decision.action.value, reason=decision.reason).move(
                Phase.FAILED, now, detail=decision.reason
            )
        else:
            # a pod-level restart's pods go into the record the claim writes: a successor resuming the incident
            # restarts those pods, not the whole job (the decision itself is not persisted)
            pods = decision.pods if decision.action in (Action.RESTART_PODS, Action.MARK_PODS) else ()
            incident = incident.move(
                Phase.ACTING, now, action=decision.action.value, mode=decision.mode.value, reason=decision.reason,
                pods=pods, pod_status=decision.pod_status,
            )  # fmt: skip
        entry.incident = incident
        entry.joined = {}
        entry.ledger = replace(entry.ledger.charge(decision), incidents=seq)
        return incident

    @staticmethod
    def _new(job: JobRecord, fault: Fault, seq: int, now: datetime) -> Incident:
        """A ``detected`` incident of `job` (its `seq`-th) for `fault`, stamped with the fault's own time."""
        detected_at = min(fault.signal_time, now)
        return Incident(
            id=incident_id(job, seq),
            job_uid=job.uid,
            kind=job.kind.value,
            namespace=job.namespace,
            name=job.name,
            generation=job.version,
            phase=Phase.DETECTED,
            first_fault_at=detected_at,
            steps=((Phase.DETECTED, detected_at),),
        ).join(fault)

    def hold(self, job: JobRecord, fault: Fault, decision: Decision, now: datetime, reason: str) -> Incident:
        """Open `job`'s incident held by the circuit breaker (``detected`` → ``held-by-breaker``): the policy's
        `decision` (action and mode kept: what a reset will do if still needed) was refused by the open breaker;
        `reason` says so (never the decision's "restarting …" text). Nothing is charged to the ledger, so the
        incident keeps its id when it goes on to ``acting`` after a reset (:meth:`open`). Later faults of the job
        join it (:meth:`join_held`).

        Raises:
            TransitionError: the job already has an open incident (call :meth:`admit` first).
        """
        entry = self._jobs.setdefault(job.uid, _Entry())
        if entry.incident is not None and entry.incident.phase.open:
            raise TransitionError(f"job {job.namespace}/{job.name} already has open incident {entry.incident.id}")
        incident = self._new(job, fault, entry.ledger.incidents + 1, now).move(
            Phase.HELD, now, action=decision.action.value, mode=decision.mode.value, reason=reason
        )
        entry.incident = incident
        entry.joined = {}
        return incident

    def join_held(self, job_uid: str, fault: Fault) -> Incident | None:
        """Join `fault` to the job's held incident (not counted again when its list already names it: a fault
        decided again while the breaker stays open). Returns the incident, None when none is held."""
        entry = self._jobs.get(job_uid)
        if entry is None or entry.incident is None or entry.incident.phase is not Phase.HELD:
            return None
        if not entry.incident.names(fault):
            entry.incident = entry.incident.join(fault)
        return entry.incident

    def held_incidents(self) -> list[Incident]:
        """The incidents held by the circuit breaker now."""
        return [e.incident for e in self._jobs.values() if e.incident is not None and e.incident.phase is Phase.HELD]

    def counts(self) -> tuple[int, int]:
        """(open incidents, of which held by the breaker): the ``fault_agent_incidents_open`` and
        ``fault_agent_incidents_held`` gauges."""
        return len(self.open_incidents()), len(self.held_incidents())

    def _update(self, job_uid: str, phase: Phase, now: datetime, **changes: Any) -> Incident:
        entry = self._jobs.get(job_uid)
        if entry is None or entry.incident is None:
            raise TransitionError(f"job UID {job_uid}: no incident")
        entry.incident = entry.incident.move(phase, now, **changes)
        return entry.incident

    def restarting(
        self, job_uid: str, now: datetime, pod_uids: Iterable[str] = (), pod_names: Iterable[str] = ()
    ) -> Incident:
        """The restart request was sent at `now`; `pod_uids` are the pods it stops (never counted as failures),
        `pod_names` their names for a pod-level restart (the recovery check and the pending escalation read them).

        Raises:
            TransitionError: no incident, or it is not ``acting``.
        """
        entry = self._jobs.get(job_uid)
        if entry is not None:
            entry.ledger = entry.ledger.with_agent_pods(pod_uids)
        return self._update(job_uid, Phase.RESTARTING, now, restart_at=now, pods=tuple(pod_names))

    def escalate(self, job_uid: str, now: datetime, decision: Decision) -> Incident:
        """A ``restarting`` pod-level restart becomes the whole-job restart `decision` (``acting`` again, marked
        `escalated`); the ledger is charged for it. Once per incident.

        Raises:
            TransitionError: no incident, it is not ``restarting``, or it was escalated already.
        """
        entry = self._jobs.get(job_uid)
        if entry is None or entry.incident is None:
            raise TransitionError(f"job UID {job_uid}: no incident")
        if entry.incident.escalated:
            raise TransitionError(f"incident {entry.incident.id}: already escalated once")
        incident = self._update(
            job_uid, Phase.ACTING, now, action=decision.action.value, mode=decision.mode.value,
            reason=decision.reason, escalated=True,
        )  # fmt: skip
        entry.ledger = entry.ledger.charge(decision)
        return incident

    def resubmitted(self, old_uid: str, new_uid: str, now: datetime) -> Incident:
        """The job was deleted and created again as `new_uid` at `now`: its ``acting`` incident moves to
        ``restarting`` and, with the ledger, over to the new UID (recovered once the new job runs). The new job
        starts with fresh restart and business budgets; resubmissions used and the incident count carry over.

        Raises:
            TransitionError: no incident for `old_uid`, or it is not ``acting``.
        """
        entry = self._jobs.get(old_uid)
        if entry is None or entry.incident is None:
            raise TransitionError(f"job UID {old_uid}: no incident")
        incident = entry.incident.move(Phase.RESTARTING, now, restart_at=now, job_uid=new_uid)
        ledger = RetryLedger(
            resubmits_used=entry.ledger.resubmits_used,
            incidents=entry.ledger.incidents,
            agent_pod_uids=entry.ledger.agent_pod_uids,
        )
        del self._jobs[old_uid]
        self._jobs[new_uid] = _Entry(ledger, incident, entry.joined)
        return incident

    def recovered_unrestarted(self, job_uid: str, now: datetime, detail: str) -> Incident:
        """Close an ``acting`` incident (or one ``held-by-breaker``) as recovered without its restart: the new leader
        that found it (the tick, for a held one) found its faults cleared and the job healthy (see the engine's
        resume). `detail` says so.

        Raises:
            TransitionError: no incident, or it is neither ``acting`` nor held.
        """
        entry = self._jobs.get(job_uid)
        if entry is None or entry.incident is None:
            raise TransitionError(f"job UID {job_uid}: no incident")
        if entry.incident.phase not in (Phase.ACTING, Phase.HELD):
            raise TransitionError(f"incident {entry.incident.id}: only an acting or held incident recovers unrestarted")
        return self._update(job_uid, Phase.RECOVERED, now, detail=detail)

    def fail(self, job_uid: str, now: datetime, detail: str) -> Incident:
        """Close the incident as failed with `detail`.

        Raises:
            TransitionError: no incident, or it is already closed.
        """
        return self._update(job_uid, Phase.FAILED, now, detail=detail)

    def observe(
        self,
        job: JobRecord,
        pods: Iterable[PodRecord],
        now: datetime,
        recovery_deadline_s: float,
        *,
        faults_on_job: bool = False,
    ) -> Incident | None:
        """Advance `job`'s open incident from what the cluster shows: ``restarting`` → ``recovered`` when
        :func:`recovered` holds (`faults_on_job`: an active fault still hits the job's live pods, read for a
        hand-off); ``restarting`` → ``failed`` at once when the
        job's controller gave the job up (:func:`agent.core.policy.controller_ended_job`: Volcano marks it Failed at
        ``retryCount == maxRetry``); any open phase → ``failed`` when the first fault is more than
        `recovery_deadline_s` old. Returns the incident when it changed, else None."""
        entry = self._jobs.get(job.uid)
        incident = entry.incident if entry else None
        if incident is None or not incident.phase.open:
            return None
        if incident.phase is Phase.RESTARTING and recovered(incident, job, pods, faults_on_job=faults_on_job):
            return self._update(job.uid, Phase.RECOVERED, now)
        ended = controller_ended_job(job) if incident.phase is Phase.RESTARTING else None
        # A resubmission starts from a Failed job: that job, still of the incident's generation, is not news.
        if ended is not None and not (incident.action == "resubmit" and job.version == incident.generation):
            return self._update(job.uid, Phase.FAILED, now, detail=ended)
        if now - incident.first_fault_at > timedelta(seconds=recovery_deadline_s):
            if incident.phase is Phase.HELD:
                detail = (
                    f"held by the open circuit breaker for {recovery_deadline_s:.0f} s from the fault "
                    "(policy.recovery_deadline_s); the job was not restarted"
                )
            else:
                detail = f"not recovered within {recovery_deadline_s:.0f} s of the fault"
            return self._update(job.uid, Phase.FAILED, now, detail=detail)
        return None

    def encoded(self, job_uid: str) -> tuple[str, str]:
        """The job's (incident, ledger) as the record stores them now (agent.core.records): the incident's JSON
        ("" when it has none) and the ledger's."""
        entry = self._jobs.get(job_uid, _Entry())
        incident = "" if entry.incident is None else encode_incident(entry.incident)
        return incident, encode_ledger(entry.ledger)
