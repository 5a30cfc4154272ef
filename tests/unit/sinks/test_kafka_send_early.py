"""agent.sinks.kafka.publisher ``KafkaPublisher._commit`` with agent.sinks.kafka.direct ``_send_early``: a commit
with nothing ahead of it hands its events to the producer while their outbox write + fsync runs in the thread (the
produce request and the fsync overlap), and releases the callers only once the write returned (durable first)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError
from cloudevents.core.v1.event import CloudEvent

from agent.core.faults import ObjectRef
from agent.settings import KafkaSettings
from agent.sinks import events as ev
from agent.sinks.events import Message
from agent.sinks.kafka import ErrorReason, KafkaPublisher, Mode
from agent.sinks.kafka.publisher import wait_until
from agent.sinks.outbox import Outbox, OutboxError, Position

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
JOB = ObjectRef("vcjob", "ns", "job", "uid")
TOPIC = "training.recoveries"
WAIT_S = 5.0  # bound on every wait below (a hang fails the test instead of stopping the run)


def started(i: int) -> CloudEvent:
    return ev.recovery_started(f"inc-{i}", JOB, "restart-job", "r", cluster="c", at=T0)


class GatedOutbox(Outbox):
    """An outbox whose append (in the commit's thread) waits for `gate` first, then writes, or raises `fail`."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail: OutboxError | None = None

    def append(self, messages: Sequence[Message]) -> list[Position]:
        self.entered.set()
        if not self.gate.wait(WAIT_S):
            raise AssertionError("the gate was not opened")
        if self.fail is not None:
            raise self.fail
        return super().append(messages)


class Producer:
    """A connected producer whose deliveries the test completes (`futures`, in send order)."""

    def __init__(self, **_: Any) -> None:
        self.futures: list[asyncio.Future[Any]] = []
        self.sent: list[bytes] = []
        self.fail_send = False

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def partitions_for(self, topic: str) -> set[int]:
        return {0}

    async def send(self, topic: str, value: bytes, *, key: bytes, headers: Any) -> asyncio.Future[Any]:
        if self.fail_send:
            raise KafkaConnectionError("connection reset")
        self.sent.append(value)
        self.futures.append(asyncio.get_running_loop().create_future())
        return self.futures[-1]


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Producer]:
    async def topics_exist(self: KafkaPublisher, opts: dict[str, Any]) -> None: ...

    monkeypatch.setattr(KafkaPublisher, "_check_topics", topics_exist)
    return []


async def publisher(tmp_path: Path, made: list[Producer]) -> tuple[KafkaPublisher, GatedOutbox]:
    def factory(**kw: Any) -> Producer:
        made.append(Producer(**kw))
        return made[-1]

    box = GatedOutbox(tmp_path / "outbox")
    s = KafkaSettings.model_validate(
        {"outbox_dir": str(tmp_path / "outbox"), "enabled": True, "spill_after_s": 300, "flush_deadline_s": 0.5}
    )
    pub = KafkaPublisher(s, producer_factory=factory, outbox=box)
    await pub.start()
    assert pub.mode is Mode.DIRECT
    return pub, box


async def until(check: Callable[[], bool]) -> None:
    """Let the loop run until `check()` is true (at most WAIT_S)."""
    assert await wait_until(check, WAIT_S, 0.001)


async def test_the_produce_request_leaves_while_the_fsync_runs_and_the_caller_waits_for_the_fsync(
    tmp_path: Path, made: list[Producer]
) -> None:
    """Regression (issue 39, session 23): the commit handed its events to the producer only after the write +
    fsync returned, so the produce request waited a thread hop, a write and an fsync for nothing (the broker's copy
    is not the durability promise). Now send() happens while the write is held in its thread; the caller's future
    (the act task's wait) is done only once the write returned and the event is on disk."""
    pub, box = await publisher(tmp_path, made)
    try:
        done = await pub.submit(started(0))
        await until(lambda: box.entered.is_set() and len(made[0].sent) == 1)  # old code: no send before the write
        for _ in range(20):  # the commit has nothing else to do until the write returns: it must still wait
            await asyncio.sleep(0)
        assert not done.done()
        assert box.pending == 0  # not on disk yet, and the caller knows it
        box.gate.set()
        async with asyncio.timeout(WAIT_S):
            await done
        assert box.pending == 1  # on disk when the caller goes on
        made[0].futures[0].set_result(None)  # the broker acknowledges: the acker moves the cursor past it
        await until(lambda: box.pending == 0)
        assert pub.stats.published[(TOPIC, "ok")] == 1
        assert pub.mode is Mode.DIRECT
    finally:
        box.gate.set()
        await pub.stop()


async def test_a_failed_write_after_the_early_send_releases_the_caller_last_and_counts_an_error(
    tmp_path: Path, made: list[Producer]
) -> None:
    """The write fails after the event was handed to the producer: the caller is released only once the write has
    failed (never before it returned), the event is counted as an error, not as delivered, and its delivery no
    longer concerns the acker."""
    pub, box = await publisher(tmp_path, made)
    try:
        box.fail = OutboxError("disk full", retriable=True)
        done = await pub.submit(started(0))
        await until(lambda: len(made[0].sent) == 1)
        for _ in range(20):
            await asyncio.sleep(0)
        assert not done.done()
        box.gate.set()
        async with asyncio.timeout(WAIT_S):
            await done
        assert pub.stats.errors[ErrorReason.OUTBOX.value] == 1
        assert pub.stats.published[(TOPIC, "error")] == 1
        made[0].futures[0].set_result(None)  # it reached the broker all the same
        for _ in range(20):
            await asyncio.sleep(0)
        assert pub.stats.published[(TOPIC, "ok")] == 0
        assert pub.mode is Mode.DIRECT
        box.fail = None
        await pub.publish(started(1))  # the next event goes its way as usual
        assert box.pending == 1
        assert len(made[0].sent) == 2
    finally:
        box.gate.set()
        await pub.stop()


async def test_a_send_failing_while_the_write_runs_leaves_the_batch_to_the_replay(
    tmp_path: Path, made: list[Producer]
) -> None:
    """send() fails during the write: the publisher spills, the caller still waits for the write, and the event
    is on disk for the replay (nothing of it in the acker's hands)."""
    pub, box = await publisher(tmp_path, made)
    try:
        made[0].fail_send = True
        done = await pub.submit(started(0))
        await until(lambda: pub.mode is Mode.SPILL)
        assert not done.done()
        box.gate.set()
        async with asyncio.timeout(WAIT_S):
            await done
        assert box.pending == 1
        assert pub.stats.errors[ErrorReason.UNREACHABLE.value] == 1
        assert pub.stats.published[(TOPIC, "outbox")] == 1
    finally:
        box.gate.set()
        await pub.stop()


async def test_a_batch_behind_unacknowledged_events_waits_for_the_disk_and_goes_through_the_sender(
    tmp_path: Path, made: list[Producer]
) -> None:
    """With an event unacknowledged ahead, the next commit sends nothing early (per-key order: the sender takes
    the batch once it is on disk, behind the earlier one)."""
    pub, box = await publisher(tmp_path, made)
    try:
        box.gate.set()
        await pub.publish(started(0))  # handed over, never acknowledged
        box.gate.clear()
        box.entered.clear()
        done = await pub.submit(started(1))
        await until(box.entered.is_set)
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(made[0].sent) == 1  # not the second one yet
        box.gate.set()
        async with asyncio.timeout(WAIT_S):
            await done
        await until(lambda: len(made[0].sent) == 2)
        assert made[0].sent == [m.value for m in map(ev.encode, (started(0), started(1)))]
    finally:
        box.gate.set()
        await pub.stop()
