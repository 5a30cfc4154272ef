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

Modules: ``lifecycle`` (the incident's shape, phases, allowed steps, id), ``recovery`` (when a restarted job counts
as recovered), ``wire`` (the JSON of an incident and a ledger, the checks before adopting one), ``store`` (each
job's incident and ledger, and the steps the engine takes on them). This package's names are the public face.
"""

from agent.core.incidents.lifecycle import (
    MAX_FAULTS_KEPT,
    NEXT_PHASES,
    Incident,
    Phase,
    TransitionError,
    describe_fault,
    fault_place,
    incident_id,
    make_incident_id,
)
from agent.core.incidents.recovery import HOT_SWITCH_BACKUP_INFIX, job_healthy, recovered
from agent.core.incidents.store import MAX_JOINED_KEPT, Admission, IncidentStore
from agent.core.incidents.wire import (
    ANNOTATION_PREFIX,
    EARLIEST_INCIDENT,
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    MAX_CLOCK_SKEW,
    RESUBMIT_COUNT_ANNOTATION,
    RESUBMITTED_FROM_ANNOTATION,
    IncidentDecodeError,
    check_incident,
    decode_incident,
    decode_ledger,
    encode_incident,
    encode_ledger,
)

__all__ = [
    "ANNOTATION_PREFIX",
    "EARLIEST_INCIDENT",
    "HOT_SWITCH_BACKUP_INFIX",
    "INCIDENT_ANNOTATION",
    "LEDGER_ANNOTATION",
    "MAX_CLOCK_SKEW",
    "MAX_FAULTS_KEPT",
    "MAX_JOINED_KEPT",
    "NEXT_PHASES",
    "RESUBMITTED_FROM_ANNOTATION",
    "RESUBMIT_COUNT_ANNOTATION",
    "Admission",
    "Incident",
    "IncidentDecodeError",
    "IncidentStore",
    "Phase",
    "TransitionError",
    "check_incident",
    "decode_incident",
    "decode_ledger",
    "describe_fault",
    "encode_incident",
    "encode_ledger",
    "fault_place",
    "incident_id",
    "job_healthy",
    "make_incident_id",
    "recovered",
]
