"""`fault-agent goodput` against the testbed's real Kafka broker: recovery.resumed events published by the agent's
own publisher (agent.sinks.kafka.KafkaPublisher), with figures from the agent's own account (agent.core.goodput),
read back from the beginning of the topic and added up per job."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from agent.cli import main
from agent.core.faults import ObjectRef
from agent.core.goodput import JobTraining, Reading, incident_lost_time, work_lost
from agent.settings import KafkaSettings
from agent.sinks import events as ev
from agent.sinks.kafka import KafkaPublisher, wait_until

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
async def publisher(kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[KafkaPublisher]:
    tag = uuid.uuid4().hex[:8]
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        faults_topic=f"g{tag}.faults",
        recoveries_topic=f"g{tag}.recoveries",
        create_topics=True,
        topic_partitions=3,
        topic_replication_factor=1,
        outbox_dir=str(tmp_path / "outbox"),
        request_timeout_ms=5000,
    )
    p = KafkaPublisher(settings)
    await p.start()
    yield p
    await p.stop()


def resumed_event(job: ObjectRef, incident: str, account: JobTraining, stop: float, first_step: float) -> Any:
    """A recovery.resumed event as the engine builds it: a stop at `stop` s, decision 2 s later, restart sent 1 s
    after, pods Running 20 s after that, the first step at `first_step` s; 50 steps lost at 2 s a step."""
    readings = [Reading(150, 100, 2.0, at(stop - 1))]
    work = work_lost(readings)
    lost = incident_lost_time(at(stop), at(stop + 2), at(stop + 3), at(stop + 23), at(first_step), work.seconds)
    account.add(lost, at(stop), work.steps)
    summary = account.summary(at(first_step))
    return ev.recovery_resumed(
        job, cluster="it", incident_id=incident, restart_at=at(stop + 3), first_fault_at=at(stop),
        first_step_at=at(first_step), step=101, checkpoint_step=100, stopped_at=at(stop),
        work_lost=work.as_data(), lost_s=lost.as_data(),
        training={**summary.as_data(), "first_step_at": summary.first_step_at},
    )  # fmt: skip


async def test_goodput_adds_up_the_resumed_events_per_job(
    publisher: KafkaPublisher, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    llama = ObjectRef("Job", "team-a", "llama", "uid-llama")
    gpt = ObjectRef("AscendJob", "team-b", "gpt", "uid-gpt")
    a, b = JobTraining(at(0)), JobTraining(at(0))
    sent = [
        resumed_event(llama, "llama-1", a, 1000, 1060),
        resumed_event(llama, "llama-2", a, 5000, 5100),
        resumed_event(gpt, "gpt-1", b, 2000, 2030),
        ev.recovery_started("llama-1", llama, "restart-job", "chip fault", cluster="it", at=at(1000)),
    ]
    for e in sent:
        await publisher.publish(e)
    await publisher.publish(sent[0])  # the same event twice (a replayed outbox): counted once
    assert await wait_until(lambda: publisher.pending == 0, 30)
    topic = publisher.settings.recoveries_topic
    junk = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await junk.start()
    try:
        await junk.send_and_wait(topic, b"not json")
    finally:
        await junk.stop()
    monkeypatch.setenv("FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS", kafka_bootstrap)
    now = at(10000).isoformat()
    code = await asyncio.to_thread(main, ["goodput", "--topic", topic, "--now", now, "--json", "--timeout", "60"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["records_read"], doc["records_unreadable"], doc["events_refused"]) == (6, 1, 0)
    jobs = {(j["namespace"], j["name"]): j for j in doc["jobs"]}
    assert set(jobs) == {("team-a", "llama"), ("team-b", "gpt")}
    llama_row = jobs[("team-a", "llama")]
    # each incident: detection 2 + restart 1 + rescheduling 20 + initialisation (rest) + recomputation 100
    assert llama_row["lost_by_cause_s"] == {
        "detection": 4.0, "restart": 2.0, "rescheduling": 40.0, "initialisation": 37.0 + 77.0, "recomputation": 200.0,
    }  # fmt: skip
    assert llama_row["lost_s"] == pytest.approx(360.0)
    assert llama_row["wall_s"] == 10000.0
    assert llama_row["productive_s"] == pytest.approx(10000.0 - 360.0)
    assert (llama_row["incidents"], llama_row["work_lost_steps"]) == (2, 100)
    assert jobs[("team-b", "gpt")]["lost_s"] == pytest.approx(130.0)
    assert jobs[("team-b", "gpt")]["incidents"] == 1

    # one namespace, and only the incidents resumed in the last hour
    code = await asyncio.to_thread(
        main, ["goodput", "--topic", topic, "--now", now, "-n", "team-a", "--since", "2h", "--json"]
    )
    assert code == 0
    (row,) = json.loads(capsys.readouterr().out)["jobs"]
    assert (row["name"], row["incidents"], row["wall_s"]) == ("llama", 1, 7200.0)
    assert row["lost_s"] == pytest.approx(200.0)

    # the table
    code = await asyncio.to_thread(main, ["goodput", "--topic", topic, "--now", now])
    assert code == 0
    out = capsys.readouterr().out
    assert "llama" in out
    assert "96.4%" in out  # (10000 - 360) / 10000
    assert "RECOMPUTATION" in out


async def test_goodput_of_a_missing_topic_is_one_clear_error(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS", kafka_bootstrap)
    code = await asyncio.to_thread(main, ["goodput", "--topic", "nosuch-goodput", "--timeout", "30"])
    assert code == 1
    assert capsys.readouterr().err.splitlines() == [
        f"fault-agent goodput: cannot read nosuch-goodput at {kafka_bootstrap}: topic nosuch-goodput not found "
        "(check --topic or kafka.recoveries_topic)"
    ]
