"""The agent's only cluster writer: restarts, pod deletions, rings-config reset, quarantine taints, job records.

Every write is safe to repeat: 404 and 409 (and a failed UID precondition, which the apiserver reports as 409)
mean "already done"; pod deletions carry a UID precondition so a replacement pod with the same name is never
hit; retriable failures (429, 5xx, connection errors) are retried a few times with jittered backoff, honouring
``Retry-After``. Each write logs one line with the incident id. In dry-run (shadow) mode nothing is sent: the
result is ``dry_run`` and the line says what would have been written.

Resubmission (only when ``policy.resubmit_limit`` > 0) deletes a Failed job (UID precondition) and creates it
again from its own spec with lineage annotations (:data:`RESUBMITTED_FROM_ANNOTATION`,
:data:`RESUBMIT_COUNT_ANNOTATION`); see :meth:`ClusterWriter.resubmit_job`. The body is recorded in a ConfigMap of
the agent's namespace before the delete (agent.core.resubmission), so a resubmission cut short after it is finished
by the leader (:meth:`ClusterWriter.finish_resubmission`) instead of losing the job.

Fencing (agent.core.fence): with a `fence` (the elector's remaining leadership, seconds), every write first asks it
and raises :class:`~agent.core.fence.NotLeader` instead of sending when nothing is left; the request's deadline is
cut to what is left. Reads are not fenced. :meth:`ClusterWriter.claim_record` is the precondition-carrying write
that comes before any restart; it and every other write of the agent's incident state go to the job's record, a
ConfigMap in the agent's namespace (agent.core.records), never to the job object: the only writes on a job are the
restart itself (RestartJob Command, pod deletions) and a resubmission's delete and create.

Formats: Volcano ``bus.volcano.sh/v1alpha1`` Command (``action: RestartJob``, ``target`` = owner reference to
the Job); ``rings-config-<job>`` ConfigMap key ``hccl.json`` (MindCluster, shared/DOMAIN.md §2).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import json
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import structlog
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from agent.actions import breaker_store
from agent.actions.results import ActionResult, Outcome, combine
from agent.core import records, resubmission
from agent.core.cluster import JobKind, JobRef
from agent.core.fence import ACTOR_ANNOTATION, NotLeader
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    RESUBMIT_COUNT_ANNOTATION,
    RESUBMITTED_FROM_ANNOTATION,
)
from agent.core.jobset import JOBSET_NAME_LABEL, JOBSET_UID_LABEL, RESTART_ATTEMPT_LABEL
from agent.core.resetconfig import KEY_RESET, RESET_LABEL, ResetConfigUpdate, updated_data
from agent.kube.errors import parse_retry_after
from agent.settings import Settings

log = structlog.get_logger(__name__)

VOLCANO_GROUP, VOLCANO_VERSION, VOLCANO_PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
BUS_GROUP, BUS_VERSION, BUS_PLURAL = "bus.volcano.sh", "v1alpha1", "commands"
ASCEND_GROUP, ASCEND_VERSION, ASCEND_PLURAL = "mindxdl.gitee.com", "v1", "ascendjobs"
INCIDENT_LABEL = "fault-agent.io/incident"
RINGS_KEY = "hccl.json"
POD_READS_IN_FLIGHT = 16  # pods_remaining's GETs at once: a large job's follow-up in a few round trips
RINGS_INITIALIZING = '{"status":"initializing"}'
MERGE_PATCH = "application/merge-patch+json"
# an earlier version's incident state on the old job (agent.core.records.LEGACY_ANNOTATIONS), not carried over
_AGENT_STATE_ANNOTATIONS = (INCIDENT_ANNOTATION, LEDGER_ANNOTATION, ACTOR_ANNOTATION)
# the deadline of the write being sent now, when the lease fence leaves less than kube.request_timeout_s
_WRITE_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("write_deadline", default=None)
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
_AS_MERGE_PATCH: dict[str, Any] = {"_content_type": MERGE_PATCH}

_JOB_API: dict[JobKind, tuple[str, str, str, str]] = {
    JobKind.VOLCANO: (VOLCANO_GROUP, VOLCANO_VERSION, VOLCANO_PLURAL, "Job"),
    JobKind.ASCEND: (ASCEND_GROUP, ASCEND_VERSION, ASCEND_PLURAL, "AscendJob"),
    JobKind.JOBSET: ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
}
_POD_SELECTORS: dict[JobKind, tuple[str, ...]] = {
    JobKind.VOLCANO: ("volcano.sh/job-name",),
    JobKind.ASCEND: ("training.kubeflow.org/job-name", "job-name"),
    JobKind.JOBSET: (JOBSET_NAME_LABEL,),
}


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


def label_value(text: str) -> str:
    """`text` if it is a valid label value length (<= 63), else a 40-hex digest of it."""
    return text if len(text) <= 63 else hashlib.sha256(text.encode()).hexdigest()[:40]


def command_name(job_name: str, incident: str) -> str:
    """The RestartJob Command's name for `incident` on the job named `job_name`:
    ``<job>-restartjob-<10 hex of sha256(incident)>``, the job part cut so the name stays within 253 characters
    (a DNS subdomain, like the job's own name)."""
    suffix = "-restartjob-" + hashlib.sha256(incident.encode()).hexdigest()[:10]
    return job_name[: 253 - len(suffix)].rstrip("-.") + suffix


class _WithDeadline:
    """A generated kubernetes_asyncio API object whose every call carries ``_request_timeout`` (its client sends
    requests without any deadline otherwise, so an apiserver that stopped answering would hold a write forever).
    An expired deadline raises ``TimeoutError``: :meth:`ClusterWriter._write` retries it like a connection error."""

    def __init__(self, api: Any, timeout_s: float) -> None:
        self._api = api
        self._timeout_s = timeout_s

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._api, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            fenced = _WRITE_DEADLINE.get()
            kwargs.setdefault("_request_timeout", self._timeout_s if fenced is None else min(fenced, self._timeout_s))
            return attr(*args, **kwargs)

        return call


class ClusterWriter:
    """Writes to the cluster for the agent. One instance per ApiClient.

    Args:
        api: a logged-in kubernetes_asyncio ApiClient.
        dry_run: shadow mode: send nothing, return ``dry_run`` results.
        attempts: tries per write for retriable failures (>= 1).
        backoff_s: first retry delay; doubles with jitter, Retry-After wins when larger (capped at 10 s).
        timeout_s: deadline of each request, seconds (``kube.request_timeout_s``).
        fence: seconds of leadership left (``LeaderElector.lease_remaining``); None: not fenced (one replica, or
            tests). Checked right before each write: at <= 0 the write raises :class:`~agent.core.fence.NotLeader`.
        state_namespace: the agent's own namespace (``leader.namespace``), where resubmissions are recorded
            before their delete (agent.core.resubmission).
    """

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        dry_run: bool = False,
        attempts: int = 4,
        backoff_s: float = 0.2,
        timeout_s: float = 10.0,
        fence: Callable[[], float] | None = None,
        state_namespace: str = "fault-agent",
    ):
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.core: Any = _WithDeadline(k8s.CoreV1Api(api), timeout_s)
        self.custom: Any = _WithDeadline(k8s.CustomObjectsApi(api), timeout_s)
        self.dry_run = dry_run
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.fence = fence
        self.state_namespace = state_namespace

    # ------------------------------------------------------------------ plumbing

    def _check_fence(self, action: str, target: str, incident: str) -> float | None:
        """Seconds of leadership left for the write about to be sent (None: not fenced).

        Raises:
            NotLeader: none left; nothing may be sent.
        """
        if self.fence is None:
            return None
        left = self.fence()
        if left <= 0:
            log.warning("write not sent: no longer the leader", action=action, target=target, incident=incident)
            raise NotLeader(action, target)
        return left

    async def _send(self, action: str, target: str, incident: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """Check the fence, then send `call` with its deadline cut to the leadership left.

        Raises:
            NotLeader: the fence is closed (nothing sent); whatever `call` raises.
        """
        left = self._check_fence(action, target, incident)
        token = _WRITE_DEADLINE.set(left)
        try:
            return await call()
        finally:
            _WRITE_DEADLINE.reset(token)

    async def _write(
        self,
        action: str,
        target: str,
        incident: str,
        call: Callable[[], Awaitable[Any]],
        *,
        done: str,
        already: tuple[int, ...] = (404, 409),
        refused: tuple[int, ...] = (),
        repeatable: bool = True,
    ) -> tuple[ActionResult, Any]:
        """Send `call` (retried on retriable failures, up to ``attempts``). `repeatable` False: a write that must not
        be sent twice even when its first answer is lost, because what it created may be gone by the time a retry
        lands (a RestartJob Command, which Volcano deletes once it ran it: a retry would restart the job again).
        Such a write is retried only when the apiserver did not take it (no connection, 408, 429); after a timeout, a
        broken answer or a 5xx it counts as DONE, unconfirmed: the restart's follow-ups and the recovery deadline
        cover the case where it did not land. `refused`: statuses that are an answer the caller handles (a
        precondition's 409), FAILED with that status and logged at info, not as a failure."""
        if self.dry_run:
            self._check_fence(action, target, incident)
            log.info("dry-run: write skipped", action=action, target=target, incident=incident, would=done)
            return ActionResult(action, target, Outcome.DRY_RUN, f"dry run: would {done}"), None
        delay = self.backoff_s
        # why an earlier attempt may have reached the apiserver ("": none did): a refused retry is then not "not sent"
        landed_maybe = ""
        for attempt in range(1, self.attempts + 1):
            try:
                body = await self._send(action, target, incident, call)
            except NotLeader:
                if not landed_maybe:
                    raise  # nothing of this write reached the apiserver
                # the lease ended while retrying: the first attempt may have landed, so the caller goes on as if it
                # did (its events go out, ids deterministic); a successor reads what the job says
                return self._unconfirmed(
                    action, target, incident, done, f"{landed_maybe}; no retry: not the leader"
                ), None
            except ApiException as e:
                status = int(e.status or 0)
                if status in already:
                    detail = "not found" if status == 404 else "conflict or precondition failed"
                    log.info("write already done", action=action, target=target, incident=incident, status=status)
                    return ActionResult(action, target, Outcome.ALREADY_DONE, detail, status=status), None
                if status in refused:
                    log.info("write refused by its precondition", action=action, target=target, incident=incident,
                             status=status)  # fmt: skip
                    return ActionResult(action, target, Outcome.FAILED, error_detail(e), False, status), None
                retriable = status in (408, 429) or status >= 500
                detail = error_detail(e)
                landed = status >= 500  # the apiserver may have written it before failing; 408/429: not taken
                if landed and not repeatable:
                    return self._unconfirmed(action, target, incident, done, detail), None
                if not retriable or attempt == self.attempts:
                    log.warning("write failed", action=action, target=target, incident=incident, detail=detail)
                    return ActionResult(action, target, Outcome.FAILED, detail, retriable, status), None
                headers: Mapping[str, str] = e.headers or {}
                wait = max(delay, min(10.0, parse_retry_after(headers.get("Retry-After")) or 0.0))
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                detail = f"connection error: {e!r}"
                landed = not isinstance(e, aiohttp.ClientConnectorError)  # sent, the answer lost; else never sent
                if landed and not repeatable:
                    return self._unconfirmed(action, target, incident, done, detail), None
                if attempt == self.attempts:
                    log.warning("write failed", action=action, target=target, incident=incident, detail=detail)
                    return ActionResult(action, target, Outcome.FAILED, detail, True), None
                wait = delay
            else:
                log.info("write done", action=action, target=target, incident=incident, did=done)
                return ActionResult(action, target, Outcome.DONE, done), body
            if landed:
                landed_maybe = detail
            await asyncio.sleep(wait * random.uniform(0.8, 1.2))
            delay *= 2
        return ActionResult(action, target, Outcome.FAILED, "no attempt made", retriable=True), None

    def _unconfirmed(self, action: str, target: str, incident: str, done: str, detail: str) -> ActionResult:
        log.warning("write sent, answer lost; not repeated", action=action, target=target, incident=incident,
                    detail=detail)  # fmt: skip
        return ActionResult(action, target, Outcome.DONE, f"{done} (unconfirmed, not repeated: {detail})"[:300])

    # ------------------------------------------------------------------ the breaker's ConfigMap

    async def read_breaker(self, settings: Settings) -> dict[str, str] | None:
        """The breaker ConfigMap's data (agent.actions.breaker_store), None when it does not exist. A read: not
        fenced; also in dry-run.

        Raises:
            ApiException: any error other than 404.
        """
        return await breaker_store.read_breaker_state(self.core, settings)

    async def write_breaker(self, settings: Settings, data: dict[str, str]) -> bool:
        """Replace the breaker ConfigMap's data with `data`, fenced like every write. Returns False in dry-run
        (shadow mode writes nothing: the breaker's state stays in memory), True once written.

        Raises:
            NotLeader: the fence is closed (nothing sent).
            ApiException: the write failed.
        """
        if self.dry_run:
            return False
        name = f"ConfigMap/{settings.leader.namespace}/{settings.policy.breaker_configmap}"
        await self._send(
            "write-breaker", name, "", lambda: breaker_store.write_breaker_state(self.core, settings, data)
        )
        return True

    # ------------------------------------------------------------------ MindCluster's bookkeeping ConfigMaps

    async def update_configmap_keys(
        self,
        namespace: str,
        name: str,
        update: Callable[[Mapping[str, str]], Mapping[str, str]],
        *,
        incident: str,
        tries: int = 5,
        annotations: Mapping[str, str] | None = None,
    ) -> ActionResult:
        """Set some keys of ConfigMap `namespace`/`name`, keeping its other keys (MindCluster common/k8s/
        configmap.go ``UpdateConfigmapIncrementally``), creating it when missing (``CreateOrUpdateConfigMap``);
        `annotations` are set with them (the agent marks its bookkeeping writes so).

        `update` gets the stored data ({} when the ConfigMap does not exist) and returns the keys to set; it is
        called again on each try. The write is a merge patch of those keys conditioned on the resourceVersion
        read (or a create): a 409 (someone else wrote in between, or created it first) re-reads and tries again,
        up to `tries`; 429/5xx and connection errors too, after a jittered backoff. Fenced like every write;
        dry-run sends nothing and returns ``dry_run``. Never raises but :class:`~agent.core.fence.NotLeader`.
        """
        action, target = "update-configmap", f"ConfigMap/{namespace}/{name}"
        if self.dry_run:
            self._check_fence(action, target, incident)
            log.info("dry-run: write skipped", action=action, target=target, incident=incident)
            return ActionResult(action, target, Outcome.DRY_RUN, "dry run: would update ConfigMap keys")
        delay, detail, status = self.backoff_s, "no attempt made", 0
        for _ in range(max(1, tries)):
            try:
                try:
                    cm = await self.core.read_namespaced_config_map(name, namespace)
                except ApiException as e:
                    if e.status != 404:
                        raise
                    cm = None
                stored: dict[str, str] = dict(cm.data or {}) if cm is not None else {}
                keys = dict(update(stored))
                if cm is not None and all(stored.get(k) == v for k, v in keys.items()):
                    return ActionResult(action, target, Outcome.ALREADY_DONE, "keys already as wanted")
                if cm is None:
                    body: dict[str, Any] = {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
                        "data": keys,
                    }
                    create = functools.partial(self.core.create_namespaced_config_map, namespace, body)
                    await self._send(action, target, incident, create)
                else:
                    meta: dict[str, Any] = {"resourceVersion": cm.metadata.resource_version}
                    if annotations:
                        meta["annotations"] = dict(annotations)
                    patch = {"metadata": meta, "data": keys}
                    send = functools.partial(
                        self.core.patch_namespaced_config_map, name, namespace, patch, **_AS_MERGE_PATCH
                    )
                    await self._send(action, target, incident, send)
            except ApiException as e:
                status = int(e.status or 0)
                detail = error_detail(e)
                if status == 409:
                    continue  # changed or created under us: read again
                if not (status in (408, 429) or status >= 500):
                    break
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                detail, status = f"connection error: {e!r}", 0
            else:
                done = f"{'created' if cm is None else 'updated'} keys {', '.join(sorted(keys))}"
                log.info("write done", action=action, target=target, incident=incident, did=done)
                return ActionResult(action, target, Outcome.DONE, done)
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay *= 2
        log.warning("write failed", action=action, target=target, incident=incident, detail=detail)
        return ActionResult(action, target, Outcome.FAILED, detail, status == 409 or status >= 500, status or None)

    # ------------------------------------------------------------------ jobs

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        """The job's pods (not yet terminating) by its Volcano or AscendJob labels (a read; also in dry-run), only
        those whose controller ownerReference names the job's UID when `job` has one: a pod carrying a job's label
        without being the job's is never the job's to delete (the admission policy's ``pods`` rule refuses it too).

        The answer is read as raw JSON for each item's name, UID and deletionTimestamp only: the generated
        ``V1PodList`` is never built (for a job of hundreds of pods that is hundreds of milliseconds on the event
        loop, in the middle of a restart: bench/bench_restart_writes.py).

        Raises:
            ApiException: the list failed, or its answer is not a pod list.
        """
        found: dict[str, PodRef] = {}
        for key in _POD_SELECTORS[job.kind]:
            body = await _answer(
                await self.core.list_namespaced_pod(
                    job.namespace, label_selector=f"{key}={job.name}", _preload_content=False
                )
            )
            for name, uid, version in _live_pods(body, f"pods of {job}", job.kind, job.uid):
                found[uid] = PodRef(job.namespace, name, uid, version)
        return sorted(found.values(), key=lambda p: p.name)

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
            ApiException: any other error.
        """
        group, version, plural, _ = _JOB_API[job.kind]
        try:
            obj: dict[str, Any] = await self.custom.get_namespaced_custom_object(
                group, version, job.namespace, plural, job.name
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return obj

    async def job_version(self, job: JobRef) -> str | None:
        """The job's generation as text (Volcano ``status.version``, AscendJob ``version`` label; "" when unset),
        or None when the job (with this UID) is gone. A read; also in dry-run.

        Raises:
            ApiException: the read failed with something other than 404.
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
        group, version, plural, _ = _JOB_API[job.kind]

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
        except ApiException as e:
            return ActionResult(
                action, target, Outcome.FAILED, f"HTTP {e.status}: {_message(e)}", bool(e.status and e.status >= 500)
            )
        if current is None:
            try:
                pending = await self._read_resubmission(resubmission.configmap_name(job.uid))
            except (ApiException, resubmission.ResubmissionDecodeError) as e:
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
        except ApiException as e:
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
            except ApiException as e:
                return ActionResult(action, target, Outcome.FAILED, f"HTTP {e.status}: {_message(e)}", True, kept=kept)
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
        group, version, plural, _ = _JOB_API[pending.kind]
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
            except ApiException as e:
                return ActionResult(action, target, Outcome.FAILED, f"HTTP {e.status}: {_message(e)}", True, kept=kept)
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
            ApiException: any other error. ResubmissionDecodeError: it cannot be read.
        """
        try:
            cm = await self.core.read_namespaced_config_map(name, self.state_namespace)
        except ApiException as e:
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
            ApiException: the list failed.
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
        except ApiException as e:
            detail = f"HTTP {e.status}: {_message(e)}"
            return resubmission.Leftover.CREATE, ActionResult(action, target, Outcome.FAILED, detail, True), {}
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
        group, version, plural, _ = _JOB_API[pending.kind]
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
            return await _answer(
                await self.core.delete_namespaced_pod(pod.name, pod.namespace, body=options, _preload_content=False)
            )

        result, _ = await self._write("delete-pod", str(pod), incident, call, done=f"delete {pod} {how}")
        return result

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        """Delete `pods` (see :meth:`delete_pod`), concurrently; one combined result."""
        results = await asyncio.gather(
            *(self.delete_pod(p, incident=incident, grace_seconds=grace_seconds) for p in pods)
        )
        return combine("delete-pods", target or f"{len(pods)} pods", list(results))

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        """Those of `pods` that still exist with the same UID, in the order given (used before forcing the old
        pods of a restart: the force and grace follow-ups).

        One GET per pod, up to :data:`POD_READS_IN_FLIGHT` at once (a restart's follow-up reads every pod of the
        job, hundreds for a large one, and must not take a round trip per pod), each body read as raw JSON for
        its ``metadata.uid`` only: the generated ``V1Pod`` is never built (tens of KB of model objects per pod
        of a training job, all on the event loop).

        Raises:
            ApiException: a read answered other than 200 or 404 (the first such; every read has finished), or
                a 200 whose body is not a pod.
        """
        gate = asyncio.Semaphore(POD_READS_IN_FLIGHT)

        async def there(pod: PodRef) -> bool:
            async with gate:
                try:
                    body = await _answer(
                        await self.core.read_namespaced_pod(pod.name, pod.namespace, _preload_content=False)
                    )
                except ApiException as e:
                    if e.status == 404:
                        return False
                    raise
            try:
                meta = orjson.loads(body).get("metadata")
            except (orjson.JSONDecodeError, AttributeError) as e:
                raise ApiException(status=200, reason=f"pod {pod.namespace}/{pod.name}: body not a pod") from e
            return isinstance(meta, dict) and meta.get("uid") == pod.uid

        found = await asyncio.gather(*(there(p) for p in pods), return_exceptions=True)
        for f in found:
            if isinstance(f, BaseException):
                raise f
        return [p for p, f in zip(pods, found, strict=True) if f is True]

    async def reset_rings_config(self, namespace: str, job_name: str, *, incident: str) -> ActionResult:
        """Set ``rings-config-<job>`` key ``hccl.json`` back to ``{"status":"initializing"}`` (404: the job has
        none, counted as already done)."""
        name = f"rings-config-{job_name}"
        patch = {"data": {RINGS_KEY: RINGS_INITIALIZING}}

        async def call() -> Any:
            return await self.core.patch_namespaced_config_map(name, namespace, patch, **_AS_MERGE_PATCH)

        result, _ = await self._write(
            "reset-rings", f"ConfigMap/{namespace}/{name}", incident, call, done="reset hccl.json to initializing"
        )
        return result

    async def update_reset_config(self, update: ResetConfigUpdate, *, incident: str) -> ActionResult:
        """Apply `update` to the job's ``reset-config-<job>`` (agent.core.resetconfig ``updated_data``): read it,
        replace its whole ``data`` as MindCluster's plugin does (plugin/job.go ``updateResetCm``,
        internal/rescheduling/reschedule.go ``updateResetConfigMapWithGraceExit``), labels and annotations kept
        and ``reset: "true"`` set, with the read resourceVersion and UID as preconditions. A 409 re-reads: if the
        ConfigMap now holds what this update wrote (a retry after a lost response) it is ALREADY_DONE, else the
        update is applied again to what is there (5 tries). Safe to repeat for the graceful-exit changes (a
        value already set is ALREADY_DONE without a write).

        Returns FAILED with status 404 when the ConfigMap does not exist (the job was submitted without it),
        FAILED (not retriable) with ``status`` None when its data cannot be read, FAILED (retriable) with
        ``status`` 0 when the apiserver could not be reached; the caller logs and counts.
        In dry-run nothing is read or written: DRY_RUN.
        """
        action, target = f"reset-config-{update.change}", f"ConfigMap/{update.namespace}/{update.name}"
        if self.dry_run:
            result, _ = await self._write(action, target, incident, _nothing, done=f"write {update.change}")
            return result
        written: dict[str, str] | None = None
        for _ in range(5):
            try:
                cm = await self.core.read_namespaced_config_map(update.name, update.namespace)
            except ApiException as e:
                status = int(e.status or 0)
                detail = "not found" if status == 404 else f"HTTP {status}: {_message(e)}"
                return ActionResult(action, target, Outcome.FAILED, detail, status >= 500 or status == 429, status)
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                return ActionResult(action, target, Outcome.FAILED, f"connection error: {e!r}"[:300], True, 0)
            data = {str(k): str(v) for k, v in (cm.data or {}).items()}
            if written is not None and data.get(KEY_RESET) == written.get(KEY_RESET):
                log.info("write already done", action=action, target=target, incident=incident)
                return ActionResult(action, target, Outcome.ALREADY_DONE, "already written")
            try:
                new = updated_data(update, data)
            except ValueError as e:  # ResetConfigError too
                return ActionResult(action, target, Outcome.FAILED, f"data unreadable: {e}"[:300])
            if new is None:
                return ActionResult(action, target, Outcome.ALREADY_DONE, f"{update.change}: already so")
            meta = cm.metadata
            labels = {**(meta.labels or {}), RESET_LABEL[0]: RESET_LABEL[1]}
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": update.name,
                    "namespace": update.namespace,
                    "uid": meta.uid,
                    "resourceVersion": meta.resource_version,
                    "labels": labels,
                    "annotations": dict(meta.annotations or {}),
                },
                "data": new,
            }

            async def call(body: dict[str, Any] = body) -> Any:
                return await self.core.replace_namespaced_config_map(update.name, update.namespace, body)

            result, _ = await self._write(action, target, incident, call, done=f"write {update.change}", already=(409,))
            if result.outcome is not Outcome.ALREADY_DONE:
                return result
            written = new  # 409: changed since the read (by us, a lost response, or someone else): look again
        return ActionResult(action, target, Outcome.FAILED, "kept changing (5 conflicts)", retriable=True, status=409)

    # ------------------------------------------------------------------ the job records (agent.core.records)

    def _record_body(self, job: JobRef, data: Mapping[str, str]) -> dict[str, Any]:
        return records.record_body(self.state_namespace, job.uid, job.kind, job.namespace, job.name, data)

    def _record_target(self, job: JobRef) -> str:
        return f"ConfigMap/{self.state_namespace}/{records.record_name(job.uid)}"

    async def claim_record(
        self, job: JobRef, data: Mapping[str, str], *, resource_version: str, incident: str
    ) -> ActionResult:
        """The decisive write before a restart (agent.core.fence), on the job's record in `state_namespace`, never
        on the job: `data` (incident, ledger, actor) as the record's whole data. `resource_version` "": an atomic
        create (FAILED with status 409 when a record exists); else a replace conditioned on that resourceVersion
        (FAILED with status 409 when the record changed since, or was deleted meanwhile: re-read it with
        :meth:`read_record`).

        Raises:
            NotLeader: the fence is closed (nothing sent).
        """
        ns, name = self.state_namespace, records.record_name(job.uid)
        body = self._record_body(job, data)
        target = self._record_target(job)
        if not resource_version:

            async def create() -> Any:
                return await self.core.create_namespaced_config_map(ns, body)

            result, _ = await self._write(
                "claim-record", target, incident, create, done=f"claim {job} (record created)", already=(),
                refused=(409,),
            )  # fmt: skip
            return result
        body["metadata"]["resourceVersion"] = resource_version

        async def replace() -> Any:
            return await self.core.replace_namespaced_config_map(name, ns, body)

        result, _ = await self._write(
            "claim-record", target, incident, replace, done=f"claim {job} at record version {resource_version}",
            already=(), refused=(409, 404),
        )  # fmt: skip
        if result.status == 404:  # deleted since it was read: the caller reads again (and creates it)
            return ActionResult(result.action, target, Outcome.FAILED, "record deleted meanwhile", False, 409)
        return result

    async def write_record(self, job: JobRef, data: Mapping[str, str], *, incident: str) -> ActionResult:
        """Merge `data` (the incident and ledger after a step) into the job's record, without a precondition (keys
        not in `data`, the actor above all, are kept); a record not there yet is created. Never a write on the job.

        Raises:
            NotLeader: the fence is closed (nothing sent).
        """
        ns, name = self.state_namespace, records.record_name(job.uid)
        target = self._record_target(job)
        patch = {"data": dict(data)}

        async def merge() -> Any:
            return await self.core.patch_namespaced_config_map(name, ns, patch, **_AS_MERGE_PATCH)

        async def create() -> Any:
            return await self.core.create_namespaced_config_map(ns, self._record_body(job, data))

        for _ in range(2):
            result, _ = await self._write("write-record", target, incident, merge, done="write the job's record",
                                          already=())  # fmt: skip
            if result.status != 404:
                return result
            result, _ = await self._write("write-record", target, incident, create, done="create the job's record",
                                          already=(), refused=(409,))  # fmt: skip
            if result.status != 409:  # 409: created meanwhile: merge into it
                return result
        return result

    async def read_record(self, job: JobRef) -> records.JobStateRecord | None:
        """The job's record as the apiserver has it now, or None when there is none. A read; also in dry-run.

        Raises:
            ApiException: the read failed with something other than 404.
        """
        try:
            cm = await self.core.read_namespaced_config_map(records.record_name(job.uid), self.state_namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        data = {str(k): str(v) for k, v in (cm.data or {}).items()}
        return records.JobStateRecord(
            job.uid, job.kind.api_kind, job.namespace, job.name, str(cm.metadata.resource_version or ""),
            data.get(records.KEY_INCIDENT, ""), data.get(records.KEY_LEDGER, ""), data.get(records.KEY_ACTOR, ""),
        )  # fmt: skip

    async def delete_record(self, job_uid: str, *, incident: str = "") -> ActionResult:
        """Delete the record of the job with UID `job_uid` (the job is gone for good); 404 is ALREADY_DONE.

        Raises:
            NotLeader: the fence is closed (nothing sent).
        """
        ns, name = self.state_namespace, records.record_name(job_uid)

        async def delete() -> Any:
            return await self.core.delete_namespaced_config_map(name, ns)

        result, _ = await self._write(
            "delete-record", f"ConfigMap/{ns}/{name}", incident, delete, done=f"delete {name}", already=(404,)
        )
        return result

    async def job_meta(self, job: JobRef) -> tuple[str, dict[str, str]] | None:
        """The job's (resourceVersion, annotations) as the apiserver has them now, or None when the job (with
        this UID) is gone. A read; also in dry-run.

        Raises:
            ApiException: the read failed with something other than 404.
        """
        obj = await self._read_job(job)
        meta = (obj or {}).get("metadata") or {}
        if obj is None or meta.get("uid") != job.uid:
            return None
        return str(meta.get("resourceVersion", "")), {
            str(k): str(v) for k, v in (meta.get("annotations") or {}).items()
        }

    # ------------------------------------------------------------------ nodes

    async def annotate_node(
        self, node: str, annotations: Mapping[str, str | None], *, incident: str = ""
    ) -> ActionResult:
        """Merge `annotations` into the node's metadata; a None value removes that annotation (the quarantine hold
        kept next to the taint). A merge patch: idempotent, other annotations untouched; 404 counts as done."""
        patch = {"metadata": {"annotations": dict(annotations)}}

        async def call() -> Any:
            return await self.core.patch_node(node, patch, **_AS_MERGE_PATCH)

        done = "; ".join(
            f"set annotation {k}" if v is not None else f"remove annotation {k}" for k, v in annotations.items()
        )
        result, _ = await self._write("annotate-node", f"Node/{node}", incident, call, done=done, already=(404,))
        return result

    async def annotate_pod(self, pod: PodRef, annotations: Mapping[str, str], *, incident: str) -> ActionResult:
        """Merge `annotations` into the pod's metadata, conditioned on its UID (``metadata.uid`` in the merge patch:
        the apiserver refuses the patch with 422, "metadata.uid: field is immutable", when the pod of that name is
        another one; seen on the testbed's 1.34 apiserver). Used for ``fault-scheduling: external-*`` only
        (``huawei.com/pod-status``, agent.core.policy.POD_STATUS_ANNOTATION), whose keys and string values are
        always valid, so a 422 can only be that refusal. 404 (gone), 409 and 422 (replaced) count as already done:
        the pod the mark was meant for is no more."""
        patch = {"metadata": {"uid": pod.uid, "annotations": dict(annotations)}}

        async def call() -> bytes:
            return await _answer(
                await self.core.patch_namespaced_pod(
                    pod.name, pod.namespace, patch, _preload_content=False, **_AS_MERGE_PATCH
                )
            )

        done = "; ".join(f"set annotation {k}={v}" for k, v in annotations.items())
        result, _ = await self._write("annotate-pod", str(pod), incident, call, done=done, already=(404, 409, 422))
        return result

    async def taint_node(self, node: str, *, key: str, value: str, incident: str = "") -> ActionResult:
        """Quarantine `node`: set taint ``<key>=<value>:NoSchedule``, replacing only an older taint with our
        key; other taints are kept. The node's resourceVersion is a precondition (re-read on conflict)."""
        return await self._edit_taints(node, key, value, incident)

    async def untaint_node(self, node: str, *, key: str, incident: str = "") -> ActionResult:
        """Remove the taints with our `key` from `node` (only ours, even if set before an agent restart)."""
        return await self._edit_taints(node, key, None, incident)

    async def _edit_taints(self, node: str, key: str, value: str | None, incident: str) -> ActionResult:
        action = "taint" if value is not None else "untaint"
        target = f"Node/{node}"
        for _ in range(5):
            try:
                obj = await self.core.read_node(node)
            except ApiException as e:
                if e.status == 404:
                    return ActionResult(action, target, Outcome.ALREADY_DONE, "node not found", status=404)
                return ActionResult(
                    action,
                    target,
                    Outcome.FAILED,
                    f"HTTP {e.status}: {_message(e)}",
                    bool(e.status and e.status >= 500),
                    e.status,
                )
            current = obj.spec.taints or []
            ours = [t for t in current if t.key == key]
            wanted = [{"key": key, "value": value, "effect": "NoSchedule"}] if value is not None else []
            if [(t.value, t.effect) for t in ours] == [(w["value"], w["effect"]) for w in wanted]:
                return ActionResult(action, target, Outcome.ALREADY_DONE, "taints already as wanted")
            taints = [_taint_body(t) for t in current if t.key != key] + wanted
            patch = {"metadata": {"resourceVersion": obj.metadata.resource_version}, "spec": {"taints": taints}}

            async def call(patch: dict[str, Any] = patch) -> Any:
                return await self.core.patch_node(node, patch, **_AS_MERGE_PATCH)

            done = f"set taint {key}={value}:NoSchedule" if value is not None else f"remove taint {key}"
            if self.dry_run:
                result, _ = await self._write(action, target, incident, call, done=done)
                return result
            try:
                await self._send(action, target, incident, call)
            except ApiException as e:
                if e.status == 409:
                    continue  # the node changed under us: re-read and retry
                if e.status == 404:
                    return ActionResult(action, target, Outcome.ALREADY_DONE, "node not found", status=404)
                return ActionResult(
                    action,
                    target,
                    Outcome.FAILED,
                    f"HTTP {e.status}: {_message(e)}",
                    bool(e.status and e.status >= 500),
                    e.status,
                )
            log.info("write done", action=action, target=target, incident=incident, did=done)
            return ActionResult(action, target, Outcome.DONE, done)
        return ActionResult(
            action, target, Outcome.FAILED, "node kept changing (5 conflicts)", retriable=True, status=409
        )


async def _answer(resp: Any) -> bytes:
    """The body of a ``_preload_content=False`` answer, read and its connection released; a status outside 2xx
    raises the :class:`ApiException` the generated client raises for it (status, reason, body, headers), so
    :meth:`ClusterWriter._write` treats both alike.

    Raises:
        ApiException: the answer's status is not 2xx.
        aiohttp.ClientError, OSError, TimeoutError: the body could not be read.
    """
    try:
        body = await resp.read()
    finally:
        resp.release()
    if not 200 <= resp.status <= 299:
        error = ApiException(status=resp.status, reason=resp.reason)
        error.body, error.headers = body, resp.headers
        raise error
    return bytes(body)


def _live_pods(body: bytes, what: str, kind: JobKind | None = None, owner_uid: str = "") -> list[tuple[str, str, str]]:
    """(name, UID, version) of each pod of a raw PodList answer that is not terminating (no ``deletionTimestamp``)
    and, when `owner_uid` is given, whose controller ownerReference has that UID (others are logged and left);
    version is the generation the pod was made for (`kind`'s marker: :func:`pod_version`), "" when unknown.

    Raises:
        ApiException: `body` is not a JSON object with an ``items`` list, or an item lacks its name or UID.
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise ApiException(status=0, reason=f"listing {what}: answer is not JSON: {e}") from e
    if not isinstance(doc, dict) or "items" not in doc:
        raise ApiException(status=0, reason=f"listing {what}: answer is not a list of pods")
    items = doc["items"] if doc["items"] is not None else []  # Go's encoding of an empty (nil) slice is null
    if not isinstance(items, list):
        raise ApiException(status=0, reason=f"listing {what}: answer is not a list of pods")
    out: list[tuple[str, str, str]] = []
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            raise ApiException(status=0, reason=f"listing {what}: an item without metadata")
        name, uid = meta.get("name"), meta.get("uid")
        if not (isinstance(name, str) and name and isinstance(uid, str) and uid):
            raise ApiException(status=0, reason=f"listing {what}: a pod without its name or UID")
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


async def _nothing() -> None:
    """The call a dry-run write stands for (never sent)."""


def _taint_body(taint: Any) -> dict[str, Any]:
    """A `V1Taint` as the API spells it, unset fields left out: ``timeAdded``, not the client model's
    ``to_dict()`` key ``time_added``, which the apiserver drops as unknown, so another party's NoExecute taint
    would lose the time its tolerationSeconds count from (and deploy/'s admission policy denies the patch)."""
    body = {"key": taint.key, "value": taint.value, "effect": taint.effect, "timeAdded": taint.time_added}
    return {k: v for k, v in body.items() if v is not None}


def error_detail(e: BaseException) -> str:
    """A failed read or write told in one line for an incident's detail, an action result and a log:
    ``HTTP <status>: <reason> <the Status message>`` for an :class:`ApiException` (its repr is an empty
    ``ApiException()``), else the exception's repr. Not cut: callers cut to their own length."""
    if isinstance(e, ApiException):
        return f"HTTP {e.status}: {(e.reason or '').strip()} {_message(e)}".strip()
    return repr(e)


def _message(e: ApiException) -> str:
    """The apiserver's Status message from an ApiException body, else the raw body, cut to 300 chars."""
    raw: object = e.body
    text = raw.decode(errors="replace") if isinstance(raw, bytes | bytearray) else str(raw or "")
    try:
        doc = json.loads(text)
    except ValueError:
        return text[:300]
    return str(doc.get("message", ""))[:300] if isinstance(doc, dict) else text[:300]
