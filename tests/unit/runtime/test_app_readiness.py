"""/readyz "events": ready while Kafka or the outbox can take events, not when the publisher stopped or the
outbox is full (issue 7: readiness = caches synced and Kafka or outbox healthy)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from agent.runtime.app import _events_probe
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sinks.kafka import KafkaPublisher


def settings(tmp_path: Path, **kafka: object) -> Settings:
    return Settings.model_validate(
        {
            "kafka": {
                "bootstrap_servers": "127.0.0.1:1",  # nothing listens: Kafka unreachable
                "outbox_dir": str(tmp_path / "outbox"),
                "request_timeout_ms": 1000,
                **kafka,
            }
        }
    )


def test_kafka_disabled_is_ready(tmp_path: Path) -> None:
    check = _events_probe(None, settings(tmp_path))()
    assert check.ok
    assert "disabled" in check.detail


async def test_unreachable_kafka_with_room_in_the_outbox_is_ready_then_stopped_is_not(tmp_path: Path) -> None:
    s = settings(tmp_path)
    publisher = KafkaPublisher(s.kafka)
    probe = _events_probe(publisher, s)
    assert not probe().ok  # not started yet
    await publisher.start()
    try:
        check = probe()
        assert check.ok, check.detail
        assert "kafka unavailable" in check.detail
        assert "outbox" in check.detail
    finally:
        await publisher.stop()
    assert not probe().ok


async def test_full_outbox_is_not_ready_and_stop_returns(tmp_path: Path) -> None:
    """Also: stop() returns with Kafka unreachable (aiokafka's bootstrap may hold a cancellation; the publisher
    leaves such a task behind after a bounded wait instead of hanging the agent's shutdown)."""
    s = settings(tmp_path)
    publisher = KafkaPublisher(s.kafka)
    # the probe judges against a 1-byte budget (the setting's own minimum is 1 MiB: too slow to fill here)
    tiny = s.model_copy(update={"kafka": s.kafka.model_copy(update={"outbox_max_bytes": 1})})
    await publisher.start()
    try:
        await publisher.publish(ev.breaker_reset(cluster="c", at=datetime.now(UTC), by="test"))
        assert _events_probe(publisher, s)().ok
        check = _events_probe(publisher, tiny)()
        assert not check.ok
        assert "outbox full" in check.detail
    finally:
        await asyncio.wait_for(publisher.stop(), 30)
