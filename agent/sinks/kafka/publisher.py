"""Publish the agent's CloudEvents to Kafka without losing any: an on-disk outbox first, Kafka behind it.

Paths an event takes (one :class:`KafkaPublisher` per agent, used by the leader only):

- *durable first*: every event is appended to the :class:`~agent.sinks.outbox.Outbox` (write + fsync) before
  the agent treats it as sent, or acts on the step it describes, whatever Kafka does. ``submit()`` hands the
  event over (the order of ``submit()`` calls is the delivery order) and returns the future of its commit;
  ``publish()`` awaits that future. Group commit: a commit task writes everything submitted while the previous
  write was running in one write + fsync and adds no wait of its own, so an event waits for at most the write in
  progress and its own, and events submitted together share one fsync.
- *direct*: the event is handed to the aiokafka producer's ``send()`` in outbox order: by the commit task itself
  while its write + fsync runs in the thread, when nothing is ahead of it (so the produce request and the fsync
  overlap, and the request leaves before whatever the callers waiting for the commit do next), else by a sender
  task once it is on disk. The producer does the rest: its
  default partitioner (murmur2 of the key, as every Kafka client, so a key, the job UID or node name, always lands
  on the same partition; :class:`CachedPartitioner` keeps its answers), its batching (``linger_ms``,
  ``max_batch_bytes``), ``acks=all``, idempotence and compression. Order per key holds because aiokafka keeps at
  most one request in flight per broker and one batch in flight per partition, retries a failed batch before later
  ones, and idempotence drops a retried batch the broker already wrote. An acknowledgement task takes the delivered
  events in outbox order and moves the outbox cursor past them (one cursor write for all the acknowledgements that
  arrived during the previous one).
- *spill*: when Kafka is unreachable at start, a delivery fails, a delivery is not acknowledged within
  ``spill_after_s``, or more than ``queue_size`` events wait for Kafka, the in-memory copies are dropped (the
  events are on disk), the producer is replaced and a replay task sends the outbox from its cursor, in order,
  once Kafka answers again; it returns to *direct* when the outbox is empty, so per-key order is kept.
- *shutdown*: ``stop()`` waits up to ``flush_deadline_s`` for deliveries; what is left is already in the outbox
  and the next start replays it.

Delivery is at-least-once: an event whose acknowledgement was lost (broker outage or hang, SIGKILL between
delivery and the outbox cursor update) may be sent twice, always with the same deterministic CloudEvents id.

Topic names, security (PLAINTEXT, SSL, SASL PLAIN/SCRAM) and tuning come from :class:`agent.settings.KafkaSettings`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog
from cloudevents.core.v1.event import CloudEvent

from agent.sinks.events import EventBuildError, Message, encode
from agent.sinks.kafka.base import Mode
from agent.sinks.kafka.direct import DirectPath
from agent.sinks.kafka.errors import ErrorReason
from agent.sinks.kafka.peers import adopt_at_start, adopt_while_running
from agent.sinks.kafka.producer import producer_options
from agent.sinks.kafka.replay import ReplayPath, consume
from agent.sinks.outbox import OutboxError, OutboxFull

log = structlog.get_logger(__name__)

_YIELD_EVERY = 256  # events submitted in a row after which submit() yields to the commit task
_QUEUE_WAIT_S = 1.0  # how long submit() waits for room when queue_size events wait for Kafka, before spilling
_TASK_STOP_S = 2.0
"""Seconds stop() waits for its cancelled background tasks."""
SWITCH_INTERVAL_S = 0.0005
"""The interpreter's thread switch interval while a publisher runs (``sys.setswitchinterval``), seconds; a
smaller one already set is kept. The group commit's write + fsync runs in a thread (a slow disk must not stop the
event loop), and that thread needs the GIL to start and again after the fsync: with CPython's default 5 ms, a
thread waiting for a GIL that a busy event loop holds waits up to 5 ms each time, and every event and the restart
waiting for it wait with it. bench_e2e under load (30 jobs, 120 faults, load average 10-20 on 2 CPUs): the
commit's hop to the thread, write and fsync took p50 12.5 / p90 35 ms where the fsync alone took p50 1 ms; a
thread hop with a busy loop (2 ms callbacks) p90 35-47 ms at 5 ms, 13 ms at 0.5 ms. The loop gives up the GIL
more often only while another thread waits for it."""


class KafkaPublisher(DirectPath, ReplayPath):
    """Publishes :mod:`agent.sinks.events` CloudEvents to Kafka with an on-disk outbox as a safety net.

    Args:
        settings: the ``kafka`` settings group.
        metrics: where to report (``AgentMetrics``); counters are also kept in :attr:`stats`.
        outbox: an outbox to use instead of one in ``settings.outbox_dir`` (tests, benchmarks).
        producer_factory: builds the producer from keyword arguments (default ``AIOKafkaProducer``).

    Lifecycle: ``await start()``, ``await publish(event)`` (or ``await submit(event)``) any number of times,
    ``await stop()``.

    This class holds the lifecycle and the group commit; the paths are its bases: :class:`DirectPath` (sender,
    acknowledgements, the switch to spill), :class:`ReplayPath` (outbox to Kafka) and, under both,
    :class:`~agent.sinks.kafka.base.PublisherBase` (shared state, connection, counting).
    """

    async def start(self) -> None:
        """Open the outbox and connect to Kafka; set the interpreter's thread switch interval to
        :data:`SWITCH_INTERVAL_S` until :meth:`stop`.

        A Kafka problem does not raise: it is logged once with a specific reason, counted, kept in
        :attr:`last_error`, and events go to the outbox until a background task connects.

        Raises:
            OutboxError: the outbox directory cannot be used (without it no delivery guarantee holds).
            KafkaSinkError: (config, not retriable) the security settings cannot work.
        """
        producer_options(self.settings)  # fail now on impossible settings
        self._switch_before = sys.getswitchinterval()
        if self._switch_before > SWITCH_INTERVAL_S:
            sys.setswitchinterval(SWITCH_INTERVAL_S)
        await asyncio.to_thread(self.outbox.open)
        if self.settings.outbox_peers_dir:
            await asyncio.to_thread(adopt_at_start, self.outbox, Path(self.settings.outbox_peers_dir))
        self._end = await asyncio.to_thread(lambda: self.outbox.end)
        self._report_outbox()
        self.mode = Mode.SPILL if self.outbox.pending else Mode.DIRECT
        self._closing = False
        if self.settings.enabled:
            await self._connect()
            if not self._connected:
                self.mode = Mode.SPILL
        else:
            self.mode = Mode.SPILL
        self._tasks = [
            asyncio.create_task(self._supervised(self._sender, "kafka-sender"), name="kafka-sender"),
            asyncio.create_task(self._supervised(self._committer, "kafka-commit"), name="kafka-commit"),
            asyncio.create_task(self._supervised(self._replayer, "kafka-replay"), name="kafka-replay"),
            asyncio.create_task(self._supervised(self._acker, "kafka-acker"), name="kafka-acker"),
            asyncio.create_task(self._supervised(self._adopter, "kafka-adopt"), name="kafka-adopt"),
        ]
        log.info("kafka publisher started", mode=self.mode.value, connected=self._connected, outbox=self.outbox.pending)

    async def _adopter(self) -> None:
        """While running: take over the outboxes of processes that died (:func:`adopt_while_running`) through this
        publisher's group commit (:meth:`_commit_adopted`). Off when ``outbox_peers_dir`` or
        ``outbox_adopt_interval_s`` is empty or 0."""
        s = self.settings
        await adopt_while_running(
            self.outbox, s.outbox_peers_dir, s.outbox_adopt_interval_s, self._commit_adopted, self._stopping
        )

    async def _commit_adopted(self, msgs: Sequence[Message]) -> bool:
        """Hand `msgs` to the group commit and wait for it; False when the commit could not write them (their
        futures are failed by :meth:`_commit` for this caller alone: public callers' futures never fail)."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[None]] = []
        for m in msgs:
            f: asyncio.Future[None] = loop.create_future()
            self._adopted.add(f)
            futures.append(f)
            self._commit_buf.append((m, f))
        self._wake_commit.set()
        try:
            results = await asyncio.gather(*futures, return_exceptions=True)
        finally:
            self._adopted.difference_update(futures)
        return not any(isinstance(r, BaseException) for r in results)

    async def publish(self, event: CloudEvent) -> None:
        """Accept `event` for delivery. Returns once it is durable in the outbox (fsync'd), whether Kafka answers,
        hangs or is away; it then goes to Kafka from memory, or from the outbox when Kafka is not taking events.
        Never raises: an event that cannot be encoded is logged, counted (result ``invalid``) and dropped; an
        outbox failure (disk full, ``outbox_max_bytes``) is logged and counted (result ``error``)."""
        await (await self.submit(event))

    async def submit(self, event: CloudEvent) -> asyncio.Future[None]:
        """Hand `event` to the group commit and return the future of its commit: done once the event is on disk
        (never failing: errors are logged and counted as for :meth:`publish`). Events are delivered in the order
        of the calls (per key). A caller that has more to do before the event must be durable (the engine, the
        next fault; benchmarks, the next event) awaits the future only when it must; commits complete in order,
        so the last future done means every earlier event is on disk too. Waits (up to 1 s, then spills to the
        outbox) only while ``queue_size`` events wait for Kafka."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            msg = encode(event)
        except EventBuildError as e:
            self._count("unknown", "invalid")
            self.stats.errors[ErrorReason.INVALID.value] += 1
            log.error("event not published: cannot encode", error=str(e), event_id=event.get_id())
            done.set_result(None)
            return done
        if self.mode is Mode.STOPPED:
            self._count(self._topics[msg.stream], "error")
            log.error("event not published: the publisher is stopped", event_id=msg.event_id, type=msg.event_type)
            done.set_result(None)
            return done
        if self.mode is Mode.DIRECT and not self._closing and self._full():
            # A busy producer gets a moment to make room (backpressure); a stuck one sends us to the outbox.
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), min(_QUEUE_WAIT_S, self.settings.spill_after_s))
            if self.mode is Mode.DIRECT and self._full():
                self._degrade(ErrorReason.QUEUE_FULL, f"{self.settings.queue_size} events waiting for Kafka")
        self._commit_buf.append((msg, done))
        self._wake_commit.set()
        if len(self._tasks) < 2 or self._tasks[1].done():  # stopping: no commit task any more
            await self._commit()
        elif len(self._commit_buf) >= _YIELD_EVERY:
            # A caller submitting in a tight loop gives the commit task a turn now and then; yielding on every
            # event would make tiny commits.
            await asyncio.sleep(0)
        return done

    async def stop(self) -> None:
        """Flush within ``flush_deadline_s`` (what is not delivered by then stays in the outbox for the next
        start); close the producer and outbox."""
        if self.mode is Mode.STOPPED:
            return
        self._closing = True
        deadline = time.monotonic() + self.settings.flush_deadline_s
        # Polling (shutdown only) is simpler than an event fed by every commit and delivery.
        while (self._commit_buf or self._committing) and self._tasks and not self._tasks[1].done():  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        while self.mode is Mode.DIRECT and (self._queue or self._inflight) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        if self._queue or self._inflight:
            self._degrade(ErrorReason.STALLED, "shutdown deadline reached", quiet=True)
        # Let the acker move the cursor past what Kafka took, then stop the tasks.
        acker = self._tasks[3] if len(self._tasks) > 3 else None
        while self._unsaved and acker is not None and not acker.done():  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        async with self._cursor:  # a rewind in progress ends first
            for t in self._tasks:
                t.cancel()
        # aiokafka's bootstrap can hold on to a cancellation while it retries an unreachable broker: wait a
        # bounded time, then leave such a task behind (everything is already in the durable outbox).
        done, pending = await asyncio.wait(self._tasks, timeout=_TASK_STOP_S) if self._tasks else (set(), set())
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                log.warning("kafka publisher task ended with an error", task=t.get_name(), error=repr(t.exception()))
        if pending:
            log.warning(
                "kafka publisher tasks did not stop in time; left behind", tasks=[t.get_name() for t in pending]
            )
        self._tasks = []
        if self._commit_buf:  # the commit task died: last attempt
            await self._commit()
        await self._close_producer(self.settings.flush_deadline_s)
        if self._old_producers:
            await asyncio.wait(self._old_producers, timeout=self.settings.request_timeout_ms / 1000 + 1)
        await asyncio.to_thread(self.outbox.close)
        if self._switch_before is not None and sys.getswitchinterval() == SWITCH_INTERVAL_S:
            sys.setswitchinterval(self._switch_before)  # what it was before start(), unless changed since
        self._switch_before = None
        self.mode = Mode.STOPPED
        log.info("kafka publisher stopped", outbox=self.outbox.pending)

    async def _committer(self) -> None:
        while True:
            await self._wake_commit.wait()
            self._wake_commit.clear()
            while self._commit_buf:
                await self._commit()

    async def _commit(self) -> None:
        """Write everything submitted so far to the outbox in one write + fsync (group commit), in a thread; in
        direct mode hand the events to the producer meanwhile (:meth:`_send_early`, when nothing is ahead of them:
        the produce request and the fsync overlap) or, once on disk, queue them for the sender; in spill mode wake
        the replay. The callers waiting for the commit are released last, once the write + fsync returned (durable
        first), and in every case (an outbox failure, a cancellation). An event handed to the producer whose
        write then fails may still reach Kafka; it is counted as an error all the same."""
        batch, self._commit_buf = self._commit_buf, []
        msgs = [m for m, _ in batch]
        self._committing = len(msgs)
        try:
            # The write starts in its thread now; the loop hands the events to the producer meanwhile.
            write = asyncio.get_running_loop().run_in_executor(None, self.outbox.append, msgs)
            since = time.monotonic()
            try:
                handed = await self._send_early(msgs) if self.mode is Mode.DIRECT and not self._closing else None
            except BaseException:
                # A bug in send() (for the task's last-resort guard) or a cancellation: the callers are released
                # only once the write ended, and the next commit knows where it ended.
                with contextlib.suppress(BaseException):
                    self._end = (await asyncio.shield(write))[-1]
                raise
            try:
                ends = await write
            except OutboxError as e:
                for f, _ in handed or ():
                    f.add_done_callback(consume)
                full = isinstance(e, OutboxFull)
                self.stats.errors[ErrorReason.OUTBOX.value] += 1
                for m in msgs:
                    self._count(self._topics[m.stream], "error")
                log.error(
                    "events dropped: the outbox cannot take them",
                    count=len(msgs),
                    first_id=msgs[0].event_id,
                    full=full,
                    error=str(e),
                )
                for _, f in batch:  # events taken over from a gone peer stay in its outbox: tell the taker
                    if f in self._adopted and not f.done():
                        f.set_exception(e)
                return
            finally:
                self._committing = 0
            self._end = ends[-1]
            if handed is not None:
                self._take_early(msgs, ends, handed, since)
            elif self.mode is Mode.DIRECT and not self._closing:
                self._queue.extend(zip(msgs, ends, strict=True))
                self._wake_sender.set()
            else:
                for topic, n in Counter(self._topics[m.stream] for m in msgs).items():
                    self._count(topic, "outbox", n)
                self._report_outbox()
                self._wake_replay.set()
        finally:
            self._committing = 0
            for _, f in batch:
                if not f.done():
                    f.set_result(None)


async def wait_until(check: Callable[[], bool], wait_s: float, interval: float = 0.05) -> bool:
    """Poll `check` until it is true or `wait_s` seconds pass; returns the last result (tests, CLI)."""
    deadline = time.monotonic() + wait_s
    while not check():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(interval)
    return True
