"""/readyz "events": ready while Kafka or the outbox can take events, not when the publisher stopped or the
outbox is full (issue 7: readiness = caches synced and Kafka or outbox healthy)."""

from __future__ import annotations

from pathlib import Path

from agent.app import _events_probe
from agent.settings import Settings
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
