"""The Kubernetes Events recorder waits for its ``hold`` (the engine's ``restarts_quiet``: no restart being sent,
bounded) before writing each Event: a fault's Events go to the apiserver after its restart's writes, not beside
them (issue 39)."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client as k8s
from support.factories import T0 as NOW

from agent.core.clock import FixedClock
from agent.core.kube_events import KubeEvent, Regarding
from agent.sinks.kube_events import KubeEventRecorder

EVENT = KubeEvent(Regarding("Job", "batch.volcano.sh/v1alpha1", "ns", "job"), "Warning", "FaultDetected", "Detect", "x")


class WritesRecorded(KubeEventRecorder):
    """The recorder with its writes kept in a list (no request is sent: :meth:`write` is replaced)."""

    def __init__(self, api: k8s.ApiClient) -> None:
        super().__init__(api, "agent", FixedClock(NOW))
        self.written: list[KubeEvent] = []

    async def write(self, event: KubeEvent) -> None:
        self.written.append(event)


async def test_an_event_waits_for_the_hold_before_it_is_written() -> None:
    api = k8s.ApiClient()
    try:
        await _held_then_written(WritesRecorded(api))
    finally:
        await api.close()


async def _held_then_written(recorder: WritesRecorded) -> None:
    free = asyncio.Event()

    async def hold() -> None:
        await free.wait()

    recorder.hold = hold
    stop = asyncio.Event()
    running = asyncio.ensure_future(recorder.run(stop))
    recorder.record(EVENT)
    await asyncio.sleep(0.01)
    assert recorder.written == []  # held while a restart is being sent
    free.set()
    await asyncio.sleep(0.01)
    assert recorder.written == [EVENT]
    stop.set()
    await asyncio.wait_for(running, 3)
