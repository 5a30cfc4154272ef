"""The tests' one fakes module: writers of the engine's port that answer without an apiserver, an event sink that
keeps a list, a leadership switch, and an in-memory watch transport. Records, faults, states and watch changes are
built by tests/support/factories.py. Not a test module.

A test that needs a writer to do one thing differently subclasses :class:`InstantWriter` (a ClusterWriter whose
API calls never leave the process) or :class:`FakeWriter` (the port alone, every call recorded) in its own file
and overrides only that method.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import orjson
from kubernetes_asyncio import client as k8s

from agent.actions import ActionResult, ClusterWriter, Outcome, PodRef
from agent.core.cluster import ConfigMapRecord, JobRecord, JobRef
from agent.core.records import JobStateRecord, record_body
from agent.core.resetconfig import ResetConfigUpdate
from agent.core.resubmission import Leftover, PendingResubmission, ResubmissionDecodeError
from agent.kube.errors import ResourceGone
from agent.kube.watch import Change, ChangeType, ListPage, Resource
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sources.state import ClusterState


class InstantWriter(ClusterWriter):
    """Answers at once without an apiserver: job records written, rings-config already reset, no pods
    listed, job version "0" until a restart read it (then "1": the controller took the restart), every pod a
    follow-up looks for already gone. Tests subclass it and override what they observe (the RestartJob Command, …).
    """

    versions_read = 0

    async def write_record(self, job: JobRef, annotations: Any, *, incident: str) -> ActionResult:
        return ActionResult("write-record", str(job), Outcome.DONE)

    async def claim_record(self, job: JobRef, data: Any, *, resource_version: str, incident: str) -> ActionResult:
        return await self.write_record(job, data, incident=incident)  # no conflicts here

    async def read_record(self, job: JobRef) -> JobStateRecord | None:
        return None  # every claim lands at once: never re-read

    async def delete_record(self, job_uid: str, *, incident: str = "") -> ActionResult:
        return ActionResult("delete-record", job_uid, Outcome.DONE)

    async def job_meta(self, job: JobRef) -> tuple[str, dict[str, str]] | None:
        return None  # the job not read with its restart: the force follow-up reads its version itself

    async def reset_rings_config(self, namespace: str, job_name: str, *, incident: str) -> ActionResult:
        return ActionResult("reset-rings", job_name, Outcome.ALREADY_DONE)

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        return []  # force mode lists the pods to delete after the Command; none to delete here

    async def job_version(self, job: JobRef) -> str | None:
        # the restart reads it first ("0"); every later read finds the job's controller a version further on, so
        # the force follow-up after a Command (which reads the version after sending it) sees it move at once
        self.versions_read += 1
        return str(self.versions_read - 1)

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        return []  # the follow-ups find the old pods gone

    async def annotate_node(self, node: str, annotations: Any, *, incident: str = "") -> ActionResult:
        return ActionResult("annotate-node", f"Node/{node}", Outcome.DONE)

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
        return _update_keys(self.configmaps, namespace, name, update, dry_run=self.dry_run)

    @property
    def configmaps(self) -> dict[tuple[str, str], dict[str, str]]:
        """The bookkeeping ConfigMaps written, (namespace, name) -> data (one store per writer)."""
        store: dict[tuple[str, str], dict[str, str]] = self.__dict__.setdefault("_configmaps", {})
        return store


def _update_keys(
    store: dict[tuple[str, str], dict[str, str]],
    namespace: str,
    name: str,
    update: Callable[[Mapping[str, str]], Mapping[str, str]],
    *,
    dry_run: bool,
) -> ActionResult:
    """What ClusterWriter.update_configmap_keys does, on a dict: the keys `update` returns set, others kept."""
    target = f"ConfigMap/{namespace}/{name}"
    if dry_run:
        return ActionResult("update-configmap", target, Outcome.DRY_RUN)
    data = store.setdefault((namespace, name), {})
    data.update(update(dict(data)))
    return ActionResult("update-configmap", target, Outcome.DONE)

    async def update_reset_config(self, update: ResetConfigUpdate, *, incident: str) -> ActionResult:
        return ActionResult(f"reset-config-{update.change}", update.name, Outcome.ALREADY_DONE)


def record_change(
    job: JobRecord | JobRef, data: Mapping[str, str], *, namespace: str = "fault-agent", resource_version: str = "1"
) -> Change[Any]:
    """The watch of the agent's job records delivering `job`'s record with `data` (agent.core.records)."""
    body = record_body(namespace, job.uid, job.kind, job.namespace, job.name, data)
    name = body["metadata"]["name"]
    labels = tuple(sorted(body["metadata"]["labels"].items()))
    cm = ConfigMapRecord(namespace, name, f"cm-{job.uid}", resource_version, labels, dict(data))
    return Change(ChangeType.MODIFIED, "jobrecords", f"{namespace}/{name}", cm, None, False, time.time())


class FakeWriter:
    """The engine's writer port (agent.engine.ports.ClusterWriterPort) without any API client: every write
    succeeds and is recorded as ``(method, target)`` in :attr:`calls`; the job's version moves on once a
    RestartJob Command was sent (as Volcano's controller does), and the pods a follow-up looks for are gone."""

    def __init__(self, *, dry_run: bool = False) -> None:
        self.dry_run = dry_run
        self.calls: list[tuple[str, str]] = []
        self.commands = 0
        self.sent: dict[str, int] = {}  # RestartJob Commands sent per job name
        self.taken: dict[str, int] = {}  # of those, the ones Volcano's controller has taken (see job_version)
        self.breaker: dict[str, str] | None = None
        self.resubmissions: list[PendingResubmission] = []  # resubmission records left (agent.core.resubmission)
        self.configmaps: dict[tuple[str, str], dict[str, str]] = {}  # bookkeeping ConfigMaps, kept out of calls
        self.reset_updates: list[ResetConfigUpdate] = []  # the reset-config intents, in order
        self.reset_result: Outcome | int = Outcome.DONE  # an int: FAILED with that HTTP status (404: missing)
        self.pod_marks: list[tuple[str, dict[str, str]]] = []  # annotate_pod: (pod name, annotations)

    def _done(self, method: str, target: str) -> ActionResult:
        self.calls.append((method, target))
        return ActionResult(method, target, Outcome.DRY_RUN if self.dry_run else Outcome.DONE)

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls]

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        return []

    async def job_version(self, job: JobRef) -> str | None:
        # Volcano's controller takes a Command between two reads of the job: the first read after a Command still
        # shows the version before it, the next one the version after it (a read that always answered the new
        # version made the force follow-up, which reads the version after sending, wait its whole 10 s)
        version = self.taken.get(job.name, 0)
        self.taken[job.name] = self.sent.get(job.name, 0)
        return str(version)

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        self.commands += 1
        self.sent[job.name] = self.sent.get(job.name, 0) + 1
        return self._done("restart_command", str(job))

    async def reset_rings_config(self, namespace: str, job_name: str, *, incident: str) -> ActionResult:
        return self._done("reset_rings_config", job_name)

    async def delete_pod(self, pod: PodRef, *, incident: str, grace_seconds: int | None) -> ActionResult:
        return self._done("delete_pod", str(pod))

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        return self._done("delete_pods", target)

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        return []

    async def claim_record(
        self, job: JobRef, annotations: Mapping[str, str], *, resource_version: str, incident: str
    ) -> ActionResult:
        return self._done("claim_record", str(job))

    async def write_record(self, job: JobRef, annotations: Mapping[str, str], *, incident: str) -> ActionResult:
        return self._done("write_record", str(job))

    async def job_meta(self, job: JobRef) -> tuple[str, dict[str, str]] | None:
        return None

    async def read_record(self, job: JobRef) -> JobStateRecord | None:
        return None

    async def delete_record(self, job_uid: str, *, incident: str = "") -> ActionResult:
        return self._done("delete_record", job_uid)

    async def resubmit_job(
        self, job: JobRef, *, incident: str, count: int, wait_s: float = 30.0, poll_s: float = 0.2
    ) -> ActionResult:
        return self._done("resubmit_job", str(job))

    async def pending_resubmissions(self) -> tuple[list[PendingResubmission], list[ResubmissionDecodeError]]:
        return list(self.resubmissions), []

    async def finish_resubmission(self, pending: PendingResubmission) -> tuple[Leftover, ActionResult, dict[str, str]]:
        return Leftover.OLD_EXISTS, self._done("finish_resubmission", str(pending)), {}

    async def forget_resubmission(self, from_uid: str, *, incident: str) -> ActionResult:
        return self._done("forget_resubmission", from_uid)

    async def annotate_node(
        self, node: str, annotations: Mapping[str, str | None], *, incident: str = ""
    ) -> ActionResult:
        return self._done("annotate_node", node)

    async def annotate_pod(self, pod: PodRef, annotations: Mapping[str, str], *, incident: str) -> ActionResult:
        self.pod_marks.append((pod.name, dict(annotations)))
        return self._done("annotate_pod", pod.name)

    async def taint_node(self, node: str, *, key: str, value: str, incident: str = "") -> ActionResult:
        return self._done("taint_node", node)

    async def untaint_node(self, node: str, *, key: str, incident: str = "") -> ActionResult:
        return self._done("untaint_node", node)

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
        return _update_keys(self.configmaps, namespace, name, update, dry_run=self.dry_run)

    async def update_reset_config(self, update: ResetConfigUpdate, *, incident: str) -> ActionResult:
        self.reset_updates.append(update)
        self.calls.append(("update_reset_config", f"{update.name}:{update.change}"))
        if isinstance(self.reset_result, int):
            return ActionResult("reset-config", update.name, Outcome.FAILED, "not found", status=self.reset_result)
        return ActionResult("reset-config", update.name, Outcome.DRY_RUN if self.dry_run else self.reset_result)

    async def read_breaker(self, settings: Settings) -> dict[str, str] | None:
        return self.breaker

    async def write_breaker(self, settings: Settings, data: dict[str, str]) -> bool:
        if self.dry_run:
            return False
        self.calls.append(("write_breaker", data.get("state", "")))
        self.breaker = dict(data)
        return True


class ListSink:
    """An event sink (agent.engine.ports.EventSink) that keeps the events in submission order; each is durable at
    once."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def publish(self, event: Any) -> None:
        self.events.append(event)

    async def submit(self, event: Any) -> asyncio.Future[None]:
        self.events.append(event)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def types(self) -> list[str]:
        """The CloudEvents types, in order."""
        return [ev.as_json(e)["type"] for e in self.events]

    def of(self, type_: str) -> list[dict[str, Any]]:
        """The events of CloudEvents type `type_` as JSON documents, in order."""
        return [d for d in (ev.as_json(e) for e in self.events) if d["type"] == type_]


class CountingWriter(InstantWriter):
    """An :class:`InstantWriter` that counts the RestartJob Commands it is asked to create (``commands``) and keeps
    their messages in order (``messages``); each answers DONE."""

    def __init__(self, api: k8s.ApiClient) -> None:
        super().__init__(api)
        self.commands = 0
        self.messages: list[str] = []

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        self.commands += 1
        self.messages.append(message)
        return ActionResult("restart-command", str(job), Outcome.DONE)


class Leadership:
    """The engine's ``is_leader`` callable, switched by setting ``leads``."""

    def __init__(self, leads: bool) -> None:
        self.leads = leads

    def __call__(self) -> bool:
        return self.leads


class PodListingWriter(FakeWriter):
    """A :class:`FakeWriter` whose pod list is the watch cache's (`state`), so a restart by pod deletion deletes
    the job's pods as the cluster holds them. Besides ``calls``, it keeps each pod deletion as
    ``("delete_pods", "<pod>,<pod>")`` in ``calls`` and each bookkeeping ConfigMap update as ``(namespace, name)``
    in ``bookkeeping``."""

    def __init__(self, state: ClusterState) -> None:
        super().__init__()
        self.state = state
        self.bookkeeping: list[tuple[str, str]] = []

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        pods = self.state.pods_of_job(job.kind, job.namespace, job.name)
        return [PodRef(p.namespace, p.name, p.uid) for p in pods]

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        self.calls.append(("delete_pods", ",".join(p.name for p in pods)))
        return await super().delete_pods(pods, incident=incident, grace_seconds=grace_seconds, target=target)

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
        self.bookkeeping.append((namespace, name))
        return await super().update_configmap_keys(
            namespace, name, update, incident=incident, tries=tries, annotations=annotations
        )


class NodeWriter(InstantWriter):
    """An :class:`InstantWriter` that keeps the node writes in order in ``writes``: ``("taint", value)``,
    ``("untaint", None)``, ``("annotate", annotations)``."""

    def __init__(self, api: k8s.ApiClient) -> None:
        super().__init__(api)
        self.writes: list[tuple[str, Any]] = []

    async def taint_node(self, node: str, *, key: str, value: str, incident: str = "") -> ActionResult:
        self.writes.append(("taint", value))
        return ActionResult("taint", f"Node/{node}", Outcome.DONE)

    async def untaint_node(self, node: str, *, key: str, incident: str = "") -> ActionResult:
        self.writes.append(("untaint", None))
        return ActionResult("untaint", f"Node/{node}", Outcome.DONE)

    async def annotate_node(self, node: str, annotations: Any, *, incident: str = "") -> ActionResult:
        self.writes.append(("annotate", dict(annotations)))
        return ActionResult("annotate-node", f"Node/{node}", Outcome.DONE)


class PerJobWriter(InstantWriter):
    """Answers at once, except that a job's RestartJob Command waits for that job's gate (when it has one), and
    that writing the incident annotation of a job in `broken` raises (a bug escaping the action code). Records
    the jobs in the order their Commands were sent; a job's version moves on once its Command is sent."""

    def __init__(self, api: k8s.ApiClient) -> None:
        super().__init__(api)
        self.gates: dict[str, asyncio.Event] = {}
        self.broken: set[str] = set()
        self.entered: dict[str, asyncio.Event] = {}
        self.sent: list[str] = []
        self.taken: set[str] = set()  # jobs whose Command the controller has taken (see job_version)
        self.listed = 0
        self.taint_gate = asyncio.Event()
        self.taint_gate.set()
        self.taint_calls: list[tuple[str, str | None]] = []  # (node, value or None for untaint)

    async def taint_node(self, node: str, *, key: str, value: str, incident: str = "") -> ActionResult:
        self.taint_calls.append((node, value))
        await self.taint_gate.wait()
        return ActionResult("taint", f"Node/{node}", Outcome.DONE)

    async def untaint_node(self, node: str, *, key: str, incident: str = "") -> ActionResult:
        self.taint_calls.append((node, None))
        await self.taint_gate.wait()
        return ActionResult("untaint", f"Node/{node}", Outcome.DONE)

    async def write_record(self, job: JobRef, annotations: Any, *, incident: str) -> ActionResult:
        if job.name in self.broken:
            raise RuntimeError("writer bug")
        return await super().write_record(job, annotations, incident=incident)

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        self.listed += 1
        return []

    async def job_version(self, job: JobRef) -> str | None:
        # the controller takes a job's Command between two reads: the first read after it still shows "0"
        if job.name in self.sent and job.name not in self.taken:
            self.taken.add(job.name)
            return "0"
        return "1" if job.name in self.taken else "0"

    async def pods_remaining(self, pods: Any) -> list[PodRef]:
        return []

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        self.entered.setdefault(job.name, asyncio.Event()).set()
        gate = self.gates.get(job.name)
        if gate is not None:
            await gate.wait()
        self.sent.append(job.name)
        return ActionResult("restart-command", str(job), Outcome.DONE)


class FakeTransport:
    """In-memory apiserver: `objects` is the list result; `streams` are consumed one per watch call.

    A stream is a list of bytes chunks, an Exception to raise on opening, or "hang" (never yields).
    """

    def __init__(self) -> None:
        self.objects: list[dict[str, Any]] = []
        self.list_rv = "10"
        self.streams: list[Any] = []
        self.watch_rvs: list[str] = []
        self.list_calls = 0
        self.page_calls: list[str] = []
        self.expire_continue_once = False

    async def list_page(self, resource: Resource, *, limit: int, continue_token: str) -> ListPage:
        self.page_calls.append(continue_token)
        if continue_token == "":
            self.list_calls += 1
        start = int(continue_token or "0")
        if continue_token and self.expire_continue_once:
            self.expire_continue_once = False
            raise ResourceGone("continue expired", status=410)
        items = self.objects[start : start + limit]
        nxt = str(start + limit) if start + limit < len(self.objects) else ""
        return ListPage(items, self.list_rv, nxt)

    @asynccontextmanager
    async def watch(self, resource: Resource, *, resource_version: str, timeout_s: int) -> AsyncIterator[Any]:
        self.watch_rvs.append(resource_version)
        stream = self.streams.pop(0) if self.streams else "hang"
        if isinstance(stream, Exception):
            raise stream

        async def chunks() -> AsyncIterator[bytes]:
            if stream == "hang":
                await asyncio.Event().wait()
            for c in stream:
                if c == "hang":
                    await asyncio.Event().wait()
                assert isinstance(c, bytes)
                yield c

        yield chunks()


class RawAnswer:
    """What aiohttp hands back to a generated API method called with ``_preload_content=False``: `status`, `reason`,
    `headers`, ``read()`` (the body: `body` as JSON when not bytes) and ``release()``."""

    def __init__(self, body: Any, status: int = 200, reason: str = "OK") -> None:
        self.status, self.reason, self.headers = status, reason, {}
        self._body = body if isinstance(body, bytes) else orjson.dumps(body)
        self.released = False

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        self.released = True
