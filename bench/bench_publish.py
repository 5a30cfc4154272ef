"""Benchmark: events/s through the Kafka publisher (acks=all, idempotence) against raw aiokafka sends, and the
outbox replay rate, on a real broker (the testbed's).

Rows (bench/RESULTS.md):
- ``publish``: ``KafkaPublisher.submit()`` of prebuilt CloudEvents (encoding included, each event fsync'd to the
  outbox by the group commit before it is sent) until every event is acknowledged; baseline: raw
  ``AIOKafkaProducer.send()`` of the same encoded payloads with the same producer settings (no encoding, no
  queue, no disk, no bookkeeping; the publisher hands each event to the same ``send()`` after its group
  commit). Like ``send()``, ``submit()`` returns a future (of the commit) and the loop awaits
  only the last one. Also printed: ``publish()`` awaited one event at a time, as the agent's engine does before
  it acts (each call returns once its event is on disk): rate and p50/p99 latency.
- ``outbox replay``: a filled outbox (fsync'd appends) replayed to Kafka by a starting publisher until empty.

Payloads: a pool of realistic events (fault detected on 8-chip nodes for 500 jobs, recovery started/succeeded/
failed) built with the agent's builders, cycled to reach ``--events``; the pool keeps memory bounded.

Usage: ``python bench/bench_publish.py --bootstrap 127.0.0.1:9092 --events 200000 [--write]``
(default bootstrap: $KAFKA_BOOTSTRAP or $FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiokafka import AIOKafkaProducer
from cloudevents.core.v1.event import CloudEvent

from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef
from agent.settings import KafkaSettings
from agent.sinks import events as ev
from agent.sinks.kafka import KafkaPublisher, Mode, producer_options, wait_until
from agent.sinks.outbox import Outbox

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def event_pool(n: int) -> list[CloudEvent]:
    """`n` realistic events: 60 % fault detected, 40 % recovery events, over 500 jobs on 250 nodes."""
    out: list[CloudEvent] = []
    for i in range(n):
        job = ObjectRef("vcjob", f"team-{i % 20}", f"llm-{i % 500}", str(uuid.UUID(int=i % 500)))
        node = f"node-{i % 250:04d}"
        at = T0 + timedelta(seconds=i)
        fault = Fault(
            kind=FaultKind.CHIP,
            level=FaultLevel.SEPARATE,
            node=node,
            chips=(f"Ascend910-{i % 8}",),
            codes=("80E01801", "80C98009"),
            signal_time=at,
            observed_at=at + timedelta(seconds=1.2),
            source=ObjectRef("ConfigMap", "kube-system", f"mindx-dl-deviceinfo-{node}"),
            reason="CardUnhealthy",
        )
        k = i % 5
        if k < 3:
            out.append(ev.fault_detected(fault, cluster="bench", job=job, incident_id=f"inc-{i}"))
        elif k == 3:
            out.append(
                ev.recovery_started(
                    f"inc-{i}",
                    job,
                    "restart-job",
                    f"chip {fault.chips[0]} on {node} is SeparateNPU",
                    cluster="bench",
                    at=at,
                    faults=[fault],
                    budget_left=2,
                )
            )
        else:
            out.append(
                ev.recovery_succeeded(
                    f"inc-{i}", job, "restart-job", ev.Durations(1.2, 0.01, 0.3, 41.0, 42.5), cluster="bench", at=at
                )
            )
    return out


def settings(bootstrap: str, outbox_dir: str) -> KafkaSettings:
    tag = uuid.uuid4().hex[:8]
    return KafkaSettings.model_validate(
        {
            "bootstrap_servers": bootstrap,
            "faults_topic": f"bench-{tag}.faults",
            "recoveries_topic": f"bench-{tag}.recoveries",
            "create_topics": True,
            "topic_partitions": 6,
            "topic_replication_factor": 1,
            "outbox_dir": outbox_dir,
            "queue_size": 20000,
            "flush_deadline_s": 60,
            "request_timeout_ms": 30000,
            "spill_after_s": 30,
        }
    )


async def raw_sends(s: KafkaSettings, messages: list[ev.Message], total: int) -> float:
    """Seconds to send and have acknowledged `total` records with a bare producer (same settings)."""
    creator = KafkaPublisher(s)  # only to create the topics, untimed
    await creator.start()
    await creator.stop()
    producer = AIOKafkaProducer(
        **producer_options(s),
        acks="all",
        enable_idempotence=True,
        compression_type=s.compression_type,
        linger_ms=s.linger_ms,
        max_batch_size=s.max_batch_bytes,
    )
    await producer.start()
    topics = {ev.Stream.FAULTS: s.faults_topic, ev.Stream.RECOVERIES: s.recoveries_topic}
    try:
        t = time.perf_counter()
        last = None
        for i in range(total):
            m = messages[i % len(messages)]
            last = await producer.send(topics[m.stream], m.value, key=m.key, headers=list(m.headers))
        await producer.flush()
        assert last is not None
        await last
        return time.perf_counter() - t
    finally:
        await producer.stop()


async def publish(s: KafkaSettings, pool: list[CloudEvent], total: int) -> tuple[float, KafkaPublisher]:
    pub = KafkaPublisher(s)
    await pub.start()
    assert pub.connected, pub.last_error
    t = time.perf_counter()
    last = None
    for i in range(total):
        last = await pub.submit(pool[i % len(pool)])
    assert last is not None
    await last  # every event is on disk
    assert await wait_until(lambda: pub.pending == 0, 600, interval=0.01)
    took = time.perf_counter() - t
    await pub.stop()
    return took, pub


async def publish_one_by_one(s: KafkaSettings, pool: list[CloudEvent], total: int) -> tuple[float, list[float]]:
    """(events/s, sorted per-call seconds) of ``publish()`` awaited one event at a time (durable on return)."""
    pub = KafkaPublisher(s)
    await pub.start()
    assert pub.connected, pub.last_error
    took: list[float] = []
    t = time.perf_counter()
    for i in range(total):
        t1 = time.perf_counter()
        await pub.publish(pool[i % len(pool)])
        took.append(time.perf_counter() - t1)
    rate = total / (time.perf_counter() - t)
    assert await wait_until(lambda: pub.pending == 0, 600, interval=0.01)
    await pub.stop()
    return rate, sorted(took)


async def replay(s: KafkaSettings, messages: list[ev.Message], total: int) -> tuple[float, float]:
    """(seconds to append `total` events to a fresh outbox, seconds for a publisher to replay them)."""
    box = Outbox(s.outbox_dir)
    box.open()
    t = time.perf_counter()
    chunk = 1000
    for start in range(0, total, chunk):
        box.append([messages[i % len(messages)] for i in range(start, min(total, start + chunk))])
    append_s = time.perf_counter() - t
    box.close()
    pub = KafkaPublisher(s)
    t = time.perf_counter()
    await pub.start()
    assert pub.mode is Mode.SPILL
    assert await wait_until(lambda: pub.outbox.pending == 0, 600, interval=0.01), pub.last_error
    took = time.perf_counter() - t
    await pub.stop()
    return append_s, took


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("KAFKA_BOOTSTRAP") or os.environ.get("FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS"),
    )
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--pool", type=int, default=20_000, help="distinct prebuilt events, cycled")
    parser.add_argument("--write", action="store_true", help="update the rows in bench/RESULTS.md")
    args = parser.parse_args()
    if not args.bootstrap:
        print("no broker: pass --bootstrap or set KAFKA_BOOTSTRAP", file=sys.stderr)
        return 2
    t = time.perf_counter()
    pool = event_pool(args.pool)
    messages = [ev.encode(e) for e in pool]
    mean = sum(len(m.value) for m in messages) / len(messages)
    print(f"pool: {len(pool)} events, mean value {mean:.0f} B, built in {time.perf_counter() - t:.1f} s")
    with tempfile.TemporaryDirectory() as d:
        raw_s = await raw_sends(settings(args.bootstrap, d + "/a"), messages, args.events)
        pub_s, pub = await publish(settings(args.bootstrap, d + "/b"), pool, args.events)
        one_n = min(args.events, 2000)
        one_rate, one = await publish_one_by_one(settings(args.bootstrap, d + "/d"), pool, one_n)
        append_s, replay_s = await replay(settings(args.bootstrap, d + "/c"), messages, args.events)
    n = args.events
    raw, pub_rate, rep = n / raw_s, n / pub_s, n / replay_s
    spilled = sum(v for (_, r), v in pub.stats.published.items() if r == "outbox")
    print(f"raw aiokafka sends : {raw:,.0f} events/s ({raw_s:.1f} s)")
    print(
        f"publish            : {pub_rate:,.0f} events/s ({pub_s:.1f} s, {pub_rate / raw:.2f}x raw, {spilled} spilled)"
    )
    p50, p99 = one[len(one) // 2] * 1e3, one[min(len(one) - 1, int(len(one) * 0.99))] * 1e3
    print(
        f"publish one by one : {one_rate:,.0f} events/s ({one_n} events, durable on return: "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms)"
    )
    print(f"outbox append      : {n / append_s:,.0f} events/s (1000-event fsync'd batches)")
    print(f"outbox replay      : {rep:,.0f} events/s ({replay_s:.1f} s)")
    if args.write:
        cmd = f"`python bench/bench_publish.py --bootstrap $KAFKA_BOOTSTRAP --events {n} --write`"
        rows = {
            "publish": f"| publish | {pub_rate:,.0f} events/s ({n:,} events, mean {mean:.0f} B, "
            f"acks=all + idempotence, gzip, encoding included, every event fsync'd to the outbox first (group "
            f"commit), then aiokafka send() (its partitioner and batching), {spilled} spilled; publish() awaited "
            f"one at a time {one_rate:,.0f} events/s, durable on return p50 {p50:.2f} ms p99 {p99:.2f} ms; 2 cores "
            f"shared with the broker, load {os.getloadavg()[0]:.1f}) "
            f"| ≥ 20,000 events/s | raw aiokafka send() of the same payloads, linger {KafkaSettings().linger_ms} ms, "
            f"{raw:,.0f} events/s "
            f"(publisher {pub_rate / raw:.2f}×) | {cmd} |",
            "outbox replay": f"| outbox replay | {rep:,.0f} events/s ({n:,} events from disk to acks=all, "
            f"pipelined batches of {KafkaSettings.model_validate({}).replay_batch}, load {os.getloadavg()[0]:.1f}) "
            f"| ≥ 10,000 events/s | raw sends {raw:,.0f} events/s; outbox append {n / append_s:,.0f} events/s "
            f"(fsync per 1000) | {cmd} |",
        }
        write_rows(Path(__file__).with_name("RESULTS.md"), rows)
    return 0


def write_rows(path: Path, rows: dict[str, str]) -> None:
    """Replace (or append) this benchmark's rows in the shared results table, leaving other rows alone."""
    header = "| row | figure | target | baseline in same run | command |\n|---|---|---|---|---|\n"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else header.splitlines()
    for name, row in rows.items():
        prefix = f"| {name} |"
        idx = [i for i, line in enumerate(lines) if line.startswith(prefix)]
        if idx:
            lines[idx[0]] = row
        else:
            lines.append(row)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
