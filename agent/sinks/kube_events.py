"""Writes the agent's Kubernetes Events (``events.k8s.io/v1``) in the background, so ``kubectl describe`` of a job,
a pod or a node shows what the agent saw and did.

:class:`KubeEventRecorder` takes :class:`~agent.core.kube_events.KubeEvent` s without waiting (a bounded queue: a
full queue drops and counts), runs them through :class:`~agent.core.kube_events.EventCorrelator` (client-go's spam
filter, aggregation and de-duplication) and creates or patches the Event objects. A failed write is logged (once a
minute at most) and counted (``fault_agent_actions_total{action="kube-event"}``); it never blocks or stops recovery.
:class:`KubeEventsSink` wraps the agent's CloudEvent sink: every event the engine publishes also becomes the
Kubernetes Events it stands for (:func:`~agent.core.kube_events.from_cloudevent`), made in the recorder's task,
not on the engine's path to the CloudEvent's commit (issue 39).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from kubernetes_asyncio import client as k8s

from agent.core.clock import Clock
from agent.core.kube_events import (
    REPORTING_CONTROLLER,
    Create,
    Drop,
    EventCorrelator,
    KubeEvent,
    Update,
    from_cloudevent,
)
from agent.kube.errors import KubeError, raise_for_answer, translated

log = structlog.get_logger(__name__)

QUEUE_SIZE = 1000
ERROR_LOG_EVERY_S = 60.0


class ActionMetrics(Protocol):
    def action(self, action: str, result: str) -> None: ...


@dataclass(frozen=True, slots=True)
class FromCloudEvent:
    """A CloudEvent queued for the Kubernetes Events it stands for, made when the recorder takes it: `doc` is
    ``{"type": <CloudEvent type>, "data": <its data as built>}``, `node_uid` a node's UID from the agent's cache."""

    doc: Mapping[str, Any]
    node_uid: Callable[[str], str]


def _micro(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_body(event: KubeEvent, name: str, now: datetime, instance: str) -> dict[str, Any]:
    """The ``events.k8s.io/v1`` Event object for `event` named `name` at `now`, reported by `instance`. A Node's
    Event goes to namespace ``default``, as client-go puts a cluster-scoped object's."""
    r = event.regarding
    regarding = {"kind": r.kind, "apiVersion": r.api_version, "name": r.name}
    if r.namespace:
        regarding["namespace"] = r.namespace
    if r.uid:
        regarding["uid"] = r.uid
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": r.namespace or "default"},
        "eventTime": _micro(now),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:128],
        "action": event.action[:128],
        "reason": event.reason[:128],
        "note": event.note,
        "type": event.type_,
        "regarding": regarding,
    }


class KubeEventRecorder:
    """Records Kubernetes Events in the background (see the module docstring).

    Args:
        api: the agent's API client.
        instance: ``reportingInstance`` (the replica's identity).
        clock: the agent's clock (event times and the correlator's windows).
        metrics: counts each Event written, updated, dropped or failed (``action("kube-event", result)``).
    """

    def __init__(self, api: k8s.ApiClient, instance: str, clock: Clock, metrics: ActionMetrics | None = None) -> None:
        self.events_api = k8s.EventsV1Api(api)
        self.instance = instance
        self.clock = clock
        self.metrics = metrics
        self.correlator = EventCorrelator()
        self.queue: asyncio.Queue[KubeEvent | FromCloudEvent] = asyncio.Queue(QUEUE_SIZE)
        self._last_error_log = -ERROR_LOG_EVERY_S
        # awaited before each Event is written (the engine's RecoveryEngine.restarts_quiet: no restart being sent,
        # bounded): the Events of a fault wait for its restart's writes rather than go to the apiserver beside them
        self.hold: Callable[[], Awaitable[None]] | None = None

    def record(self, event: KubeEvent | FromCloudEvent) -> None:
        """Queue `event` (or a CloudEvent, for the Events it stands for); never waits (a full queue drops it and
        counts ``dropped``)."""
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self._count("dropped")

    def _events_of(self, item: KubeEvent | FromCloudEvent) -> list[KubeEvent]:
        """The Events of a queued item (none, counted ``failed`` and logged, when a CloudEvent's cannot be made)."""
        if not isinstance(item, FromCloudEvent):
            return [item]
        try:
            return from_cloudevent(item.doc, item.node_uid)
        except Exception as e:  # last resort: a CloudEvent whose Events cannot be made costs only those Events
            self._count("failed")
            log.warning("kubernetes event not made from a cloudevent", error=str(e), type=item.doc.get("type"))
            return []

    async def _take(self, item: KubeEvent | FromCloudEvent) -> None:
        """Write `item`'s Events, each after the hold (:attr:`hold`)."""
        for event in self._events_of(item):
            if self.hold is not None:
                await self.hold()
            await self.write(event)

    async def run(self, stop: asyncio.Event) -> None:
        """Write the queued Events until `stop` is set, then what is left for at most 2 s."""
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                get = asyncio.ensure_future(self.queue.get())
                await asyncio.wait({get, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not get.done():
                    get.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await get
                    break
                await self._take(get.result())
        finally:
            stopping.cancel()
        await self.drain()

    async def write(self, event: KubeEvent) -> None:
        """Create or update the Event for `event` now (what :meth:`run` does for each); never raises but a
        cancellation."""
        now = self.clock.now()
        step = self.correlator.observe(event, now)
        if isinstance(step, Drop):
            self._count("dropped")
            return
        ns = event.regarding.namespace or "default"
        try:
            with translated():
                await self._send(step, ns, now)
        except KubeError as e:  # refused, or no answer: an Event is never worth stopping recovery for
            self._failed(event, str(e))
        except Exception as e:  # last resort of the kube-events task: a bug must not end it (nor the agent)
            self._failed(event, f"{type(e).__name__}: {e}", bug=True)

    async def _send(self, step: Create | Update, ns: str, now: datetime) -> None:
        """Create the Event of `step`, or patch its series.

        Raises:
            KubeError: refused (an answer outside 2xx) or not answered.
        """
        if isinstance(step, Create):
            body: Any = event_body(step.event, step.name, now, self.instance)  # the client takes a dict body
            # the answer (the Event) is not needed: read raw, never built into a model (issue 39: building
            # it was 2.3% of the agent's CPU under the bench_e2e load)
            await _raw(await self.events_api.create_namespaced_event(ns, body, _preload_content=False))
            self._count("done")
        elif isinstance(step, Update):
            patch = {"series": {"count": step.count, "lastObservedTime": _micro(step.last)}}
            merge: dict[str, Any] = {"_content_type": "application/merge-patch+json", "_preload_content": False}
            await _raw(await self.events_api.patch_namespaced_event(step.name, ns, patch, **merge))
            self._count("done")

    def _failed(self, event: KubeEvent, detail: str, *, bug: bool = False) -> None:
        """Count an Event not written; log it at most once every ERROR_LOG_EVERY_S (a `bug` with its traceback)."""
        self._count("failed")
        mono = time.monotonic()
        if mono - self._last_error_log >= ERROR_LOG_EVERY_S:
            self._last_error_log = mono
            log.warning("kubernetes event not written", reason=event.reason, regarding=event.regarding.name,
                        error=detail, exc_info=bug)  # fmt: skip

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.action("kube-event", result)

    async def drain(self, timeout_s: float = 2.0) -> None:
        """Write what is queued, for at most `timeout_s` (shutdown)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while not self.queue.empty():
                    for event in self._events_of(self.queue.get_nowait()):
                        await self.write(event)


async def _raw(resp: Any) -> None:
    """Read and release a ``_preload_content=False`` answer (an aiohttp response).

    Raises:
        KubeApiError: the answer's status is not 2xx (status, reason, the Status message).
    """
    try:
        body = await resp.read()
    finally:
        resp.release()
    raise_for_answer(resp.status, resp.reason, body, resp.headers)


class EventSinkLike(Protocol):
    async def submit(self, event: Any) -> Awaitable[None]: ...


class KubeEventsSink:
    """The agent's CloudEvent sink, also recording the Kubernetes Events each CloudEvent stands for. `node_uid` gives
    a node's UID from the agent's cache ("" when unknown)."""

    def __init__(
        self, inner: EventSinkLike | None, recorder: KubeEventRecorder, node_uid: Callable[[str], str]
    ) -> None:
        self.inner = inner
        self.recorder = recorder
        self.node_uid = node_uid

    async def submit(self, event: Any) -> Awaitable[None]:
        """Hand `event` to the inner sink (None: Kafka is off, nothing to wait for) and queue its Kubernetes
        Events (made in the recorder's task: :class:`FromCloudEvent`); returns what the inner sink returned."""
        if self.inner is not None:
            done = await self.inner.submit(event)
        else:
            finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            finished.set_result(None)
            done = finished
        # the type and the data as built (plain JSON values, never changed after): no second serialisation
        self.recorder.record(FromCloudEvent({"type": event.get_type(), "data": event.get_data()}, self.node_uid))
        return done
