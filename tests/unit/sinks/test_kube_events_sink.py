"""The Kubernetes Events a published CloudEvent stands for are made in the recorder's task, not when the engine
hands the CloudEvent to its sink (issue 39: the decision path ends at the sink; converting there cost it CPU before
the fault's fault.detected was committed). What they are is tests/unit/core/test_kube_events.py's."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import T0 as NOW

import agent.sinks.kube_events as kube_events_module
from agent.core.clock import FixedClock
from agent.core.faults import ObjectRef
from agent.core.kube_events import KubeEvent
from agent.sinks import events as ev
from agent.sinks.kube_events import FromCloudEvent, KubeEventRecorder, KubeEventsSink

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
JOB = ObjectRef("vcjob", "team-a", "llama", "uid-1")


class Counted:
    def __init__(self) -> None:
        self.results: list[tuple[str, str]] = []

    def action(self, action: str, result: str) -> None:
        self.results.append((action, result))


class WritesRecorded(KubeEventRecorder):
    """The recorder with its writes kept in a list (no request is sent)."""

    def __init__(self, api: k8s.ApiClient, metrics: Counted | None = None) -> None:
        super().__init__(api, "agent", FixedClock(NOW), metrics)
        self.written: list[KubeEvent] = []

    async def write(self, event: KubeEvent) -> None:
        self.written.append(event)


class Inner:
    """The CloudEvent sink under the Events sink: takes each event, durable at once."""

    def __init__(self) -> None:
        self.taken: list[Any] = []

    async def submit(self, event: Any) -> Awaitable[None]:
        self.taken.append(event)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def _detected() -> Any:
    return ev.fault_detected(factories.fault(node="n1", at=T0), cluster="c", job=JOB, incident_id="inc-1")


async def test_submit_queues_the_cloudevent_and_the_recorder_makes_and_writes_its_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[str] = []
    real = kube_events_module.from_cloudevent

    def counted(doc: Any, node_uid: Any) -> list[KubeEvent]:
        made.append(doc["type"])
        return real(doc, node_uid)

    monkeypatch.setattr(kube_events_module, "from_cloudevent", counted)
    api = k8s.ApiClient()
    try:
        recorder = WritesRecorded(api)
        inner = Inner()
        sink = KubeEventsSink(inner, recorder, lambda name: f"uid-{name}")
        event = _detected()
        await sink.submit(event)
        assert inner.taken == [event]
        assert made == []  # nothing made on the submitting path
        assert recorder.queue.qsize() == 1
        stop = asyncio.Event()
        running = asyncio.ensure_future(recorder.run(stop))
        for _ in range(20):
            await asyncio.sleep(0)
        assert made == [ev.FAULT_DETECTED]
        assert [(e.regarding.kind, e.regarding.name, e.regarding.uid, e.reason) for e in recorder.written] == [
            ("Job", "llama", "uid-1", "FaultDetected"),
            ("Node", "n1", "uid-n1", "FaultDetected"),
        ]
        stop.set()
        await asyncio.wait_for(running, 3)
    finally:
        await api.close()


async def test_a_cloudevent_whose_events_cannot_be_made_is_counted_and_the_recorder_goes_on() -> None:
    api = k8s.ApiClient()
    try:
        metrics = Counted()
        recorder = WritesRecorded(api, metrics)

        def broken(name: str) -> str:
            raise RuntimeError("node cache gone")

        recorder.record(FromCloudEvent(ev.as_json(_detected()), broken))  # type: ignore[arg-type]
        recorder.record(FromCloudEvent(ev.as_json(_detected()), lambda name: "u"))  # type: ignore[arg-type]
        stop = asyncio.Event()
        running = asyncio.ensure_future(recorder.run(stop))
        for _ in range(20):
            await asyncio.sleep(0)
        assert metrics.results == [("kube-event", "failed")]
        assert [e.regarding.kind for e in recorder.written] == ["Job", "Node"]
        stop.set()
        await asyncio.wait_for(running, 3)
    finally:
        await api.close()


async def test_drain_makes_and_writes_the_events_still_queued() -> None:
    api = k8s.ApiClient()
    try:
        recorder = WritesRecorded(api)
        recorder.record(FromCloudEvent(ev.as_json(_detected()), lambda name: "u"))  # type: ignore[arg-type]
        await recorder.drain()
        assert [e.regarding.kind for e in recorder.written] == ["Job", "Node"]
    finally:
        await api.close()
