"""The agent's events read by a consumer nobody on the project wrote: Apache Kafka's own kafka-console-consumer
(``org.apache.kafka.tools.consumer.ConsoleConsumer`` from ``org.apache.kafka:kafka-tools``, the testbed Kafka's
version, fetched by Maven into the testbed cache), against the testbed's broker.

The agent's publisher sends one event of every type; the console consumer prints each record's headers, key and
value; every value is a valid event of its type (envelope and data schemas), keyed by its ``partitionkey``, with
the structured-mode content-type header and nothing else, and every event sent is read.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agent.sinks import events as ev
from agent.sinks.kafka import wait_until
from agent.sinks.metrics import AgentMetrics
from testbed import build, versions

pytestmark = pytest.mark.integration

CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
SEP = "\x1f"  # between the printed fields: never in a key, a header or orjson's output


def _publish_support() -> ModuleType:
    """tests/integration/test_kafka_publish.py: its settings, sample events and publisher fixture."""
    path = Path(__file__).with_name("test_kafka_publish.py")
    spec = importlib.util.spec_from_file_location("_kafka_publish", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kp = _publish_support()
publisher_factory = kp.publisher_factory


def console_consumer(bootstrap: str, topic: str, offset: int, count: int, wait_s: float = 60) -> list[dict[str, Any]]:
    """`count` records of partition 0 of `topic` from `offset`, read with kafka-console-consumer (the partition
    is assigned: no consumer group, so no group join to wait for); each as {headers: [(name, value)], key, value}.
    Fails with the tool's output when it does not exit 0 or reads fewer within `wait_s`."""
    argv = build.kafka_tool_argv(
        CONSOLE_CONSUMER,
        "--bootstrap-server", bootstrap,
        "--topic", topic,
        "--partition", "0",
        "--offset", str(offset),
        "--max-messages", str(count),
        "--timeout-ms", str(int(wait_s * 1000)),
        "--property", "print.headers=true",
        "--property", "print.key=true",
        "--property", f"key.separator={SEP}",
        "--property", "headers.separator=;",
    )  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=wait_s + 120)
    assert proc.returncode == 0, f"kafka-console-consumer exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert f"Processed a total of {count} messages" in proc.stderr, proc.stderr[-3000:]
    out = []
    for line in proc.stdout.splitlines():
        headers, key, value = line.split(SEP)
        pairs = [tuple(h.split(":", 1)) for h in headers.split(";")] if headers != "NO_HEADERS" else []
        out.append({"headers": pairs, "key": key, "value": value})
    return out


def read_events(bootstrap: str, topic: str, ids: set[str]) -> list[dict[str, Any]]:
    """Every record of `topic` (one partition) until each of `ids` was read: as many records as ids are missing,
    then again from where it stopped while some are (delivery is at least once: a producer retry may write a
    record twice, so a consumer de-duplicates by id). At most 3 rounds."""
    records: list[dict[str, Any]] = []
    missing = set(ids)
    for _ in range(3):
        if not missing:
            break
        batch = console_consumer(bootstrap, topic, len(records), len(missing))
        records += batch
        missing -= {json.loads(r["value"])["id"] for r in batch}
    return records


def test_console_tools_are_the_testbed_kafka_version() -> None:
    lib = build.kafka_tools_lib()
    assert (lib / f"kafka-tools-{versions.KAFKA}.jar").is_file()
    proc = subprocess.run(
        build.kafka_tool_argv(CONSOLE_CONSUMER, "--version"), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith(versions.KAFKA)


async def test_console_consumer_reads_the_agents_events(
    kafka_bootstrap: str, tmp_path: Path, publisher_factory: Any
) -> None:
    s = kp.kafka_settings(kafka_bootstrap, tmp_path, topic_partitions=1)
    pub = await publisher_factory(s, metrics=AgentMetrics(CollectorRegistry(), cluster="console"))
    assert pub.connected, pub.last_error
    job = kp.ObjectRef("vcjob", "team-a", "llama", "uid-llama")
    sent = [
        *kp.sample_events("console"),
        ev.job_misconfigured(
            kp.ObjectRef("vcjob", "team-a", "llama", "uid-llama"),
            cluster="console",
            at=kp.T0,
            label="fault-retry-times",
            value="abc",
            problem="not an integer: the job's own retry budget applies",
        ),
        ev.quarantine_released("node-3", cluster="console", at=kp.T0, by="oncall", reason="board replaced"),
        ev.recovery_held(
            "llama-held", job, "restart-job", "held by the open circuit breaker", cluster="console", at=kp.T0
        ),
        ev.recovery_resumed(
            job, cluster="console", incident_id="llama-held", restart_at=kp.T0, first_fault_at=kp.T0,
            first_step_at=kp.T0 + timedelta(seconds=40), step=1201, checkpoint_step=1200,
        ),
        ev.job_hung(
            job, cluster="console", at=kp.T0, pod=kp.ObjectRef("pod", "team-a", "llama-0", "uid-pod"), node="node-1",
            lease=kp.ObjectRef("lease", "team-a", "fault-agent-progress-llama", "uid-lease"), step=1200,
            checkpoint_step=1000, last_step_at=kp.T0 - timedelta(seconds=600), timeout_s=600.0, timeout_from="label",
            action="restart-job", reason="no step for 600 s", incident_id="llama-hang",
        ),
        ev.job_straggler(
            job, cluster="console", at=kp.T0, found_at=kp.T0, state="straggling",
            pod=kp.ObjectRef("pod", "team-a", "llama-1", "uid-pod-1"), node="node-2", chips=("Ascend910-0",),
            rank=1, step=1200, step_time_s=2.5, median_s=1.0, multiple=1.5, windows=3,
            lease=kp.ObjectRef("lease", "team-a", "fault-agent-progress-llama", "uid-lease"), mode="detect",
            avoidance="none",
        ),
    ]  # fmt: skip
    assert {e.get_type() for e in sent} == set(ev.EVENT_TYPES)
    for e in sent:
        await pub.publish(e)
    assert await wait_until(lambda: pub.pending == 0, 30)
    want = {e.get_id(): s.faults_topic if ev.stream_of(e) is ev.Stream.FAULTS else s.recoveries_topic for e in sent}
    topics = [s.faults_topic, s.recoveries_topic]
    results = await asyncio.gather(
        *(asyncio.to_thread(read_events, kafka_bootstrap, t, {i for i, tt in want.items() if tt == t}) for t in topics)
    )
    seen: dict[str, str] = {}
    for topic, records in zip(topics, results, strict=True):
        for r in records:
            doc = json.loads(r["value"])
            assert ev.event_errors(doc) == [], doc["type"]
            assert r["key"] == doc["partitionkey"]
            assert r["headers"] == [("content-type", "application/cloudevents+json")]
            seen[doc["id"]] = topic
    assert seen == want
