"""The ConfigMap writes: MindCluster's bookkeeping ConfigMaps, a job's ``rings-config-<job>`` and
``reset-config-<job>``, the agent's job records (agent.core.records) and the breaker's ConfigMap.

Formats: ``rings-config-<job>`` key ``hccl.json`` (MindCluster, shared/DOMAIN.md §2); ``reset-config-<job>``
(agent.core.resetconfig; MindCluster plugin/job.go ``updateResetCm``); the bookkeeping ConfigMaps' keys set
incrementally (MindCluster common/k8s/configmap.go ``UpdateConfigmapIncrementally``); the job record
``fault-agent-job-<uid>`` in the agent's namespace (agent.core.records); the breaker's
(agent.actions.breaker_store).
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from agent.actions import breaker_store
from agent.actions.results import ActionResult, Outcome
from agent.actions.writes.base import (
    AS_MERGE_PATCH,
    WriterBase,
    answer,
    error_detail,
    failed,
    nothing,
    write_retriable,
)
from agent.core import records
from agent.core.cluster import JobRef
from agent.core.resetconfig import KEY_RESET, RESET_LABEL, ResetConfigUpdate, updated_data
from agent.kube.errors import KubeApiError, KubeConnectionError, StreamCorrupt
from agent.settings import Settings

log = structlog.get_logger(__name__)

RINGS_KEY = "hccl.json"
RINGS_INITIALIZING = '{"status":"initializing"}'


@dataclass(frozen=True, slots=True)
class ConfigMapData:
    """What a read of a ConfigMap is used for: its ``metadata.resourceVersion`` and its ``data`` (key → text)."""

    resource_version: str
    data: dict[str, str]


def configmap_data(body: bytes, what: str) -> ConfigMapData:
    """The resourceVersion and data of a raw ConfigMap answer (``core/v1`` ``ConfigMap`` as JSON), read without
    building the generated ``V1ConfigMap`` (issue 39: the model costs more CPU than the write it serves). A
    ConfigMap without ``data`` (Go's nil map: absent or null) has none.

    Raises:
        StreamCorrupt: the answer is not JSON, not an object, or has no resourceVersion, or a ``data`` that is not
            an object of strings (`what` names the ConfigMap in the message).
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise StreamCorrupt(f"{what}: answer is not JSON: {e}") from e
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    if not isinstance(version, str) or not version:
        raise StreamCorrupt(f"{what}: answer is not a ConfigMap (no metadata.resourceVersion)")
    data = doc.get("data")
    if data is None:
        data = {}
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise StreamCorrupt(f"{what}: the ConfigMap's data is not a map of strings")
    return ConfigMapData(version, data)


class ConfigMapWrites(WriterBase):
    """The ConfigMap reads and writes (:class:`WriterBase` for the plumbing)."""

    def _keep_copy(self, where: tuple[str, str], body: bytes, target: str) -> None:
        """Keep the ConfigMap a write's answer `body` holds as the next update's starting copy; an answer that is
        not a ConfigMap keeps none (the write itself is done: the next update reads), logged at debug."""
        try:
            cm = configmap_data(body, target)
        except StreamCorrupt as e:
            log.debug("no copy kept of the answer", target=target, error=str(e))
            return
        self.configmap_copies[where] = (cm.resource_version, cm.data)

    @staticmethod
    async def _raw(call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> bytes:
        """Send `call` with ``_preload_content=False`` and return the answer's body: no model is built for an
        answer nobody reads (agent.actions.writes.base.answer; a status outside 2xx raises KubeApiError)."""
        return await answer(await call(*args, _preload_content=False, **kwargs))

    # ------------------------------------------------------------------ the breaker's ConfigMap

    async def read_breaker(self, settings: Settings) -> dict[str, str] | None:
        """The breaker ConfigMap's data (agent.actions.breaker_store), None when it does not exist. A read: not
        fenced; also in dry-run.

        Raises:
            KubeError: any error other than 404.
        """
        return await breaker_store.read_breaker_state(self.core, settings)

    async def write_breaker(self, settings: Settings, data: dict[str, str]) -> bool:
        """Replace the breaker ConfigMap's data with `data`, fenced like every write. Returns False in dry-run
        (shadow mode writes nothing: the breaker's state stays in memory), True once written.

        Raises:
            NotLeader: the fence is closed (nothing sent).
            KubeError: the write failed.
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
        up to `tries`; 429/5xx and connection errors too, after a jittered backoff; an answer that is not a ConfigMap
        (:func:`configmap_data`) fails the try like a connection error. The answers are read raw, never built into
        models. Fenced like every write;
        dry-run sends nothing and returns ``dry_run``. Never raises but :class:`~agent.core.fence.NotLeader`.

        No read when this writer wrote the ConfigMap last (issue 39: one GET less per restart's bookkeeping, the
        whole ConfigMap parsed once instead of twice): the first try starts from the copy its last write's answer
        gave (:attr:`~agent.actions.writes.base.WriterBase.configmap_copies`), conditioned on that copy's
        resourceVersion, so a ConfigMap someone else wrote since gets a 409 and a read, as before; one deleted since
        gets a 404 and a read (then a create). From a copy the write is sent even when the keys look set already:
        only a read may say a write is not needed.
        """
        action, target = "update-configmap", f"ConfigMap/{namespace}/{name}"
        if self.dry_run:
            return self._dry(action, target, incident, "update ConfigMap keys")
        delay, detail, status = self.backoff_s, "no attempt made", 0
        where = (namespace, name)
        for _ in range(max(1, tries)):
            copy = self.configmap_copies.pop(where, None)  # used once: a failed try reads
            try:
                cm: ConfigMapData | None
                if copy is not None:
                    cm = ConfigMapData(*copy)
                else:
                    try:
                        cm = configmap_data(
                            await answer(
                                await self.core.read_namespaced_config_map(name, namespace, _preload_content=False)
                            ),
                            target,
                        )
                    except KubeApiError as e:
                        if e.status != 404:
                            raise
                        cm = None
                stored: dict[str, str] = dict(cm.data) if cm is not None else {}
                keys = dict(update(stored))
                if copy is None and cm is not None and all(stored.get(k) == v for k, v in keys.items()):
                    return ActionResult(action, target, Outcome.ALREADY_DONE, "keys already as wanted")
                if cm is None:
                    body: dict[str, Any] = {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
                        "data": keys,
                    }
                    create = functools.partial(
                        self._raw, self.core.create_namespaced_config_map, namespace, body
                    )  # fmt: skip
                    written = await self._send(action, target, incident, create)
                else:
                    meta: dict[str, Any] = {"resourceVersion": cm.resource_version}
                    if annotations:
                        meta["annotations"] = dict(annotations)
                    patch = {"metadata": meta, "data": keys}
                    send = functools.partial(
                        self._raw, self.core.patch_namespaced_config_map, name, namespace, patch, **AS_MERGE_PATCH
                    )
                    written = await self._send(action, target, incident, send)
            except KubeApiError as e:
                status = int(e.status or 0)
                detail = error_detail(e)
                if status == 409 or (status == 404 and copy is not None):
                    continue  # changed, created or deleted under us: read again
                if not write_retriable(status):
                    break
            except (KubeConnectionError, StreamCorrupt) as e:
                detail, status = str(e), 0
            else:
                self._keep_copy(where, written, target)
                done = f"{'created' if cm is None else 'updated'} keys {', '.join(sorted(keys))}"
                log.info("write done", action=action, target=target, incident=incident, did=done)
                return ActionResult(action, target, Outcome.DONE, done)
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay *= 2
        log.warning("write failed", action=action, target=target, incident=incident, detail=detail)
        return ActionResult(action, target, Outcome.FAILED, detail, status == 409 or status >= 500, status or None)

    async def reset_rings_config(self, namespace: str, job_name: str, *, incident: str) -> ActionResult:
        """Set ``rings-config-<job>`` key ``hccl.json`` back to ``{"status":"initializing"}`` (404: the job has
        none, counted as already done)."""
        name = f"rings-config-{job_name}"
        patch = {"data": {RINGS_KEY: RINGS_INITIALIZING}}

        async def call() -> bytes:
            return await self._raw(self.core.patch_namespaced_config_map, name, namespace, patch, **AS_MERGE_PATCH)

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
            result, _ = await self._write(action, target, incident, nothing, done=f"write {update.change}")
            return result
        written: dict[str, str] | None = None
        for _ in range(5):
            try:
                cm = await self.core.read_namespaced_config_map(update.name, update.namespace)
            except KubeApiError as e:
                status = int(e.status or 0)
                return failed(action, target, e, retriable=status >= 500 or status == 429,
                              detail="not found" if status == 404 else "")  # fmt: skip
            except KubeConnectionError as e:
                return ActionResult(action, target, Outcome.FAILED, str(e)[:300], True, 0)
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

            async def create() -> bytes:
                return await self._raw(self.core.create_namespaced_config_map, ns, body)

            result, _ = await self._write(
                "claim-record", target, incident, create, done=f"claim {job} (record created)", already=(),
                refused=(409,),
            )  # fmt: skip
            return result
        body["metadata"]["resourceVersion"] = resource_version

        async def replace() -> bytes:
            return await self._raw(self.core.replace_namespaced_config_map, name, ns, body)

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

        async def merge() -> bytes:
            return await self._raw(self.core.patch_namespaced_config_map, name, ns, patch, **AS_MERGE_PATCH)

        async def create() -> bytes:
            return await self._raw(self.core.create_namespaced_config_map, ns, self._record_body(job, data))

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
            KubeError: the read failed with something other than 404.
        """
        try:
            cm = await self.core.read_namespaced_config_map(records.record_name(job.uid), self.state_namespace)
        except KubeApiError as e:
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
