"""KafkaPublisher paths that need no broker: Kafka disabled (outbox only), bad events, a full outbox, settings."""

from __future__ import annotations

import asyncio
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError
from cloudevents.core.v1.event import CloudEvent

from agent.core.faults import ObjectRef
from agent.settings import KafkaSettings
from agent.sinks import events as ev
from agent.sinks.kafka import ErrorReason, KafkaPublisher, KafkaSinkError, Mode, direct, producer_options
from agent.sinks.kafka.publisher import SWITCH_INTERVAL_S
from agent.sinks.outbox import Outbox, encode_record

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
JOB = ObjectRef("vcjob", "ns", "job", "uid")


def settings(tmp_path: Path, **kw: Any) -> KafkaSettings:
    return KafkaSettings.model_validate({"outbox_dir": str(tmp_path / "outbox"), "enabled": False} | kw)


def started(i: int) -> CloudEvent:
    return ev.recovery_started(f"inc-{i}", JOB, "restart-job", "r", cluster="c", at=T0)


async def test_disabled_kafka_keeps_every_event_in_the_outbox_across_restarts(tmp_path: Path) -> None:
    pub = KafkaPublisher(settings(tmp_path))
    await pub.start()
    assert pub.mode is Mode.SPILL
    for i in range(3):
        await pub.publish(started(i))
    assert pub.outbox.pending == 3
    assert pub.stats.published[("training.recoveries", "outbox")] == 3
    await pub.stop()
    box = Outbox(tmp_path / "outbox")
    box.open()
    try:
        assert [m.event_id for m in box.read(10).messages] == [started(i).get_id() for i in range(3)]
    finally:
        box.close()


async def test_an_event_that_cannot_be_encoded_is_counted_and_skipped(tmp_path: Path) -> None:
    pub = KafkaPublisher(settings(tmp_path))
    await pub.start()
    try:
        await pub.publish(CloudEvent({"type": "com.example.other", "source": "/x", "id": "1"}, {}))
        assert pub.stats.published[("unknown", "invalid")] == 1
        assert pub.stats.errors[ErrorReason.INVALID.value] == 1
        assert pub.outbox.pending == 0
    finally:
        await pub.stop()


async def test_a_full_outbox_drops_with_a_count_and_never_raises(tmp_path: Path) -> None:
    one = len(encode_record(ev.encode(started(0))))
    pub = KafkaPublisher(settings(tmp_path), outbox=Outbox(tmp_path / "small", max_bytes=one * 2 + one // 2))
    await pub.start()
    try:
        for i in range(4):
            await pub.publish(started(i))
        assert pub.outbox.pending == 2
        assert pub.stats.errors[ErrorReason.OUTBOX.value] == 2
        assert pub.stats.published[("training.recoveries", "error")] == 2
    finally:
        await pub.stop()


@pytest.mark.parametrize(
    ("update", "keys"),
    [
        pytest.param({}, {"bootstrap_servers", "client_id", "request_timeout_ms", "security_protocol"}, id="plaintext"),
        pytest.param(
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "SCRAM-SHA-256",
                "sasl_username": "u",
                "sasl_password": "p",
            },
            {"sasl_mechanism", "sasl_plain_username", "sasl_plain_password"},
            id="scram",
        ),
        pytest.param({"security_protocol": "SSL"}, {"ssl_context"}, id="ssl-system-ca"),
    ],
)
def test_producer_options_by_security_protocol(tmp_path: Path, update: dict[str, Any], keys: set[str]) -> None:
    opts = producer_options(settings(tmp_path, **update))
    assert keys <= set(opts)
    assert opts["security_protocol"] == update.get("security_protocol", "PLAINTEXT")


@pytest.mark.parametrize(
    ("update", "needle"),
    [
        pytest.param({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}, "sasl_username", id="no-user"),
        pytest.param(
            {"security_protocol": "SASL_PLAINTEXT", "sasl_username": "u", "sasl_password": "p"},
            "sasl_mechanism",
            id="no-mechanism",
        ),
        pytest.param({"security_protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"}, "kafka.ssl_cafile", id="no-ca"),
    ],
)
def test_impossible_security_settings_are_a_config_error(tmp_path: Path, update: dict[str, Any], needle: str) -> None:
    with pytest.raises(KafkaSinkError) as info:
        producer_options(settings(tmp_path, **update))
    assert info.value.reason is ErrorReason.CONFIG
    assert info.value.retriable is False
    assert needle in str(info.value)


async def test_publish_after_stop_is_counted_not_hung(tmp_path: Path) -> None:
    pub = KafkaPublisher(settings(tmp_path))
    await pub.start()
    await pub.stop()
    await pub.publish(started(1))
    assert pub.stats.published[("training.recoveries", "error")] == 1


class _HangingProducer:
    """A connected producer whose broker answers nothing (SIGSTOPped): records are taken, never acknowledged."""

    def __init__(self, **_: Any) -> None:
        self.sent = 0

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def partitions_for(self, topic: str) -> set[int]:
        return {0}  # the metadata came back before the broker stopped answering

    async def send(self, topic: str, value: bytes, *, key: bytes, headers: Any) -> Any:
        self.sent += 1
        return asyncio.get_running_loop().create_future()  # never done: the broker hangs


async def test_an_event_is_on_disk_when_publish_returns_even_while_the_broker_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 16 item 1): with a broker that takes requests and never answers, events used to stay in
    memory for spill_after_s; a crash then lost them. publish() must return only once the event is durable."""

    async def topics_exist(self: KafkaPublisher, opts: dict[str, Any]) -> None: ...

    monkeypatch.setattr(KafkaPublisher, "_check_topics", topics_exist)
    made: list[_HangingProducer] = []

    def factory(**kw: Any) -> _HangingProducer:
        made.append(_HangingProducer(**kw))
        return made[-1]

    s = settings(tmp_path, enabled=True, spill_after_s=300, flush_deadline_s=0.5)
    pub = KafkaPublisher(s, producer_factory=factory)
    await pub.start()
    try:
        assert pub.connected
        assert pub.mode is Mode.DIRECT
        for i in range(5):
            await pub.publish(started(i))
            # What a crash right now would leave: read a copy of the files with a second, independent outbox (the
            # directory itself is locked by the publisher's).
            crashed = tmp_path / f"crashed-{i}"
            shutil.copytree(tmp_path / "outbox", crashed)
            box = Outbox(crashed)
            box.open()
            try:
                on_disk = [m.event_id for m in box.read(100).messages]
            finally:
                box.close()
            assert on_disk == [started(j).get_id() for j in range(i + 1)]
        await asyncio.sleep(0.05)
        assert made[0].sent == 5  # sent straight away as well, not held back until a spill
        assert pub.mode is Mode.DIRECT
    finally:
        await pub.stop()


class _FailingSendProducer(_HangingProducer):
    """A connected producer whose send() fails (its connection broke between the connect and the event)."""

    async def send(self, topic: str, value: bytes, *, key: bytes, headers: Any) -> Any:
        self.sent += 1
        raise KafkaConnectionError("connection reset")


class _StuckSendProducer(_HangingProducer):
    """A connected producer whose send() itself never returns."""

    async def send(self, topic: str, value: bytes, *, key: bytes, headers: Any) -> Any:
        self.sent += 1
        await asyncio.Event().wait()


@pytest.mark.parametrize(
    ("producer", "reason"),
    [(_FailingSendProducer, ErrorReason.UNREACHABLE), (_StuckSendProducer, ErrorReason.STALLED)],
    ids=["send-fails", "send-stuck"],
)
async def test_a_send_that_fails_or_sticks_right_after_the_commit_spills_and_publish_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, producer: type[_HangingProducer], reason: ErrorReason
) -> None:
    """The commit hands a lone event to the producer before publish() returns: a send() that raises, or never
    returns, must neither hold publish() up beyond the send bound nor lose the event (it stays in the outbox for
    the replay)."""

    async def topics_exist(self: KafkaPublisher, opts: dict[str, Any]) -> None: ...

    monkeypatch.setattr(KafkaPublisher, "_check_topics", topics_exist)
    monkeypatch.setattr(direct, "_SEND_FIRST_S", 0.05)
    made: list[_HangingProducer] = []

    def factory(**kw: Any) -> _HangingProducer:
        made.append(producer(**kw))
        return made[-1]

    pub = KafkaPublisher(settings(tmp_path, enabled=True, flush_deadline_s=0.5), producer_factory=factory)
    await pub.start()
    try:
        assert pub.mode is Mode.DIRECT
        async with asyncio.timeout(5):
            await pub.publish(started(0))
        assert made[0].sent == 1
        mode: Mode = pub.mode  # changed by publish()
        assert mode is Mode.SPILL
        assert pub.stats.errors[reason.value] == 1
        assert pub.outbox.pending == 1  # on disk, for the replay
    finally:
        await pub.stop()


async def test_the_outbox_thread_gets_the_gil_within_the_publishers_switch_interval(tmp_path: Path) -> None:
    """While a publisher runs, a thread waiting for the GIL (the group commit's write + fsync) waits at most
    SWITCH_INTERVAL_S for a busy event loop to give it up, not CPython's 5 ms; stop() puts the interval back."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # CPython's default
    try:
        pub = KafkaPublisher(settings(tmp_path))
        await pub.start()
        try:
            assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
            await pub.publish(started(0))  # committed through the thread meanwhile
            assert pub.outbox.pending == 1
        finally:
            await pub.stop()
        assert sys.getswitchinterval() == pytest.approx(0.005)
    finally:
        sys.setswitchinterval(before)
