"""The resubmission (only when ``policy.resubmit_limit`` > 0): a Failed job deleted (UID precondition) and created
again from its own spec with lineage annotations (:data:`~agent.core.incidents.RESUBMITTED_FROM_ANNOTATION`,
:data:`~agent.core.incidents.RESUBMIT_COUNT_ANNOTATION`).

The body is recorded in a ConfigMap of the agent's namespace before the delete (agent.core.resubmission), so a
resubmission cut short after it is finished by the leader (:meth:`ResubmissionWrites.finish_resubmission`) instead
of losing the job.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import structlog
from kubernetes_asyncio import client as k8s

from agent.actions.results import ActionResult, Outcome
from agent.actions.writes.base import failed
from agent.actions.writes.configmaps import ConfigMapWrites
from agent.actions.writes.jobs import JOB_API, JobWrites
from agent.core import resubmission
from agent.core.cluster import JobRef
from agent.core.fence import ACTOR_ANNOTATION
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    RESUBMIT_COUNT_ANNOTATION,
    RESUBMITTED_FROM_ANNOTATION,
)
from agent.kube.errors import KubeApiError

log = structlog.get_logger(__name__)

# an earlier version's incident state on the old job (agent.core.records.LEGACY_ANNOTATIONS), not carried over
_AGENT_STATE_ANNOTATIONS = (INCIDENT_ANNOTATION, LEDGER_ANNOTATION, ACTOR_ANNOTATION)
_SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "managedFields",
    "creationTimestamp",
    "ownerReferences",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "finalizers",
)


def resubmission_body(obj: Mapping[str, Any], *, from_uid: str, count: int) -> dict[str, Any]:
    """The object to create when resubmitting `obj` (a job as the apiserver returned it): its apiVersion, kind,
    metadata (name, namespace, labels, annotations) and spec; status and the server-set metadata (uid,
    resourceVersion, generation, managedFields, creationTimestamp, ownerReferences, deletion fields, finalizers)
    dropped; the agent's incident/ledger annotations of the old UID dropped; lineage annotations added."""
    meta = {k: v for k, v in dict(obj.get("metadata") or {}).items() if k not in _SERVER_METADATA}
    meta.pop("generateName", None)
    annotations = {k: v for k, v in dict(meta.get("annotations") or {}).items() if k not in _AGENT_STATE_ANNOTATIONS}
    annotations[RESUBMITTED_FROM_ANNOTATION] = from_uid
    annotations[RESUBMIT_COUNT_ANNOTATION] = str(count)
    meta["annotations"] = annotations
    body: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": meta}
    if "spec" in obj:
        body["spec"] = json.loads(json.dumps(obj["spec"]))  # a deep copy
    return body


class ResubmissionWrites(JobWrites, ConfigMapWrites):
    """The resubmission's reads and writes (the job reads of :class:`JobWrites`, the record read of
    :class:`ConfigMapWrites`)."""

    async def resubmit_job(
        self, job: JobRef, *, incident: str, count: int, wait_s: float = 30.0, poll_s: float = 0.2
    ) -> ActionResult:
        """Delete `job` (UID precondition, background propagation) and create it again from its own spec
        (:func:`resubmission_body`, lineage annotations with `count`). The result's `uid` and `name` are the new
        job's. Safe to repeat: a job of that name already resubmitted from `job.uid` is ALREADY_DONE (404/409 on
        the delete are someone else having deleted it).

        Durable: before the delete, the body, the old job's incident and ledger (its record) and the lineage are
        written to the ConfigMap ``fault-agent-resubmit-<old uid>`` in `state_namespace`
        (agent.core.resubmission), deleted once the new job exists; a resubmission cut short after the delete (the
        agent died, lost its lease, the create failed) is finished from it by :meth:`finish_resubmission`. An old
        job already gone whose ConfigMap is there is created from it.

        Returns FAILED (not retriable) when the name now holds an unrelated object, when the record does not fit
        in a ConfigMap (the job is then not deleted), or when the old job is gone without a resubmitted one or a
        record; FAILED (retriable) when the record cannot be written (nothing deleted), the old job is still
        there after `wait_s` seconds or the API fails. A FAILED result after the delete names the ConfigMap
        that keeps the resubmission in `kept`.

        Raises:
            NotLeader: the fence closed before a write (a recorded resubmission is left for the next leader).
        """
        action, target = "resubmit", str(job)
        group, version, plural, _ = JOB_API[job.kind]

        def found(obj: Mapping[str, Any]) -> ActionResult | None:
            meta = obj.get("metadata") or {}
            if meta.get("uid") == job.uid:
                return None
            if (meta.get("annotations") or {}).get(RESUBMITTED_FROM_ANNOTATION) == job.uid:
                log.info("job already resubmitted", target=target, incident=incident, uid=meta.get("uid"))
                return ActionResult(
                    action, target, Outcome.ALREADY_DONE, "already resubmitted", name=job.name, uid=meta.get("uid", "")
                )
            return ActionResult(action, target, Outcome.FAILED, f"{target} is now another object, not resubmitted")

        try:
            current = await self._read_job(job)
        except KubeApiError as e:
            return failed(action, target, e, retriable=bool(e.status and e.status >= 500))
        if current is None:
            try:
                pending = await self._read_resubmission(resubmission.configmap_name(job.uid))
            except (KubeApiError, resubmission.ResubmissionDecodeError) as e:
                return ActionResult(action, target, Outcome.FAILED, f"reading its resubmission record: {e}", True)
            if pending is None:
                return ActionResult(action, target, Outcome.FAILED, "job gone before it was resubmitted; spec lost")
            return await self._create_recorded(pending, incident)
        other = found(current)
        if other is not None:
            return await self._done_with_record(other, job.uid, incident)
        body = resubmission_body(current, from_uid=job.uid, count=count)
        annotations = (current.get("metadata") or {}).get("annotations") or {}
        try:  # the incident the claim wrote: the job's record (an earlier version's: the job's annotations)
            record = await self.read_record(job)
        except KubeApiError as e:
            return ActionResult(action, target, Outcome.FAILED, f"reading its record: HTTP {e.status}", True)
        pending = resubmission.PendingResubmission(
            job.kind, job.namespace, job.name, job.uid, incident, count, body,
            incident_state=record.incident if record else str(annotations.get(INCIDENT_ANNOTATION, "")),
            ledger=record.ledger if record else str(annotations.get(LEDGER_ANNOTATION, "")),
        )  # fmt: skip
        try:
            data = resubmission.encode(pending)
        except resubmission.BodyTooLarge as e:
            log.warning("resubmission refused: record too large", target=target, incident=incident, detail=str(e))
            return ActionResult(action, target, Outcome.FAILED, str(e))
        if self.dry_run:
            log.info("dry-run: write skipped", action=action, target=target, incident=incident, would="resubmit")
            return ActionResult(action, target, Outcome.DRY_RUN, "dry run: would delete and create the job again")
        recorded = await self._write_record(pending, data, incident)
        if recorded.outcome is Outcome.FAILED:  # nothing deleted: the job stays as it is
            return ActionResult(
                action, target, Outcome.FAILED, f"resubmission record not written: {recorded.detail}",
                recorded.retriable, recorded.status,
            )  # fmt: skip
        kept = pending.configmap

        options = k8s.V1DeleteOptions(propagation_policy="Background", preconditions=k8s.V1Preconditions(uid=job.uid))

        async def delete() -> Any:
            return await self.custom.delete_namespaced_custom_object(
                group, version, job.namespace, plural, job.name, body=options
            )

        deleted, _ = await self._write("resubmit-delete", target, incident, delete, done=f"delete {target}")
        if deleted.outcome is Outcome.FAILED and not deleted.retriable:
            # refused (403 from RBAC or the admission policy, 409: the name holds another UID, 422): nothing was
            # deleted, so the record is of no use; kept, it would have the incident retry the refused delete on
            # every tick. Best effort: a record left is deleted as stale later (agent.engine.resubmitting).
            forgot = await self.forget_resubmission(job.uid, incident=incident)
            if forgot.outcome is Outcome.FAILED:
                log.warning("resubmission record not deleted after a refused delete", target=target,
                            configmap=kept, detail=forgot.detail)  # fmt: skip
            return ActionResult(
                action, target, Outcome.FAILED, f"delete refused: {deleted.detail}", False, deleted.status
            )
        if deleted.outcome is Outcome.FAILED:  # a 5xx or no answer: the delete may have happened
            return ActionResult(
                action, target, Outcome.FAILED, deleted.detail, deleted.retriable, deleted.status, kept=kept
            )
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:  # the old object must be gone before its name can be used again
            try:
                current = await self._read_job(job)
            except KubeApiError as e:
                return failed(action, target, e, retriable=True, kept=kept)
            if current is None:
                break
            other = found(current)
            if other is not None:
                return await self._done_with_record(other, job.uid, incident)
            if asyncio.get_running_loop().time() > deadline:
                detail = f"old job still there after {wait_s:.0f} s"
                return ActionResult(action, target, Outcome.FAILED, detail, True, kept=kept)
            await asyncio.sleep(poll_s)
        return await self._create_recorded(pending, incident)

    async def _create_recorded(self, pending: resubmission.PendingResubmission, incident: str) -> ActionResult:
        """Create the job of `pending` from its stored body; its ConfigMap deleted once the job exists (ours, or
        already made from that UID). A FAILED result keeps the ConfigMap (`kept`).

        Raises:
            NotLeader: the fence is closed (nothing sent; the ConfigMap stays for the next leader).
        """
        action = "resubmit"
        ref = JobRef(pending.kind, pending.namespace, pending.name, pending.from_uid)
        target = str(ref)
        group, version, plural, _ = JOB_API[pending.kind]
        body = json.loads(json.dumps(pending.body))

        async def create() -> Any:
            return await self.custom.create_namespaced_custom_object(group, version, pending.namespace, plural, body)

        created_result, created = await self._write(
            "resubmit-create", target, incident, create, done=f"create {target} again (resubmission {pending.count})"
        )
        if created is not None:
            uid = created["metadata"]["uid"]
            done = ActionResult(action, target, Outcome.DONE, f"resubmitted as UID {uid}", name=pending.name, uid=uid)
            return await self._done_with_record(done, pending.from_uid, incident)
        kept = pending.configmap
        if created_result.outcome is Outcome.ALREADY_DONE:  # 409: someone created it meanwhile; ours?
            try:
                current = await self._read_job(ref)
            except KubeApiError as e:
                return failed(action, target, e, retriable=True, kept=kept)
            what = resubmission.leftover_action(pending, current)
            if what is resubmission.Leftover.FINISHED and current is not None:
                uid = str((current.get("metadata") or {}).get("uid", ""))
                log.info("job already resubmitted", target=target, incident=incident, uid=uid)
                done = ActionResult(action, target, Outcome.ALREADY_DONE, "already resubmitted", name=pending.name,
                                    uid=uid)  # fmt: skip
                return await self._done_with_record(done, pending.from_uid, incident)
            if what is resubmission.Leftover.CONFLICT:
                detail = f"{target} is now another object, not resubmitted; {kept} kept"
                return ActionResult(action, target, Outcome.FAILED, detail, kept=kept)
        return ActionResult(
            action, target, Outcome.FAILED, created_result.detail, created_result.retriable, created_result.status,
            kept=kept,
        )  # fmt: skip

    async def _done_with_record(self, result: ActionResult, from_uid: str, incident: str) -> ActionResult:
        """`result` unchanged; when it names the new job, the resubmission's ConfigMap is deleted first (404: none,
        or already deleted). A failed delete is logged and left: the next leader's pass finds the job made and
        deletes it then."""
        if result.outcome is Outcome.FAILED or not result.uid:
            return result
        deleted = await self.forget_resubmission(from_uid, incident=incident)
        if deleted.outcome is Outcome.FAILED:
            log.warning("resubmission record left", incident=incident, target=deleted.target, detail=deleted.detail)
        return result

    async def _write_record(
        self, pending: resubmission.PendingResubmission, data: dict[str, str], incident: str
    ) -> ActionResult:
        """Create the resubmission ConfigMap; one already there (a retry of the same resubmission) is replaced."""
        ns, name = self.state_namespace, pending.configmap
        target = f"ConfigMap/{ns}/{name}"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {resubmission.RESUBMISSION_LABEL: "true", "app.kubernetes.io/name": "fault-agent"},
            },
            "data": data,
        }

        async def create() -> Any:
            return await self.core.create_namespaced_config_map(ns, body)

        result, _ = await self._write("resubmit-record", target, incident, create, done=f"record {pending}",
                                      already=(409,))  # fmt: skip
        if result.outcome is not Outcome.ALREADY_DONE:
            return result

        async def replace() -> Any:
            return await self.core.replace_namespaced_config_map(name, ns, body)

        replaced, _ = await self._write("resubmit-record", target, incident, replace, done=f"record {pending} again",
                                        already=())  # fmt: skip
        return replaced

    async def _read_resubmission(self, name: str) -> resubmission.PendingResubmission | None:
        """The resubmission ConfigMap `name` in `state_namespace`, None on 404.

        Raises:
            KubeError: any other error. ResubmissionDecodeError: it cannot be read.
        """
        try:
            cm = await self.core.read_namespaced_config_map(name, self.state_namespace)
        except KubeApiError as e:
            if e.status == 404:
                return None
            raise
        return resubmission.decode(name, dict(cm.data or {}))

    async def pending_resubmissions(
        self,
    ) -> tuple[list[resubmission.PendingResubmission], list[resubmission.ResubmissionDecodeError]]:
        """The resubmission ConfigMaps left in `state_namespace` (listed by :data:`resubmission.RESUBMISSION_LABEL`),
        read back, in name order, and those that could not be read. A read: not fenced; also in dry-run.

        Raises:
            KubeError: the list failed.
        """
        listed = await self.core.list_namespaced_config_map(
            self.state_namespace, label_selector=f"{resubmission.RESUBMISSION_LABEL}=true"
        )
        found: list[resubmission.PendingResubmission] = []
        errors: list[resubmission.ResubmissionDecodeError] = []
        for cm in sorted(listed.items, key=lambda c: c.metadata.name):
            try:
                found.append(resubmission.decode(cm.metadata.name, dict(cm.data or {})))
            except resubmission.ResubmissionDecodeError as e:
                errors.append(e)
        return found, errors

    async def finish_resubmission(
        self, pending: resubmission.PendingResubmission
    ) -> tuple[resubmission.Leftover, ActionResult, dict[str, str]]:
        """Carry on a resubmission left over (agent.core.resubmission.leftover_action): FINISHED: the new job's
        result (ALREADY_DONE, its `uid`); OLD_EXISTS: ALREADY_DONE with no `uid` (the old job's acting incident
        resumes it; nothing written); CREATE: the job created from the stored body (DONE with its `uid`) or
        FAILED; CONFLICT: FAILED, nothing written. The ConfigMap is NOT deleted here (the caller persists the
        incident on the new job first, then calls :meth:`forget_resubmission`). The third item is the new job's
        annotations (``{}`` when there is none). Dry-run: CREATE gives DRY_RUN.

        Raises:
            NotLeader: the fence is closed (nothing sent).
        """
        action = "resubmit-recover"
        ref = JobRef(pending.kind, pending.namespace, pending.name, pending.from_uid)
        target = str(ref)
        try:
            current = await self._read_job(ref)
        except KubeApiError as e:
            return resubmission.Leftover.CREATE, failed(action, target, e, retriable=True), {}
        what = resubmission.leftover_action(pending, current)
        meta = (current or {}).get("metadata") or {}
        annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
        if what is resubmission.Leftover.FINISHED:
            uid = str(meta.get("uid", ""))
            return what, ActionResult(action, target, Outcome.ALREADY_DONE, "already resubmitted", uid=uid), annotations
        if what is resubmission.Leftover.OLD_EXISTS:
            return what, ActionResult(action, target, Outcome.ALREADY_DONE, "old job still there"), {}
        if what is resubmission.Leftover.CONFLICT:
            detail = f"{target} holds another object (UID {meta.get('uid', '')}); {pending.configmap} kept"
            return what, ActionResult(action, target, Outcome.FAILED, detail), {}
        if self.dry_run:
            log.info("dry-run: write skipped", action=action, target=target, incident=pending.incident,
                     would="create the job from its resubmission record")  # fmt: skip
            return what, ActionResult(action, target, Outcome.DRY_RUN, "dry run: would create the job"), {}
        group, version, plural, _ = JOB_API[pending.kind]
        body = json.loads(json.dumps(pending.body))

        async def create() -> Any:
            return await self.custom.create_namespaced_custom_object(group, version, pending.namespace, plural, body)

        result, created = await self._write(
            action, target, pending.incident, create, done=f"create {target} from {pending.configmap}", already=(409,)
        )
        if created is not None:
            new_meta = created.get("metadata") or {}
            uid = str(new_meta.get("uid", ""))
            new_annotations = {str(k): str(v) for k, v in (new_meta.get("annotations") or {}).items()}
            return what, ActionResult(action, target, Outcome.DONE, f"created as UID {uid}", uid=uid), new_annotations
        if result.outcome is Outcome.ALREADY_DONE:  # 409: created meanwhile; the next pass looks at what it is
            return what, ActionResult(action, target, Outcome.FAILED, "created by someone meanwhile", True), {}
        return what, result, {}

    async def forget_resubmission(self, from_uid: str, *, incident: str) -> ActionResult:
        """Delete the resubmission ConfigMap of `from_uid` (the new job exists); 404 is ALREADY_DONE. Fenced; dry-run
        sends nothing.

        Raises:
            NotLeader: the fence is closed (nothing sent).
        """
        ns, name = self.state_namespace, resubmission.configmap_name(from_uid)

        async def delete() -> Any:
            return await self.core.delete_namespaced_config_map(name, ns)

        result, _ = await self._write(
            "resubmit-forget", f"ConfigMap/{ns}/{name}", incident, delete, done=f"delete {name}", already=(404,)
        )
        return result
