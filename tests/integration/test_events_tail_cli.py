"""`fault-agent events tail` against the testbed's real Kafka broker: a topic that does not exist."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agent.cli import main

pytestmark = pytest.mark.integration


async def test_missing_topic_is_one_clear_error(
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS", kafka_bootstrap)
    caplog.set_level(logging.DEBUG, logger="aiokafka")
    code = await asyncio.to_thread(main, ["events", "tail", "--topic", "nosuch", "--idle-exit", "1"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"fault-agent events tail: cannot read nosuch at {kafka_bootstrap}: topic nosuch not found "
        "(check --topic or the kafka topic settings)"
    ]
    assert not [r for r in caplog.records if "not found in cluster metadata" in r.getMessage()]
