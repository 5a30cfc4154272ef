"""The tests' one fakes module: writers of the engine's port that answer without an apiserver, an event sink that
keeps a list, a Kafka producer, a leadership switch, and an in-memory watch transport. Records, faults, states and
watch changes are built by tests/support/factories.py. Not a test module.

Writers, by what a test needs:

- :class:`FakeWriter`: the engine's port alone, every call recorded; :class:`CacheWriter` adds the pods of the
  test's state cache and a log of deletions. :class:`InstantWriter`: a ClusterWriter whose API calls never leave
  the process; :class:`RecordingWriter` adds a log of a restart's writes (Command, pod deletions). :func:`script`
  makes given methods of either (any fake) wait for a gate, raise a given error or answer a given value, and logs
  their calls: use it rather than a subclass that overrides one method to do that.
- :class:`RestartFake`: the restart's own port (agent.actions.recovery.RestartWriter), for the restart and its
  follow-ups alone: timed deletions, refused writes, a write log.
- :class:`PortWriter` over an :class:`Apiserver`: the port playing the apiserver for one job (its record's
  resourceVersion, Command names, 409s), with injected failures and a gate; :class:`ConsumingWriter` adds
  Volcano's consumption of a Command.

A test that needs a writer to keep state of its own still subclasses one of them in its own file.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from kubernetes_asyncio import client as k8s

from agent.actions import ActionResult, ClusterWriter, Outcome, PodRef
from agent.actions.results import combine
from agent.actions.writer import command_name
from agent.core.cluster import ConfigMapRecord, JobRecord, JobRef
from agent.core.records import KEY_ACTOR, KEY_INCIDENT, KEY_LEDGER, JobStateRecord, record_body
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
        self.records: dict[str, dict[str, str]] = {}  # job UID -> its record's data as claimed and written

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
        self.records.setdefault(job.uid, {}).update(annotations)
        return self._done("claim_record", str(job))

    async def write_record(self, job: JobRef, annotations: Mapping[str, str], *, incident: str) -> ActionResult:
        self.records.setdefault(job.uid, {}).update(annotations)
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


class FakeProducer:
    """An aiokafka producer for the Kafka publisher (agent.sinks.kafka) that needs no broker: it starts, knows one
    partition per topic, and answers its n-th ``send()`` (from 0) with ``outcomes[n]`` (``"ok"`` once the list is
    used up):

    - ``"ok"``: a delivery future done at once; ``"hang"``: one never done (a broker that does not answer);
    - ``"cancel"``: one cancelled (the producer closed under it);
    - ``("fail", exc)``: one failed with `exc`; ``("raise", exc)``: ``send()`` itself raises `exc`.

    ``stop()`` raises `stop_error` when given; ``client.close()`` is counted in ``closed``. ``sent`` counts the
    send() calls. Pass ``lambda **kw: producer`` as the publisher's ``producer_factory``."""

    def __init__(self, outcomes: Sequence[Any] = (), *, stop_error: BaseException | None = None) -> None:
        self.outcomes = list(outcomes)
        self.stop_error = stop_error
        self.sent = 0
        self.closed = 0
        self.client = self

    async def start(self) -> None: ...

    async def stop(self) -> None:
        if self.stop_error is not None:
            raise self.stop_error

    async def close(self) -> None:
        self.closed += 1

    async def partitions_for(self, topic: str) -> set[int]:
        return {0}

    async def send(self, topic: str, value: bytes, *, key: bytes, headers: Any) -> asyncio.Future[Any]:
        outcome = self.outcomes[self.sent] if self.sent < len(self.outcomes) else "ok"
        self.sent += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if outcome == "ok":
            fut.set_result(None)
        elif outcome == "cancel":
            fut.cancel()
        elif isinstance(outcome, tuple) and outcome[0] == "fail":
            fut.set_exception(outcome[1])
        elif isinstance(outcome, tuple) and outcome[0] == "raise":
            raise outcome[1]
        elif outcome != "hang":
            raise ValueError(f"FakeProducer: unknown outcome {outcome!r}")
        return fut


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


class RecordingWriter(InstantWriter):
    """An :class:`InstantWriter` that keeps a restart's writes in order in ``writes``: ``("command", [])`` for a
    RestartJob Command, ``("delete", names)`` for a deletion of pods (their names sorted; a call naming no pod is
    not kept); each answers DONE."""

    def __init__(self, api: k8s.ApiClient) -> None:
        super().__init__(api)
        self.writes: list[tuple[str, list[str]]] = []

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        self.writes.append(("command", []))
        return ActionResult("restart-command", str(job), Outcome.DONE)

    async def delete_pods(
        self, pods: Any, *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        names: list[str] = sorted(p.name for p in pods if isinstance(p, PodRef))
        if names:
            self.writes.append(("delete", names))
        return ActionResult("delete-pods", target, Outcome.DONE)


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


class CacheWriter(FakeWriter):
    """A :class:`FakeWriter` over the test's state cache (`state`): a pod remains while the cache has it (same UID),
    the job's pods listed are the cache's not being deleted, and each deletion is kept in ``deletions`` as (pod
    names, grace seconds): ``delete_pod`` as a one-name tuple, ``delete_pods`` with every name it was given."""

    def __init__(self, state: ClusterState) -> None:
        super().__init__()
        self.state = state
        self.deletions: list[tuple[tuple[str, ...], int | None]] = []

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        here = {(p.namespace, p.name, p.uid) for p in self.state.pods.values()}
        return [p for p in pods if (p.namespace, p.name, p.uid) in here]

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        pods = self.state.pods_of_job(job.kind, job.namespace, job.name)
        return [PodRef(p.namespace, p.name, p.uid) for p in pods if p.deletion_timestamp is None]

    async def delete_pod(self, pod: PodRef, *, incident: str, grace_seconds: int | None) -> ActionResult:
        self.deletions.append(((pod.name,), grace_seconds))
        return await super().delete_pod(pod, incident=incident, grace_seconds=grace_seconds)

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        self.deletions.append((tuple(p.name for p in pods), grace_seconds))
        return await super().delete_pods(pods, incident=incident, grace_seconds=grace_seconds, target=target)


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


class ReadFailingWriter(FakeWriter):
    """A :class:`FakeWriter` whose reads named in `fail` (``job_version``, ``job_meta``, ``read_record``,
    ``list_job_pods``, ``pods_remaining``, ``pending_resubmissions``) raise the given exception: a
    :class:`~agent.kube.errors.KubeError` as the port raises a refused or lost read, anything else as a bug would.
    `claim_conflict`: every claim is refused with 409 (so the claim re-reads the record)."""

    def __init__(self, fail: Mapping[str, BaseException], *, claim_conflict: bool = False) -> None:
        super().__init__()
        self.fail = dict(fail)
        self.claim_conflict = claim_conflict

    def _read(self, name: str) -> None:
        if name in self.fail:
            raise self.fail[name]

    async def job_version(self, job: JobRef) -> str | None:
        self._read("job_version")
        return await super().job_version(job)

    async def job_meta(self, job: JobRef) -> tuple[str, dict[str, str]] | None:
        self._read("job_meta")
        return await super().job_meta(job)

    async def read_record(self, job: JobRef) -> JobStateRecord | None:
        self._read("read_record")
        return await super().read_record(job)

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        self._read("list_job_pods")
        return await super().list_job_pods(job)

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        self._read("pods_remaining")
        return await super().pods_remaining(pods)

    async def pending_resubmissions(self) -> tuple[list[PendingResubmission], list[ResubmissionDecodeError]]:
        self._read("pending_resubmissions")
        return await super().pending_resubmissions()

    async def claim_record(
        self, job: JobRef, annotations: Mapping[str, str], *, resource_version: str, incident: str
    ) -> ActionResult:
        if self.claim_conflict:
            self.calls.append(("claim_record", str(job)))
            return ActionResult("claim-record", str(job), Outcome.FAILED, "HTTP 409: Conflict", True, 409)
        return await super().claim_record(job, annotations, resource_version=resource_version, incident=incident)


T = TypeVar("T")


@dataclass
class Scripted:
    """What :func:`script` made of one method: `calls` (each call's positional and keyword arguments, in order),
    `called_at` (the event loop's time of each call, seconds), `entered` (set at the first call)."""

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    called_at: list[float] = field(default_factory=list)
    entered: asyncio.Event = field(default_factory=asyncio.Event)


_UNSET: Any = object()


def script(
    fake: T,
    method: str,
    *,
    gate: asyncio.Event | None = None,
    raises: BaseException | Callable[[], BaseException] | None = None,
    answer: Any = _UNSET,
    does: Callable[..., Any] | None = None,
    times: int | None = None,
    log: list[tuple[str, tuple[Any, ...], dict[str, Any]]] | None = None,
) -> Scripted:
    """Make the async `method` of the fake writer `fake` (this instance only) log each call, then wait for `gate`
    (when given), then raise `raises` (an exception, or a callable making a fresh one per call), or return `answer`,
    or return what `does` returns for the call's arguments, or else do what the fake does. With `times`, only the
    first `times` calls raise or answer so; later ones do what the fake does. `log`, shared by several scripted
    methods, keeps their calls in one order: (method, positional arguments, keyword arguments). Returns the
    :class:`Scripted` record of its calls.

    Raises:
        AttributeError: `fake` has no `method`.
    """
    original = getattr(fake, method)
    scripted = Scripted()

    async def call(*args: Any, **kwargs: Any) -> Any:
        scripted.calls.append((args, kwargs))
        scripted.called_at.append(asyncio.get_running_loop().time())
        if log is not None:
            log.append((method, args, kwargs))
        scripted.entered.set()
        if gate is not None:
            await gate.wait()
        if times is not None and len(scripted.calls) > times:
            return await original(*args, **kwargs)
        if raises is not None:
            raise raises if isinstance(raises, BaseException) else raises()
        if answer is not _UNSET:
            return answer
        if does is not None:
            return does(*args, **kwargs)
        return await original(*args, **kwargs)

    setattr(fake, method, call)
    return scripted


class RestartFake:
    """The restart's writer port (agent.actions.recovery.RestartWriter) over one job, for the restart and its
    follow-ups without an engine. Each write ("command", "rings", "delete") logs "<write> start", takes `write_s`
    seconds of the loop's time, logs "<write> end" and answers DONE (DRY_RUN with `dry_run`; FAILED, HTTP 403
    when its name is in `refuse`); a call of ``delete_pods`` deletes its pods at once, each taking `write_s` (no
    pods: one write).

    Args:
        listed: the job's pods a list answers.
        version: the job's ``status.version`` every read answers (None: the job is gone).
        left: the pods a follow-up still finds (None: every pod it asks about).
        refuse: the writes answered FAILED.
        dry_run: the writer's dry-run flag.
        write_s: how long each write (each pod's deletion) takes, seconds.

    Attributes:
        log: "<write> start" / "<write> end", in order.
        deleted: (loop time, pod, grace seconds) of each pod deleted, in order of the deletions' ends.
        in_flight, most: pod deletions in flight now, and the most at once.
    """

    def __init__(
        self,
        *,
        listed: Sequence[PodRef] = (),
        version: str | None = "0",
        left: Sequence[PodRef] | None = None,
        refuse: frozenset[str] = frozenset(),
        dry_run: bool = False,
        write_s: float = 0.0,
    ) -> None:
        self.listed = list(listed)
        self.version = version
        self.left = None if left is None else list(left)
        self.refuse = refuse
        self.dry_run = dry_run
        self.write_s = write_s
        self.log: list[str] = []
        self.deleted: list[tuple[float, PodRef, int | None]] = []
        self.in_flight = 0
        self.most = 0

    def _answer(self, name: str, target: str) -> ActionResult:
        if name in self.refuse:
            return ActionResult(name, target, Outcome.FAILED, "forbidden", status=403)
        return ActionResult(name, target, Outcome.DRY_RUN if self.dry_run else Outcome.DONE)

    async def _write(self, name: str, target: str) -> ActionResult:
        self.log.append(f"{name} start")
        await asyncio.sleep(self.write_s)
        self.log.append(f"{name} end")
        return self._answer(name, target)

    async def _delete(self, pod: PodRef, grace_seconds: int | None) -> ActionResult:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(self.write_s)
        self.in_flight -= 1
        self.deleted.append((asyncio.get_running_loop().time(), pod, grace_seconds))
        return self._answer("delete", str(pod))

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        return list(self.listed)

    async def job_version(self, job: JobRef) -> str | None:
        return self.version

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        return await self._write("command", str(job))

    async def reset_rings_config(self, namespace: str, job_name: str, *, incident: str) -> ActionResult:
        return await self._write("rings", job_name)

    async def delete_pod(self, pod: PodRef, *, incident: str, grace_seconds: int | None) -> ActionResult:
        self.log.append("delete start")
        result = await self._delete(pod, grace_seconds)
        self.log.append("delete end")
        return result

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        if not pods:
            return await self._write("delete", target)
        self.log.append("delete start")
        results = await asyncio.gather(*(self._delete(p, grace_seconds) for p in pods))
        self.log.append("delete end")
        return combine("delete-pods", target, list(results))

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        return list(pods) if self.left is None else [p for p in pods if p in self.left]


class Apiserver:
    """What :class:`PortWriter` and :class:`ConsumingWriter` share: one Volcano job's metadata, its record (the
    agent's ConfigMap, agent.core.records) and the Commands created (by name)."""

    def __init__(self, resource_version: str = "1", version: str = "0") -> None:
        self.resource_version = resource_version
        self.version = version  # status.version
        self.annotations: dict[str, str] = {}  # the job's: the agent writes none
        self.record: dict[str, str] = {}  # the job's record (agent.core.records): its data
        self.record_rv = 0  # its resourceVersion; 0: no record
        self.commands: list[str] = []  # names of the Commands created, in order (a retry's 409 is not one)
        self.log: list[str] = []  # "<write> start" / "<write> end", in order
        self.volcano_takes = True  # once a Command exists, status.version moves on (Volcano took it)

    def bump(self) -> None:
        self.resource_version = str(int(self.resource_version) + 1)


class PortWriter:
    """The engine's writer port (agent.engine.ports.ClusterWriterPort) playing the apiserver over
    :class:`Apiserver`: a claim at a stale record version (or a create of a record that exists) answers 409, a
    second Command of the same name 409. Writes are named "claim", "annotate", "command", "rings", "delete-pod",
    "delete-pods"; each logs "<name> start"/"<name> end" in ``api.log``; reads are kept in ``reads``.

    `fail`: write name -> what it does instead (an Outcome.FAILED result, or an exception to raise); `gate`: when
    set, every write waits for it after it started."""

    def __init__(self, api: Apiserver, *, fail: Mapping[str, Any] | None = None) -> None:
        self.api = api
        self.dry_run = False
        self.fail = dict(fail or {})
        self.gate: asyncio.Event | None = None
        self.reads: list[str] = []

    async def _write(self, name: str) -> ActionResult | None:
        self.api.log.append(f"{name} start")
        if self.gate is not None:
            await self.gate.wait()
        self.api.log.append(f"{name} end")
        failure = self.fail.get(name)
        if isinstance(failure, BaseException):
            raise failure
        if failure is not None:
            return ActionResult(name, "x", Outcome.FAILED, "injected failure", retriable=True, status=500)
        return None

    async def claim_record(
        self, job: JobRef, data: Mapping[str, str], *, resource_version: str, incident: str
    ) -> ActionResult:
        failed = await self._write("claim")
        if failed is not None:
            return failed
        current = str(self.api.record_rv) if self.api.record_rv else ""
        if resource_version != current:  # a create of one that exists, or a stale version
            return ActionResult("claim", str(job), Outcome.FAILED, "conflict", status=409)
        self.api.record = dict(data)
        self.api.record_rv += 1
        return ActionResult("claim", str(job), Outcome.DONE)

    async def write_record(self, job: JobRef, data: Mapping[str, str], *, incident: str) -> ActionResult:
        failed = await self._write("annotate")
        if failed is not None:
            return failed
        self.api.record.update(data)
        self.api.record_rv += 1
        return ActionResult("annotate", str(job), Outcome.DONE)

    async def read_record(self, job: JobRef) -> JobStateRecord | None:
        self.reads.append("read_record")
        if not self.api.record_rv:
            return None
        rec = self.api.record
        return JobStateRecord(job.uid, "Job", job.namespace, job.name, str(self.api.record_rv),
                              rec.get(KEY_INCIDENT, ""), rec.get(KEY_LEDGER, ""), rec.get(KEY_ACTOR, ""))  # fmt: skip

    async def delete_record(self, job_uid: str, *, incident: str = "") -> ActionResult:
        self.api.record, self.api.record_rv = {}, 0
        return ActionResult("delete-record", job_uid, Outcome.DONE)

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        failed = await self._write("command")
        if failed is not None:
            return failed
        name = command_name(job.name, incident)
        if name in self.api.commands:
            return ActionResult("command", str(job), Outcome.ALREADY_DONE, "exists", status=409)
        self.api.commands.append(name)
        if self.api.volcano_takes:
            self.api.version = str(int(self.api.version) + 1)
        return ActionResult("command", str(job), Outcome.DONE)

    async def reset_rings_config(self, namespace: str, job_name: str, *, incident: str) -> ActionResult:
        failed = await self._write("rings")
        return failed or ActionResult("rings", job_name, Outcome.DONE)

    async def delete_pod(self, pod: PodRef, *, incident: str, grace_seconds: int | None) -> ActionResult:
        failed = await self._write("delete-pod")
        return failed or ActionResult("delete-pod", str(pod), Outcome.DONE)

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        failed = await self._write("delete-pods")
        return failed or ActionResult("delete-pods", target, Outcome.DONE)

    async def job_meta(self, job: JobRef) -> tuple[str, dict[str, str]] | None:
        self.reads.append("job_meta")
        return self.api.resource_version, dict(self.api.annotations)

    async def job_version(self, job: JobRef) -> str | None:
        self.reads.append("job_version")
        if self.api.volcano_takes and self.api.commands:  # each read finds Volcano moved on (no follow-up waits)
            self.api.version = str(int(self.api.version) + 1)
        return self.api.version

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        self.reads.append("list_job_pods")
        return []

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        return list(pods)

    async def resubmit_job(
        self, job: JobRef, *, incident: str, count: int, wait_s: float = 30.0, poll_s: float = 0.2
    ) -> ActionResult:
        raise AssertionError("not resubmitted here")

    async def annotate_node(
        self, node: str, annotations: Mapping[str, str | None], *, incident: str = ""
    ) -> ActionResult:
        return ActionResult("annotate-node", node, Outcome.DONE)

    async def taint_node(self, node: str, *, key: str, value: str, incident: str = "") -> ActionResult:
        return ActionResult("taint", node, Outcome.DONE)

    async def untaint_node(self, node: str, *, key: str, incident: str = "") -> ActionResult:
        return ActionResult("untaint", node, Outcome.DONE)

    async def pending_resubmissions(self) -> tuple[list[PendingResubmission], list[ResubmissionDecodeError]]:
        return [], []  # none left: the tick's pass over them reads nothing

    async def update_configmap_keys(self, namespace: str, name: str, update: Any, **_: Any) -> ActionResult:
        return ActionResult("update-configmap", f"ConfigMap/{namespace}/{name}", Outcome.DONE)

    async def read_breaker(self, settings: Settings) -> dict[str, str] | None:
        return None

    async def write_breaker(self, settings: Settings, data: dict[str, str]) -> bool:
        return True


class ConsumingWriter(PortWriter):
    """Volcano as its job controller runs a Command (volcano.sh/volcano pkg/controllers/job,
    job_controller_handler.go ``processNextCommand``, job_controller_actions.go ``killPods``): it deletes the
    Command at once, and only later (after the pods' deletions) writes the job's status with ``version`` + 1.
    So a second create of the same name finds the name free, and a read of the job in between still shows the old
    version. `created` counts every Command created (each one a restart); `versions` is what the job's reads
    answer, in turn (the last one for good)."""

    def __init__(self, api: Apiserver, versions: Sequence[str], **kwargs: Any) -> None:
        super().__init__(api, **kwargs)
        self.created: list[str] = []
        self.versions = list(versions)

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        failed = await self._write("command")
        if failed is not None:
            return failed
        self.created.append(command_name(job.name, incident))  # consumed by Volcano at once: no 409 next time
        return ActionResult("command", str(job), Outcome.DONE)

    async def job_version(self, job: JobRef) -> str | None:
        self.reads.append("job_version")
        return self.versions.pop(0) if len(self.versions) > 1 else self.versions[0]


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
