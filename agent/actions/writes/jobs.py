"""The job writes: the Volcano RestartJob Command, and the reads of a job's generation and metadata around it.

Formats: Volcano ``bus.volcano.sh/v1alpha1`` Command (``action: RestartJob``, ``target`` = owner reference to the
Job; shared/DOMAIN.md §2); Volcano ``batch.volcano.sh/v1alpha1`` Job ``status.version``; AscendJob
(``mindxdl.gitee.com/v1``) ``version`` label (the Ascend Operator's restart counter).
"""

from __future__ import annotations

import hashlib
from typing import Any

import structlog

from agent.actions.results import ActionResult, Outcome
from agent.actions.writes.base import WriterBase
from agent.core.cluster import JobKind, JobRef
from agent.kube.errors import KubeApiError

log = structlog.get_logger(__name__)

VOLCANO_GROUP, VOLCANO_VERSION, VOLCANO_PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
BUS_GROUP, BUS_VERSION, BUS_PLURAL = "bus.volcano.sh", "v1alpha1", "commands"
ASCEND_GROUP, ASCEND_VERSION, ASCEND_PLURAL = "mindxdl.gitee.com", "v1", "ascendjobs"
INCIDENT_LABEL = "fault-agent.io/incident"

JOB_API: dict[JobKind, tuple[str, str, str, str]] = {
    JobKind.VOLCANO: (VOLCANO_GROUP, VOLCANO_VERSION, VOLCANO_PLURAL, "Job"),
    JobKind.ASCEND: (ASCEND_GROUP, ASCEND_VERSION, ASCEND_PLURAL, "AscendJob"),
    JobKind.JOBSET: ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
}
"""(group, version, plural, kind) of each job kind's API."""


def label_value(text: str) -> str:
    """`text` if it is a valid label value length (<= 63), else a 40-hex digest of it."""
    return text if len(text) <= 63 else hashlib.sha256(text.encode()).hexdigest()[:40]


def command_name(job_name: str, incident: str) -> str:
    """The RestartJob Command's name for `incident` on the job named `job_name`:
    ``<job>-restartjob-<10 hex of sha256(incident)>``, the job part cut so the name stays within 253 characters
    (a DNS subdomain, like the job's own name)."""
    suffix = "-restartjob-" + hashlib.sha256(incident.encode()).hexdigest()[:10]
    return job_name[: 253 - len(suffix)].rstrip("-.") + suffix


class JobWrites(WriterBase):
    """The RestartJob Command and the job reads (:class:`WriterBase` for the plumbing)."""

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        """Create a Volcano ``RestartJob`` Command for `job`, owned by the Job and labelled with the incident.

        Its name is derived from the incident (:func:`command_name`): a create that finds the name taken (409) is
        ALREADY_DONE. The Volcano controller runs a Command once and deletes it, so a retry after a lost answer
        could find the name free again and restart the job a second time: the create is not repeated once it may
        have reached the apiserver (``repeatable=False``: a timeout, a broken answer or a 5xx is DONE,
        unconfirmed). The result's `name` is the Command's name.
        A 404 (no Command resource, namespace gone) is FAILED."""
        target = str(job)
        name = command_name(job.name, incident)
        owner = {
            "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
            "kind": "Job",
            "name": job.name,
            "uid": job.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        body = {
            "apiVersion": f"{BUS_GROUP}/{BUS_VERSION}",
            "kind": "Command",
            "metadata": {
                "name": name,
                "namespace": job.namespace,
                "labels": {INCIDENT_LABEL: label_value(incident)},
                "ownerReferences": [owner],
            },
            "action": "RestartJob",
            "target": owner,
            "reason": reason,
            "message": message[:1024],
        }

        async def call() -> Any:
            return await self.custom.create_namespaced_custom_object(
                BUS_GROUP, BUS_VERSION, job.namespace, BUS_PLURAL, body
            )

        result, _ = await self._write(
            "restart-command",
            target,
            incident,
            call,
            done=f"create RestartJob Command {name}",
            already=(409,),
            repeatable=False,
        )
        if result.outcome is Outcome.ALREADY_DONE:
            log.info("restart command exists", target=target, incident=incident, command=name)
            return ActionResult(result.action, target, result.outcome, f"Command {name} exists", name=name)
        return ActionResult(
            result.action, target, result.outcome, result.detail, result.retriable, result.status, name=name
        )

    async def _read_job(self, job: JobRef) -> dict[str, Any] | None:
        """The job object by name (whatever its UID), or None on 404.

        Raises:
            KubeError: any other error.
        """
        group, version, plural, _ = JOB_API[job.kind]
        try:
            obj: dict[str, Any] = await self.custom.get_namespaced_custom_object(
                group, version, job.namespace, plural, job.name
            )
        except KubeApiError as e:
            if e.status == 404:
                return None
            raise
        return obj

    async def job_version(self, job: JobRef) -> str | None:
        """The job's generation as text (Volcano ``status.version``, AscendJob ``version`` label; "" when unset),
        or None when the job (with this UID) is gone. A read; also in dry-run.

        Raises:
            KubeError: the read failed with something other than 404.
        """
        obj = await self._read_job(job)
        if obj is None or (obj.get("metadata") or {}).get("uid") != job.uid:
            return None
        if job.kind is JobKind.VOLCANO:
            value = (obj.get("status") or {}).get("version")
        elif job.kind is JobKind.JOBSET:
            value = (obj.get("status") or {}).get("restarts", 0)
        else:
            value = ((obj.get("metadata") or {}).get("labels") or {}).get("version")
        return "" if value is None else str(value)

    async def job_meta(self, job: JobRef) -> tuple[str, dict[str, str]] | None:
        """The job's (resourceVersion, annotations) as the apiserver has them now, or None when the job (with
        this UID) is gone. A read; also in dry-run.

        Raises:
            KubeError: the read failed with something other than 404.
        """
        obj = await self._read_job(job)
        meta = (obj or {}).get("metadata") or {}
        if obj is None or meta.get("uid") != job.uid:
            return None
        return str(meta.get("resourceVersion", "")), {
            str(k): str(v) for k, v in (meta.get("annotations") or {}).items()
        }
