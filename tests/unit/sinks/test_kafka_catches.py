"""The Kafka publisher's catches, each narrowed to what it is meant for (issue 40): the producer's errors on a
send, a delivery or a stop are still handled as before; a bug is no longer taken for a Kafka problem. No broker:
the producer is tests/support/fakes.py's FakeProducer."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from cloudevents.core.v1.event import CloudEvent
from prometheus_client import CollectorRegistry

from agent.core.faults import ObjectRef
from agent.settings import KafkaSettings
from agent.sinks import events as ev
from agent.sinks.kafka import ErrorReason, KafkaPublisher, Mode, wait_until
from agent.sinks.metrics import AgentMetrics
from agent.sinks.outbox import Outbox
from tests.support.factories import outbox_message
from tests.support.fakes import FakeProducer

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
JOB = ObjectRef("vcjob", "ns", "job", "uid")


def started(i: int) -> CloudEvent:
    return ev.recovery_started(f"inc-{i}", JOB, "restart-job", "r", cluster="c", at=T0)


def settings(tmp_path: Path, **kw: Any) -> KafkaSettings:
    return KafkaSettings.model_validate({"outbox_dir": str(tmp_path / "outbox"), "enabled": True} | kw)


@pytest.fixture(autouse=True)
def topics_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    async def exist(self: KafkaPublisher, opts: dict[str, Any]) -> None: ...

    monkeypatch.setattr(KafkaPublisher, "_check_topics", exist)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        pytest.param(KafkaConnectionError("connection reset"), ErrorReason.UNREACHABLE, id="KafkaConnectionError"),
        pytest.param(KafkaTimeoutError("metadata"), ErrorReason.DELIVERY, id="KafkaTimeoutError"),
        pytest.param(ConnectionResetError("reset by peer"), ErrorReason.UNREACHABLE, id="OSError"),
        pytest.param(TimeoutError("timed out"), ErrorReason.UNREACHABLE, id="TimeoutError"),
    ],
)
async def test_a_send_that_raises_a_producer_error_spills(
    tmp_path: Path, error: BaseException, reason: ErrorReason
) -> None:
    """send() raising what aiokafka raises (KafkaError, OSError, TimeoutError) sends the publisher to the outbox,
    counted by reason; the event stays on disk for the replay."""
    pub = KafkaPublisher(settings(tmp_path), producer_factory=lambda **_: FakeProducer([("raise", error)] * 100))
    await pub.start()
    try:
        assert pub.mode is Mode.DIRECT
        await pub.publish(started(0))
        mode: Mode = pub.mode  # changed by publish()
        assert mode is Mode.SPILL
        assert pub.stats.errors[reason.value] == 1
        assert pub.outbox.pending == 1
    finally:
        await pub.stop()


async def test_a_bug_in_send_is_a_task_failure_not_a_kafka_error(tmp_path: Path) -> None:
    """A send() that raises something no producer raises (a TypeError: a bug) is not counted as a Kafka problem:
    it escapes to the task's last-resort guard, which logs it and counts it in fault_agent_task_failures_total.
    (The old catch took any exception for a failed send: errors[delivery] 1, task failures 0.)"""
    reg = CollectorRegistry()
    metrics = AgentMetrics(reg)
    bug = TypeError("a bug")
    pub = KafkaPublisher(
        settings(tmp_path), metrics=metrics, producer_factory=lambda **_: FakeProducer([("raise", bug)])
    )
    await pub.start()
    try:
        await pub.publish(started(0))
        assert await wait_until(
            lambda: reg.get_sample_value("fault_agent_task_failures_total", {"task": "kafka-commit"}) == 1.0, 2.0
        )
        assert sum(pub.stats.errors.values()) == 0
        assert pub.outbox.pending == 1  # on disk all the same
    finally:
        await pub.stop()


def _prefill(directory: Path, n: int) -> None:
    box = Outbox(directory)
    box.open()
    try:
        box.append([outbox_message(i) for i in range(n)])
    finally:
        box.close()


@pytest.mark.parametrize(
    ("first", "reason"),
    [
        pytest.param(("fail", KafkaConnectionError("reset")), ErrorReason.UNREACHABLE, id="KafkaConnectionError"),
        pytest.param(("fail", KafkaTimeoutError("no ack")), ErrorReason.DELIVERY, id="KafkaTimeoutError"),
        pytest.param(("fail", RuntimeError("sender task died")), ErrorReason.DELIVERY, id="other-exception"),
        pytest.param(("raise", KafkaConnectionError("reset")), ErrorReason.UNREACHABLE, id="send-raises"),
        pytest.param("cancel", ErrorReason.DELIVERY, id="cancelled"),
    ],
)
async def test_a_failed_replay_delivery_is_retried_from_the_cursor(
    tmp_path: Path, first: Any, reason: ErrorReason
) -> None:
    """A replay whose first delivery fails (any way a delivery future can end badly, or send() raising) rewinds to
    the outbox cursor, counts the reason, and the next round sends every event. Regression for the cancelled
    delivery: the old replay re-raised the future's CancelledError, which ended the replay task for good (the
    events stayed in the outbox until the next start)."""
    _prefill(tmp_path / "outbox", 3)
    producer = FakeProducer([first])
    pub = KafkaPublisher(settings(tmp_path), producer_factory=lambda **_: producer)
    await pub.start()
    try:
        assert await wait_until(lambda: pub.mode is Mode.DIRECT and pub.outbox.pending == 0, 5.0), (
            pub.mode,
            pub.outbox.pending,
            pub.stats.errors,
        )
        assert pub.stats.errors == {reason.value: 1}
        assert sum(n for (_, result), n in pub.stats.published.items() if result == "ok") == 3
        assert producer.sent >= 4  # the failed first send, then all three again
    finally:
        await pub.stop()


@pytest.mark.parametrize(
    "error",
    [KafkaError("flush failed"), ConnectionResetError("reset"), TimeoutError("stop timed out")],
    ids=["KafkaError", "OSError", "TimeoutError"],
)
async def test_a_producer_that_cannot_stop_has_its_connections_closed(error: BaseException) -> None:
    from agent.sinks.kafka.producer import stop_producer

    producer = FakeProducer(stop_error=error)
    await stop_producer(producer, 1.0)
    assert producer.closed == 1


async def test_a_bug_in_a_producer_stop_is_not_hidden() -> None:
    from agent.sinks.kafka.producer import stop_producer

    producer = FakeProducer(stop_error=AttributeError("a bug"))
    with pytest.raises(AttributeError, match="a bug"):
        await stop_producer(producer, 1.0)
    assert producer.closed == 0
