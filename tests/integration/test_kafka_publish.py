"""The Kafka publisher against the testbed's real broker: content, outages, crashes, and bad setups.

No mocks: events go through aiokafka to the testbed's Kafka 4 broker (its PLAINTEXT listener, and its mutual-TLS
listener for the TLS tests) and are read back with a plain consumer. The broker is stopped with
``testbed.kill("kafka")`` and restarted on the same port and data directory with ``testbed.start("kafka")``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import textwrap
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from cloudevents.core.v1.event import CloudEvent
from prometheus_client import CollectorRegistry

from agent.core.faults import Fault, FaultCleared, FaultKind, FaultLevel, ObjectRef
from agent.settings import KafkaSettings
from agent.sinks import events as ev
from agent.sinks.kafka import ErrorReason, KafkaPublisher, KafkaSinkError, Mode, wait_until
from agent.sinks.metrics import AgentMetrics
from agent.sinks.outbox import Outbox
from testbed.cluster import Testbed, free_port

pytestmark = pytest.mark.integration

ROOT = str(Path(__file__).resolve().parents[2])
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
CM = ObjectRef("ConfigMap", "kube-system", "mindx-dl-deviceinfo-node-1")


def kafka_settings(bootstrap: str, tmp_path: Path, **kw: Any) -> KafkaSettings:
    tag = uuid.uuid4().hex[:8]
    base: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "faults_topic": f"t{tag}.faults",
        "recoveries_topic": f"t{tag}.recoveries",
        "create_topics": True,
        "topic_partitions": 3,
        "topic_replication_factor": 1,
        "outbox_dir": str(tmp_path / "outbox"),
        "request_timeout_ms": 5000,
        "spill_after_s": 2.0,
        "flush_deadline_s": 5.0,
    }
    return KafkaSettings(**(base | kw))


async def read_topics(bootstrap: str, topics: list[str], want: int, wait_s: float = 60.0) -> list[Any]:
    """Every record of `topics` from the beginning, until `want` records were read or `wait_s` passed."""
    consumer = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    out: list[Any] = []
    try:
        deadline = time.monotonic() + wait_s
        while len(out) < want and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                out += records
        # A short extra read catches duplicates that arrive after the last expected record.
        for records in (await consumer.getmany(timeout_ms=500)).values():
            out += records
    finally:
        await consumer.stop()
    return out


@pytest.fixture
async def publisher_factory(tmp_path: Path) -> AsyncIterator[Any]:
    made: list[KafkaPublisher] = []

    async def make(settings: KafkaSettings, **kw: Any) -> KafkaPublisher:
        p = KafkaPublisher(settings, **kw)
        made.append(p)
        await p.start()
        return p

    yield make
    for p in made:
        await p.stop()


def chip_fault(node: str, chip: int, at: datetime) -> Fault:
    return Fault(
        kind=FaultKind.CHIP,
        level=FaultLevel.SEPARATE,
        node=node,
        chips=(f"Ascend910-{chip}",),
        codes=("80E01801",),
        signal_time=at,
        observed_at=at + timedelta(seconds=1),
        source=CM,
        reason="CardUnhealthy",
    )


def sample_events(cluster: str) -> list[CloudEvent]:
    job = ObjectRef("vcjob", "team-a", "llama", "uid-llama")
    other = ObjectRef("acjob", "team-b", "gpt", "uid-gpt")
    f = chip_fault("node-1", 3, T0)
    return [
        ev.fault_detected(f, cluster=cluster, job=job, incident_id="inc-1"),
        ev.fault_detected(chip_fault("node-2", 0, T0), cluster=cluster),
        ev.recovery_started("inc-1", job, "restart-job", "chip Ascend910-3 SeparateNPU", cluster=cluster, at=T0),
        ev.recovery_succeeded("inc-1", job, "restart-job", ev.Durations(1, 0.1, 0.5, 40, 41.6), cluster=cluster, at=T0),
        ev.recovery_failed("inc-2", other, "budget-exhausted", cluster=cluster, at=T0, detail="3 of 3 used"),
        ev.fault_cleared(FaultCleared(f, T0 + timedelta(minutes=3), CM), cluster=cluster, job=job),
        ev.breaker_tripped(
            cluster=cluster,
            at=T0,
            reason="3 of 10 nodes",
            faulty_nodes=["a", "b", "c"],
            watched_nodes=10,
            threshold_share=0.2,
            window_s=300,
        ),
        ev.breaker_reset(cluster=cluster, at=T0 + timedelta(hours=1), by="alice", opened_at=T0),
    ]


async def test_events_arrive_with_key_topic_headers_and_valid_payload(
    kafka_bootstrap: str, tmp_path: Path, publisher_factory: Any
) -> None:
    s = kafka_settings(kafka_bootstrap, tmp_path)
    metrics = AgentMetrics(CollectorRegistry(), cluster="it")
    pub = await publisher_factory(s, metrics=metrics)
    assert pub.connected, pub.last_error
    sent = sample_events("it")
    for e in sent:
        await pub.publish(e)
    assert await wait_until(lambda: pub.pending == 0, 30)
    records = await read_topics(kafka_bootstrap, [s.faults_topic, s.recoveries_topic], len(sent))
    by_id = {json.loads(r.value)["id"]: r for r in records}
    assert len(records) == len(sent)
    for e in sent:
        r = by_id[e.get_id()]
        msg = ev.encode(e)
        want_topic = s.faults_topic if msg.stream is ev.Stream.FAULTS else s.recoveries_topic
        assert r.topic == want_topic
        assert r.key == msg.key
        # Structured mode (CloudEvents Kafka binding 3.2): the content-type header only, no binary-mode ce_*.
        assert list(r.headers) == [("content-type", b"application/cloudevents+json")]
        doc = json.loads(r.value)
        assert ev.event_errors(doc) == []
        assert doc["partitionkey"] == r.key.decode()
    # Same key, same partition: a job's events stay in one partition.
    llama = {r.partition for r in records if r.key == b"uid-llama"}
    assert len(llama) == 1
    assert pub.stats.published[(s.recoveries_topic, "ok")] == 5
    ok = metrics.events_published_total.labels(topic=s.faults_topic, result="ok")._value.get()
    assert ok == 3


def numbered(cluster: str, key: int, seq: int) -> CloudEvent:
    job = ObjectRef("vcjob", "team-a", f"job-{key}", f"uid-{key}")
    return ev.recovery_started(f"{key}:{seq}", job, "restart-job", "test", cluster=cluster, at=T0)


def check_delivery(records: list[Any], published: list[tuple[int, int]]) -> int:
    """Every (key, seq) arrived; per key the first occurrences are in publish order. Returns the duplicates."""
    seen: set[str] = set()
    order: dict[str, list[int]] = defaultdict(list)
    dups = 0
    for r in records:
        doc = json.loads(r.value)
        if doc["id"] in seen:
            dups += 1
            continue
        seen.add(doc["id"])
        key, seq = doc["data"]["incident_id"].split(":")
        assert r.key == f"uid-{key}".encode()
        order[key].append(int(seq))
    want: dict[str, list[int]] = defaultdict(list)
    for key, seq in published:
        want[str(key)].append(seq)
    assert dict(order) == dict(want)
    return dups


async def test_the_producer_knows_both_topics_partitions_before_the_first_event(
    kafka_bootstrap: str, tmp_path: Path, publisher_factory: Any
) -> None:
    """The first event of each topic must not wait for a metadata round trip inside send(): the connect fetches
    both topics' partitions (topics created by this start, as on a fresh cluster)."""
    made: list[AIOKafkaProducer] = []

    def factory(**kw: Any) -> AIOKafkaProducer:
        made.append(AIOKafkaProducer(**kw))
        return made[-1]

    s = kafka_settings(kafka_bootstrap, tmp_path)
    pub = await publisher_factory(s, producer_factory=factory)
    assert pub.connected
    assert [made[0].client.cluster.partitions_for_topic(t) for t in (s.faults_topic, s.recoveries_topic)] == [
        {0, 1, 2},
        {0, 1, 2},
    ]


class _RecordingProducer(AIOKafkaProducer):  # type: ignore[misc]
    """The real producer, noting each value handed to its send()."""

    handed: list[bytes]

    async def send(self, topic: str, value: Any = None, key: Any = None, *args: Any, **kw: Any) -> Any:
        fut = await super().send(topic, value, key, *args, **kw)
        self.handed.append(value)
        return fut


async def test_an_event_goes_to_the_producer_before_publish_returns_when_nothing_is_ahead_of_it(
    kafka_bootstrap: str, tmp_path: Path, publisher_factory: Any
) -> None:
    """Regression (issue 19): the engine acts on a fault as soon as its fault.detected is durable (publish()
    returned). The event used to reach the producer only after that, from the sender task, so the restart's
    apiserver writes went out first and the broker's append waited behind them for a CPU. A sparse event (nothing
    unacknowledged ahead of it) must be in the producer's hands when publish() returns, and still arrive."""
    made: list[_RecordingProducer] = []

    def factory(**kw: Any) -> _RecordingProducer:
        made.append(_RecordingProducer(**kw))
        made[-1].handed = []
        return made[-1]

    s = kafka_settings(kafka_bootstrap, tmp_path)
    pub = await publisher_factory(s, producer_factory=factory)
    assert pub.mode is Mode.DIRECT
    events = [ev.fault_detected(chip_fault(f"node-{i}", i, T0), cluster="c") for i in range(3)]
    for i, event in enumerate(events):
        await pub.publish(event)
        assert len(made[0].handed) == i + 1, f"event {i} not handed to the producer when publish() returned"
        assert await wait_until(lambda: pub.outbox.pending == 0, 10.0), "not acknowledged"
    records = await read_topics(kafka_bootstrap, [s.faults_topic], want=3)
    assert sorted(json.loads(r.value)["id"] for r in records) == sorted(e.get_id() for e in events)


async def test_broker_down_for_30s_loses_nothing_and_keeps_per_key_order(
    testbed: Testbed, kafka_bootstrap: str, tmp_path: Path, publisher_factory: Any
) -> None:
    s = kafka_settings(kafka_bootstrap, tmp_path)
    metrics = AgentMetrics(CollectorRegistry(), cluster="it")
    pub = await publisher_factory(s, metrics=metrics)
    assert pub.connected, pub.last_error
    published: list[tuple[int, int]] = []
    seq = 0

    async def burst(n: int) -> None:
        nonlocal seq
        for _ in range(n):
            key = seq % 5
            await pub.publish(numbered("it", key, seq))
            published.append((key, seq))
            seq += 1

    await burst(200)
    testbed.kill("kafka")
    try:
        down_at = time.monotonic()
        while time.monotonic() - down_at < 30:
            await burst(20)
            await asyncio.sleep(1)
        assert pub.mode is Mode.SPILL
        assert pub.outbox.pending > 0
        assert metrics.outbox_events_gauge._value.get() > 0
    finally:
        testbed.start("kafka")
    await burst(100)  # published while the outbox drains: must come after it
    assert await wait_until(lambda: pub.mode is Mode.DIRECT and pub.pending == 0, 120), (
        pub.mode,
        pub.pending,
        pub.last_error,
    )
    await burst(50)
    assert await wait_until(lambda: pub.pending == 0, 30), (pub.mode, pub.pending, pub.last_error)
    records = await read_topics(kafka_bootstrap, [s.recoveries_topic], len(published), wait_s=90)
    dups = check_delivery(records, published)
    assert dups <= len(published)  # duplicates are allowed (same id), losses and reordering are not
    assert pub.stats.errors  # the outage was noticed and counted


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {root!r})
    from agent.settings import KafkaSettings
    from agent.sinks.kafka import KafkaPublisher
    from tests.integration.test_kafka_publish import numbered

    async def main():
        s = KafkaSettings.model_validate_json(sys.argv[1])
        pub = KafkaPublisher(s)
        await pub.start()
        for i in range(int(sys.argv[2])):
            await pub.publish(numbered("it", i % 3, i))
        print("pending", pub.outbox.pending, flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def _killed_with_pending(s: KafkaSettings, n: int) -> None:
    """A child publisher with `s`'s outbox that cannot reach Kafka publishes `n` events (they wait in its outbox)
    and is SIGKILLed."""
    away = s.model_copy(update={"bootstrap_servers": f"127.0.0.1:{free_port()}"})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD.format(root=ROOT), away.model_dump_json(), str(n),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None

        async def pending_line() -> str:
            while line := (await proc.stdout.readline()).decode():  # type: ignore[union-attr]
                if line.startswith("pending"):  # structlog lines come first
                    return line
            return ""

        line = await asyncio.wait_for(pending_line(), 60)
        assert line.split() == ["pending", str(n)], line
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL


async def test_publisher_killed_with_events_pending_delivers_them_after_restart(
    kafka_bootstrap: str, tmp_path: Path, publisher_factory: Any
) -> None:
    s = kafka_settings(kafka_bootstrap, tmp_path)
    # The child cannot reach Kafka (nothing listens on its port), so its events wait in the outbox.
    await _killed_with_pending(s, 150)
    pub = await publisher_factory(s)
    assert await wait_until(lambda: pub.pending == 0 and pub.mode is Mode.DIRECT, 60), pub.last_error
    records = await read_topics(kafka_bootstrap, [s.recoveries_topic], 150)
    assert check_delivery(records, [(i % 3, i) for i in range(150)]) == 0


async def test_a_replica_killed_with_events_pending_has_them_sent_by_the_next_one_to_start(
    kafka_bootstrap: str, tmp_path: Path, publisher_factory: Any
) -> None:
    """deploy/'s layout: one outbox per pod under a shared folder (kafka.outbox_peers_dir). A pod killed with
    events its broker never took leaves them in its folder; the next pod to start sends them, in order, from
    its own outbox, and the dead pod's folder is gone."""
    peers = tmp_path / "outbox"
    s = kafka_settings(kafka_bootstrap, tmp_path, outbox_dir=str(peers / "pod-a"), outbox_peers_dir=str(peers))
    await _killed_with_pending(s, 60)
    pub = await publisher_factory(s.model_copy(update={"outbox_dir": str(peers / "pod-b")}))
    assert await wait_until(lambda: pub.pending == 0 and pub.mode is Mode.DIRECT, 60), pub.last_error
    records = await read_topics(kafka_bootstrap, [s.recoveries_topic], 60)
    assert check_delivery(records, [(i % 3, i) for i in range(60)]) == 0
    assert sorted(p.name for p in peers.iterdir()) == ["pod-b"]


HANGING_CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    sys.path.insert(0, {root!r})
    from agent.settings import KafkaSettings
    from agent.sinks.kafka import KafkaPublisher
    from tests.integration.test_kafka_publish import numbered

    async def main():
        s = KafkaSettings.model_validate_json(sys.argv[1])
        pub = KafkaPublisher(s)
        await pub.start()
        print("connected", pub.connected, flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # the broker is paused now
        loop = asyncio.get_running_loop()
        went = loop.time()
        for i in range(int(sys.argv[2])):
            await pub.publish(numbered("it", i % 2, i))
            # the agent treats it as sent from here on; the seconds since "go" on the agent's own clock
            print("published", i, f"{{loop.time() - went:.3f}}", flush=True)
            await asyncio.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)  # killed by its own clock, not when the test got round to it

    asyncio.run(main())
    """
)


async def test_agent_killed_while_the_broker_hangs_loses_no_event(
    testbed: Testbed, kafka_bootstrap: str, tmp_path: Path, publisher_factory: Any
) -> None:
    """Regression (issue 16 item 1): a SIGSTOPped broker keeps its connections open and answers nothing; events
    published then used to wait in memory for spill_after_s (5 s), so an agent SIGKILLed at +2.8 s lost them all
    (outbox empty, the next agent published none). Every event publish() returned for must be on disk, and reach
    Kafka once the broker answers, at least once under its deterministic id."""
    s = kafka_settings(kafka_bootstrap, tmp_path, spill_after_s=5.0, request_timeout_ms=30000)
    pub = await publisher_factory(s)  # creates the topics while the broker answers
    assert pub.connected, pub.last_error
    await pub.stop()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HANGING_CHILD.format(root=ROOT),
        s.model_dump_json(),
        "5",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    published: list[int] = []

    async def line_starting(prefix: str) -> list[str]:
        while line := (await proc.stdout.readline()).decode():  # type: ignore[union-attr]
            if line.startswith(prefix):  # structlog lines come too
                return line.split()
        raise AssertionError(f"the child ended before printing {prefix!r}")

    try:
        assert await asyncio.wait_for(line_starting("connected"), 60) == ["connected", "True"]
        testbed.pause("kafka")
        try:
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
            returned_s: list[float] = []
            while len(published) < 5:
                _, number, since_go = await asyncio.wait_for(line_starting("published"), 10)
                published.append(int(number))
                returned_s.append(float(since_go))
            # every publish returned (and the child killed itself right after the last) before the stall detection
            # could spill, on the child's own clock: the events are on disk because publish() put them there
            assert returned_s[-1] < s.spill_after_s, returned_s
            assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
            testbed.resume("kafka")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert published == [0, 1, 2, 3, 4]
    again = await publisher_factory(s)
    assert await wait_until(lambda: again.pending == 0 and again.mode is Mode.DIRECT, 90), again.last_error
    records = await read_topics(kafka_bootstrap, [s.recoveries_topic], len(published), wait_s=30)
    ids = [json.loads(r.value)["id"] for r in records]
    assert sorted(set(ids)) == sorted(numbered("it", i % 2, i).get_id() for i in published), ids
    # Every event arrived, first occurrences in publish order per key. A copy with the same id is possible
    # (at-least-once): the dead agent's request still in the paused broker's socket is processed on SIGCONT,
    # and the next agent, which cannot know that, replays the event from its outbox.
    dups = check_delivery(records, [(i % 2, i) for i in published])
    assert dups <= len(published)


async def _spill_check(pub: KafkaPublisher, reason: ErrorReason, metrics: AgentMetrics, topic: str) -> None:
    assert not pub.connected
    assert isinstance(pub.last_error, KafkaSinkError)
    assert pub.last_error.reason is reason, pub.last_error
    assert pub.last_error.retriable
    assert pub.stats.errors[reason.value] >= 1
    for i in range(5):
        await pub.publish(numbered("it", 0, i))
    assert pub.outbox.pending == 5
    assert metrics.outbox_events_gauge._value.get() == 5
    assert metrics.events_published_total.labels(topic=topic, result="outbox")._value.get() == 5


async def test_missing_topic_with_creation_off(kafka_bootstrap: str, tmp_path: Path, publisher_factory: Any) -> None:
    s = kafka_settings(kafka_bootstrap, tmp_path, create_topics=False)
    metrics = AgentMetrics(CollectorRegistry(), cluster="it")
    pub = await publisher_factory(s, metrics=metrics)
    await _spill_check(pub, ErrorReason.TOPIC_MISSING, metrics, s.recoveries_topic)
    assert s.faults_topic in str(pub.last_error)
    assert "create_topics is off" in str(pub.last_error)


async def test_unreachable_bootstrap(tmp_path: Path, publisher_factory: Any) -> None:
    s = kafka_settings(f"127.0.0.1:{free_port()}", tmp_path)
    metrics = AgentMetrics(CollectorRegistry(), cluster="it")
    pub = await publisher_factory(s, metrics=metrics)
    await _spill_check(pub, ErrorReason.UNREACHABLE, metrics, s.recoveries_topic)
    assert s.bootstrap_servers in str(pub.last_error)


async def test_sasl_against_a_plaintext_listener_is_refused(
    kafka_bootstrap: str, tmp_path: Path, publisher_factory: Any
) -> None:
    """The testbed broker has only a PLAINTEXT listener: SASL credentials cannot be checked, but a client
    configured for SASL must get a clear error at start and keep its events in the outbox."""
    s = kafka_settings(
        kafka_bootstrap,
        tmp_path,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="agent",
        sasl_password="wrong",
        request_timeout_ms=3000,
    )
    metrics = AgentMetrics(CollectorRegistry(), cluster="it")
    pub = await publisher_factory(s, metrics=metrics)
    assert not pub.connected
    assert pub.last_error is not None
    assert pub.last_error.reason in (ErrorReason.AUTH, ErrorReason.UNREACHABLE)
    for i in range(3):
        await pub.publish(numbered("it", 0, i))
    assert pub.outbox.pending == 3


def tls_settings(testbed: Testbed, tmp_path: Path, **kw: Any) -> KafkaSettings:
    """The testbed broker's TLS listener (mutual TLS: its CA, a client certificate it signed)."""
    pki = testbed.kafka_pki
    files = {"ssl_cafile": str(pki.ca_cert), "ssl_certfile": str(pki.client_cert), "ssl_keyfile": str(pki.client_key)}
    return kafka_settings(testbed.kafka_tls_bootstrap, tmp_path, **({"security_protocol": "SSL"} | files | kw))


async def test_events_arrive_over_mutual_tls(testbed: Testbed, tmp_path: Path, publisher_factory: Any) -> None:
    """Issue 41, 5: the publisher delivers over the broker's TLS listener, host name checked, with a client
    certificate; the events are read back from the broker (through its PLAINTEXT listener) in order."""
    s = tls_settings(testbed, tmp_path)
    assert s.ssl_check_hostname
    pub = await publisher_factory(s)
    assert pub.connected, pub.last_error
    assert pub.mode is Mode.DIRECT
    sent = [numbered("it", 0, i) for i in range(20)]
    for e in sent:
        await pub.publish(e)
    assert await wait_until(lambda: pub.outbox.pending == 0, 30), pub.last_error
    records = await read_topics(testbed.kafka_bootstrap, [s.faults_topic, s.recoveries_topic], len(sent))
    # at least once, in order: on a loaded machine a new topic's leader can answer late, the publisher spills to
    # the outbox after spill_after_s (reason "stalled") and sends again what the broker had already taken
    ids = [json.loads(r.value)["id"] for r in records]
    assert list(dict.fromkeys(ids)) == [e.get_id() for e in sent]
    assert set(pub.stats.errors) <= {ErrorReason.STALLED.value}, pub.stats.errors


@pytest.mark.parametrize(
    ("update", "needles"),
    [
        pytest.param(
            {"ssl_cafile": "APISERVER_CA"},
            ["certificate verify failed", "not signed by a CA in kafka.ssl_cafile"],
            id="wrong-ca",
        ),
        pytest.param(
            {"ssl_certfile": None, "ssl_keyfile": None},
            [
                "the broker refused the client certificate",
                "kafka.ssl_certfile [FAULT_AGENT_KAFKA__SSL_CERTFILE] is not set",
            ],
            id="no-client-certificate",
        ),
    ],
)
async def test_a_refused_tls_handshake_is_one_clear_error(
    testbed: Testbed, tmp_path: Path, publisher_factory: Any, update: dict[str, Any], needles: list[str]
) -> None:
    """A CA that did not sign the broker's certificate (the apiserver's), or no client certificate for a broker
    that requires one: the publisher starts, keeps its events in the outbox, and its one error (logged once, no
    traceback) names the cause, not aiokafka's "Unable to bootstrap"."""
    if update.get("ssl_cafile") == "APISERVER_CA":
        update = update | {"ssl_cafile": str(testbed.ca_file)}
    s = tls_settings(testbed, tmp_path, request_timeout_ms=3000, **update)
    with structlog.testing.capture_logs() as logs:
        pub = await publisher_factory(s)
    assert not pub.connected
    assert pub.last_error is not None
    assert pub.last_error.reason is ErrorReason.AUTH
    message = str(pub.last_error)
    assert f"TLS handshake with {testbed.kafka_tls_bootstrap} failed" in message, message
    for needle in needles:
        assert needle in message, message
    if s.ssl_cafile == str(testbed.ca_file):
        assert str(testbed.ca_file) in message
    assert "\n" not in message
    errors = [e for e in logs if e["log_level"] == "error"]
    assert [e["event"] for e in errors] == ["kafka unavailable; events go to the outbox"], errors
    assert errors[0]["error"] == message
    assert "exc_info" not in errors[0]
    await pub.publish(numbered("it", 0, 0))
    assert pub.outbox.pending == 1


@pytest.mark.parametrize(
    ("update", "missing"),
    [
        pytest.param({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}, "sasl_username", id="no-user"),
        pytest.param({"security_protocol": "SASL_PLAINTEXT"}, "sasl_mechanism", id="no-mechanism"),
        pytest.param({"security_protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"}, "kafka.ssl_cafile", id="no-ca"),
    ],
)
async def test_impossible_security_settings_fail_at_start(tmp_path: Path, update: dict[str, Any], missing: str) -> None:
    s = kafka_settings("127.0.0.1:1", tmp_path, **update)
    pub = KafkaPublisher(s, outbox=Outbox(tmp_path / "o"))
    with pytest.raises(KafkaSinkError) as info:
        await pub.start()
    assert info.value.reason is ErrorReason.CONFIG
    assert not info.value.retriable
    assert missing in str(info.value)
