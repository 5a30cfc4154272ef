"""The agent's record of one job: a ConfigMap the agent owns, in its own namespace. Pure: no I/O.

A job's incident, its retry ledger and the fencing actor mark live in one ConfigMap per job,
``fault-agent-job-<job UID>`` in ``leader.namespace`` (:func:`record_name`), never on the job object: the job's
controllers (Volcano's job controller, the Ascend Operator) update the job read-modify-write, and any write of ours
in between made their update fail with 409 (a lost Restarting condition; Volcano creating replacement pods, then
killing them). The only writes of the agent on a job are the restart itself (the RestartJob Command, pod deletions)
and a resubmission's delete and create.

Shape (the encodings of agent.core.incidents, unchanged from the annotations they replace):

- labels: :data:`RECORD_LABEL` ``true`` (the agent lists and watches its records by it),
  ``app.kubernetes.io/managed-by: fault-agent``, :data:`JOB_UID_LABEL` (the job's UID), :data:`JOB_KIND_LABEL`
  (``Job`` or ``AscendJob``), :data:`JOB_NAMESPACE_LABEL` and :data:`JOB_NAME_LABEL` (the name only when it fits
  a label value), so ``kubectl get cm -l fault-agent.io/job-name=NAME`` finds a job's record;
- annotations: the job's namespace and name under the same keys (a name may be longer than a label value);
- data: :data:`KEY_INCIDENT` (``encode_incident``, absent while the job never had one), :data:`KEY_LEDGER`
  (``encode_ledger``) and :data:`KEY_ACTOR` (``<identity>#<term>`` of the replica that claimed the job's incident:
  agent.core.fence).

Jobs written by earlier versions carry the same three values as annotations on the job
(:data:`LEGACY_ANNOTATIONS`); a job with such annotations and no record is adopted from them once, read only, and
its record written (agent.engine.recovery); from then on the record wins. The annotations are never written or
removed (that would be a write on the job).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.core.cluster import ConfigMapRecord, JobKind, JobRecord
from agent.core.fence import ACTOR_ANNOTATION
from agent.core.incidents import INCIDENT_ANNOTATION, LEDGER_ANNOTATION

RECORD_PREFIX = "fault-agent-job-"
RECORD_LABEL = "fault-agent.io/job-record"
"""Label (value ``true``) on every job record: the agent's list+watch selects by it."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
JOB_UID_LABEL = "fault-agent.io/job-uid"
JOB_KIND_LABEL = "fault-agent.io/job-kind"
JOB_NAMESPACE_LABEL = "fault-agent.io/job-namespace"
JOB_NAME_LABEL = "fault-agent.io/job-name"
"""Set only when the job's name fits a label value (63 characters); the annotation of the same key always holds it."""
JOB_NAMESPACE_ANNOTATION = JOB_NAMESPACE_LABEL
JOB_NAME_ANNOTATION = JOB_NAME_LABEL
KEY_INCIDENT = "incident"
KEY_LEDGER = "ledger"
KEY_ACTOR = "actor"
LEGACY_ANNOTATIONS = (INCIDENT_ANNOTATION, LEDGER_ANNOTATION, ACTOR_ANNOTATION)
"""The job annotations earlier versions wrote (read once to migrate, never written)."""


LABEL_VALUE_MAX = 63


def record_name(job_uid: str) -> str:
    """The record's ConfigMap name for the job with UID `job_uid`: ``fault-agent-job-<uid>`` (a UID is 36
    characters, so the name stays a valid DNS subdomain)."""
    return RECORD_PREFIX + job_uid


@dataclass(frozen=True, slots=True)
class JobStateRecord:
    """One job's record as read back (from the watch cache, a GET, or a job's legacy annotations).

    Attributes:
        job_uid: the job's UID (the record's :data:`JOB_UID_LABEL`).
        kind, namespace, name: the job (``Job``/``AscendJob`` API kind; "" when the record does not say).
        resource_version: the ConfigMap's resourceVersion (the claim's precondition); "" for one read from a job's
            legacy annotations (no record exists yet).
        incident, ledger, actor: the data keys ("" when absent).
        legacy: read from the job's annotations (no record yet): to be written as a record once.
    """

    job_uid: str
    kind: str = ""
    namespace: str = ""
    name: str = ""
    resource_version: str = ""
    incident: str = ""
    ledger: str = ""
    actor: str = ""
    legacy: bool = False

    @property
    def configmap(self) -> str:
        return record_name(self.job_uid)

    def data(self) -> dict[str, str]:
        """The record's data keys (absent values left out)."""
        return record_data(self.incident, self.ledger, self.actor)


def record_data(incident: str, ledger: str, actor: str) -> dict[str, str]:
    """The ConfigMap data of a record; empty values are left out."""
    out = {KEY_INCIDENT: incident, KEY_LEDGER: ledger, KEY_ACTOR: actor}
    return {k: v for k, v in out.items() if v}


def record_body(
    namespace: str, job_uid: str, kind: JobKind, job_namespace: str, job_name: str, data: Mapping[str, str]
) -> dict[str, Any]:
    """The whole ConfigMap of a job's record in `namespace` (the agent's), as sent to the apiserver."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": record_name(job_uid),
            "namespace": namespace,
            "labels": {
                RECORD_LABEL: "true",
                MANAGED_BY_LABEL: "fault-agent",
                JOB_UID_LABEL: job_uid,
                JOB_KIND_LABEL: kind.api_kind,
                JOB_NAMESPACE_LABEL: job_namespace,
                **({JOB_NAME_LABEL: job_name} if len(job_name) <= LABEL_VALUE_MAX else {}),
            },
            "annotations": {JOB_NAMESPACE_ANNOTATION: job_namespace, JOB_NAME_ANNOTATION: job_name},
        },
        "data": dict(data),
    }


def from_configmap(cm: ConfigMapRecord) -> JobStateRecord | None:
    """The record a watched ConfigMap holds, or None when it is not one (no :data:`JOB_UID_LABEL`). The job's
    namespace and name come from the labels ("" for a name too long for one)."""
    labels = dict(cm.labels)
    uid = labels.get(JOB_UID_LABEL, "")
    if not uid:
        return None
    return JobStateRecord(
        job_uid=uid,
        kind=labels.get(JOB_KIND_LABEL, ""),
        namespace=labels.get(JOB_NAMESPACE_LABEL, ""),
        name=labels.get(JOB_NAME_LABEL, ""),
        resource_version=cm.resource_version,
        incident=cm.data.get(KEY_INCIDENT, ""),
        ledger=cm.data.get(KEY_LEDGER, ""),
        actor=cm.data.get(KEY_ACTOR, ""),
    )


def from_legacy_annotations(job: JobRecord) -> JobStateRecord | None:
    """What an earlier version wrote on `job` itself (:data:`LEGACY_ANNOTATIONS`), None when it carries none."""
    incident = job.annotation(INCIDENT_ANNOTATION) or ""
    ledger = job.annotation(LEDGER_ANNOTATION) or ""
    actor = job.annotation(ACTOR_ANNOTATION) or ""
    if not (incident or ledger or actor):
        return None
    return JobStateRecord(job.uid, job.kind.api_kind, job.namespace, job.name, "", incident, ledger, actor, legacy=True)
