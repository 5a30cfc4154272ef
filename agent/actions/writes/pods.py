"""The pod writes: a job's pods listed and read back, deleted with a UID precondition, marked for
``fault-scheduling: external-*``.

The answers of the pod reads are read as raw JSON for the few fields used (name, UID, deletionTimestamp, the
controller ownerReference, the generation marker): the generated ``V1Pod`` is never built (for a job of hundreds of
pods that is hundreds of milliseconds on the event loop, in the middle of a restart: bench/bench_restart_writes.py).
Pod labels and markers: Volcano ``volcano.sh/job-name`` label and ``volcano.sh/job-version`` annotation; the Ascend
Operator's ``training.kubeflow.org/job-name`` / ``job-name`` and ``version`` labels (shared/DOMAIN.md §2).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog
from kubernetes_asyncio import client as k8s

from agent.actions.results import ActionResult, combine
from agent.actions.writes.base import AS_MERGE_PATCH, WriterBase, answer
from agent.core.cluster import JobKind, JobRef
from agent.core.jobset import JOBSET_NAME_LABEL, JOBSET_UID_LABEL, RESTART_ATTEMPT_LABEL
from agent.kube.errors import KubeApiError, StreamCorrupt

log = structlog.get_logger(__name__)

POD_READS_IN_FLIGHT = 16  # pods_remaining's GETs at once: a large job's follow-up in a few round trips
POD_SELECTORS: dict[JobKind, tuple[str, ...]] = {
    JobKind.VOLCANO: ("volcano.sh/job-name",),
    JobKind.ASCEND: ("training.kubeflow.org/job-name", "job-name"),
    JobKind.JOBSET: (JOBSET_NAME_LABEL,),
}
"""The label keys whose value is the job's name on its pods, per job kind."""


@dataclass(frozen=True, slots=True)
class PodRef:
    """A pod to delete: namespace, name and the UID the deletion is conditioned on; `version` is the job
    generation the pod was made for when known (the AscendJob pod's ``version`` label, the Volcano pod's
    ``volcano.sh/job-version`` annotation; "" when unknown), not part of its identity."""

    namespace: str
    name: str
    uid: str
    version: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"Pod/{self.namespace}/{self.name}"


class PodWrites(WriterBase):
    """The pod reads and writes (:class:`WriterBase` for the plumbing)."""

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        """The job's pods (not yet terminating) by its Volcano or AscendJob labels (a read; also in dry-run), only
        those whose controller ownerReference names the job's UID when `job` has one: a pod carrying a job's label
        without being the job's is never the job's to delete (the admission policy's ``pods`` rule refuses it too).

        The answer is read as raw JSON for each item's name, UID and deletionTimestamp only: the generated
        ``V1PodList`` is never built (for a job of hundreds of pods that is hundreds of milliseconds on the event
        loop, in the middle of a restart: bench/bench_restart_writes.py).

        Raises:
            KubeError: the list failed; StreamCorrupt: its answer is not a pod list.
        """
        found: dict[str, PodRef] = {}
        for key in POD_SELECTORS[job.kind]:
            body = await answer(
                await self.core.list_namespaced_pod(
                    job.namespace, label_selector=f"{key}={job.name}", _preload_content=False
                )
            )
            for name, uid, version in live_pods(body, f"pods of {job}", job.kind, job.uid):
                found[uid] = PodRef(job.namespace, name, uid, version)
        return sorted(found.values(), key=lambda p: p.name)

    async def delete_pod(self, pod: PodRef, *, incident: str, grace_seconds: int | None) -> ActionResult:
        """Delete one pod with a UID precondition; `grace_seconds` None honours the pod's
        terminationGracePeriodSeconds, 0 deletes at once (force)."""
        options = k8s.V1DeleteOptions(
            grace_period_seconds=grace_seconds, preconditions=k8s.V1Preconditions(uid=pod.uid)
        )
        how = (
            "at once"
            if grace_seconds == 0
            else "with its grace period"
            if grace_seconds is None
            else f"grace {grace_seconds} s"
        )

        async def call() -> bytes:  # the answer (the pod, or a Status) is not needed: never built into a V1Pod
            return await answer(
                await self.core.delete_namespaced_pod(pod.name, pod.namespace, body=options, _preload_content=False)
            )

        result, _ = await self._write("delete-pod", str(pod), incident, call, done=f"delete {pod} {how}")
        return result

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        """Delete `pods` (see :meth:`delete_pod`), concurrently; one combined result.

        The first pod's request leaves in the caller's own step (its delete runs inline, the others in tasks of
        their own, created first so that they follow at once): a restart's first deletion is not a loop turn
        behind the tasks scheduled with it (the restart's list of the job's pods; agent.actions.recovery), each
        turn behind every callback ready on a busy loop. Raises what a deletion raises (NotLeader: the lease fence
        refused it) once every other deletion ended."""
        if not pods:
            return combine("delete-pods", target or "0 pods", [])
        rest = [
            asyncio.ensure_future(self.delete_pod(p, incident=incident, grace_seconds=grace_seconds)) for p in pods[1:]
        ]
        try:
            first = await self.delete_pod(pods[0], incident=incident, grace_seconds=grace_seconds)
        except BaseException:
            await asyncio.gather(*rest, return_exceptions=True)
            raise
        results = [first, *await asyncio.gather(*rest)]
        return combine("delete-pods", target or f"{len(pods)} pods", results)

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        """Those of `pods` that still exist with the same UID, in the order given (used before forcing the old
        pods of a restart: the force and grace follow-ups).

        One GET per pod, up to :data:`POD_READS_IN_FLIGHT` at once (a restart's follow-up reads every pod of the
        job, hundreds for a large one, and must not take a round trip per pod), each body read as raw JSON for
        its ``metadata.uid`` only: the generated ``V1Pod`` is never built (tens of KB of model objects per pod
        of a training job, all on the event loop).

        Raises:
            KubeError: a read answered other than 200 or 404 (the first such; every read has finished), or
                failed; StreamCorrupt: a 200 whose body is not a pod.
        """
        gate = asyncio.Semaphore(POD_READS_IN_FLIGHT)

        async def there(pod: PodRef) -> bool:
            async with gate:
                try:
                    body = await answer(
                        await self.core.read_namespaced_pod(pod.name, pod.namespace, _preload_content=False)
                    )
                except KubeApiError as e:
                    if e.status == 404:
                        return False
                    raise
            try:
                meta = orjson.loads(body).get("metadata")
            except (orjson.JSONDecodeError, AttributeError) as e:
                raise StreamCorrupt(f"pod {pod.namespace}/{pod.name}: body not a pod") from e
            return isinstance(meta, dict) and meta.get("uid") == pod.uid

        found = await asyncio.gather(*(there(p) for p in pods), return_exceptions=True)
        for f in found:
            if isinstance(f, BaseException):
                raise f
        return [p for p, f in zip(pods, found, strict=True) if f is True]

    async def annotate_pod(self, pod: PodRef, annotations: Mapping[str, str], *, incident: str) -> ActionResult:
        """Merge `annotations` into the pod's metadata, conditioned on its UID (``metadata.uid`` in the merge patch:
        the apiserver refuses the patch with 422, "metadata.uid: field is immutable", when the pod of that name is
        another one; seen on the testbed's 1.34 apiserver). Used for ``fault-scheduling: external-*`` only
        (``huawei.com/pod-status``, agent.core.policy.POD_STATUS_ANNOTATION), whose keys and string values are
        always valid, so a 422 can only be that refusal. 404 (gone), 409 and 422 (replaced) count as already done:
        the pod the mark was meant for is no more."""
        patch = {"metadata": {"uid": pod.uid, "annotations": dict(annotations)}}

        async def call() -> bytes:
            return await answer(
                await self.core.patch_namespaced_pod(
                    pod.name, pod.namespace, patch, _preload_content=False, **AS_MERGE_PATCH
                )
            )

        done = "; ".join(f"set annotation {k}={v}" for k, v in annotations.items())
        result, _ = await self._write("annotate-pod", str(pod), incident, call, done=done, already=(404, 409, 422))
        return result


def live_pods(body: bytes, what: str, kind: JobKind | None = None, owner_uid: str = "") -> list[tuple[str, str, str]]:
    """(name, UID, version) of each pod of a raw PodList answer that is not terminating (no ``deletionTimestamp``)
    and, when `owner_uid` is given, whose controller ownerReference has that UID (others are logged and left);
    version is the generation the pod was made for (`kind`'s marker: :func:`pod_version`), "" when unknown.

    Raises:
        StreamCorrupt: `body` is not a JSON object with an ``items`` list, or an item lacks its name or UID.
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise StreamCorrupt(f"listing {what}: answer is not JSON: {e}") from e
    if not isinstance(doc, dict) or "items" not in doc:
        raise StreamCorrupt(f"listing {what}: answer is not a list of pods")
    items = doc["items"] if doc["items"] is not None else []  # Go's encoding of an empty (nil) slice is null
    if not isinstance(items, list):
        raise StreamCorrupt(f"listing {what}: answer is not a list of pods")
    out: list[tuple[str, str, str]] = []
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            raise StreamCorrupt(f"listing {what}: an item without metadata")
        name, uid = meta.get("name"), meta.get("uid")
        if not (isinstance(name, str) and name and isinstance(uid, str) and uid):
            raise StreamCorrupt(f"listing {what}: a pod without its name or UID")
        if meta.get("deletionTimestamp"):
            continue
        if owner_uid and _job_uid(meta, kind) != owner_uid:
            log.warning("pod not owned by the job left alone", pod=name, job=what, owner_uid=_job_uid(meta, kind))
            continue
        out.append((name, uid, pod_version(meta, kind)))
    return out


def _controller_uid(meta: Mapping[str, Any]) -> str:
    """The UID of the controller ownerReference in a pod's metadata, "" when it has none."""
    owners = meta.get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if isinstance(owner, dict) and owner.get("controller") is True:
            uid = owner.get("uid")
            return uid if isinstance(uid, str) else ""
    return ""


def _job_uid(meta: Mapping[str, Any], kind: JobKind | None) -> str:
    """The UID of the job a pod belongs to: a JobSet pod's ``jobset.sigs.k8s.io/jobset-uid`` label (its controller
    owner is the child batch Job), else its controller ownerReference's UID; "" when it has none."""
    if kind is JobKind.JOBSET:
        labels = meta.get("labels")
        value = labels.get(JOBSET_UID_LABEL) if isinstance(labels, dict) else None
        return value if isinstance(value, str) else ""
    return _controller_uid(meta)


def pod_version(meta: Mapping[str, Any], kind: JobKind | None) -> str:
    """The job generation a pod was made for, from its metadata: an AscendJob pod's ``version`` label (the Ascend
    Operator's restart counter), a Volcano pod's ``volcano.sh/job-version`` annotation; "" when absent or unknown."""
    if kind is JobKind.ASCEND:
        value = (meta.get("labels") or {}).get("version") if isinstance(meta.get("labels"), dict) else None
    elif kind is JobKind.VOLCANO:
        notes = meta.get("annotations")
        value = notes.get("volcano.sh/job-version") if isinstance(notes, dict) else None
    elif kind is JobKind.JOBSET:
        value = (meta.get("labels") or {}).get(RESTART_ATTEMPT_LABEL) if isinstance(meta.get("labels"), dict) else None
    else:
        value = None
    return value if isinstance(value, str) else ""
