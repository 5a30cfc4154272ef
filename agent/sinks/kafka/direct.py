"""The publisher's direct path, from memory to Kafka while Kafka takes events: events are handed to the producer's
``send()`` in outbox order, by the commit itself while their outbox write + fsync runs when nothing is ahead of them
(:meth:`DirectPath._send_early`), else by the sender task once they are on disk; the acknowledgement task takes the
delivered events in outbox order and moves the outbox cursor past them. A failed or stalled delivery, a failed
``send()`` or a full queue degrades the publisher to spill mode (:meth:`DirectPath._degrade`): the in-memory copies
are dropped and the replay (:mod:`agent.sinks.kafka.replay`) sends them from the outbox. Times are monotonic
seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import structlog
from aiokafka.errors import KafkaError

from agent.sinks.events import Message
from agent.sinks.kafka.base import Mode, PublisherBase, Sent
from agent.sinks.kafka.errors import ErrorReason, KafkaSinkError, classify, describe
from agent.sinks.kafka.replay import consume
from agent.sinks.outbox import OutboxError, Position

log = structlog.get_logger(__name__)

_SEND_CHUNK = 4096  # events the sender hands to the producer before it lets other tasks run
_SEND_FIRST_S = 1.0  # bound on the producer's send() of a commit's events, after which the publisher spills
# Loop turns aiokafka 0.14's Sender takes from send() to writing the produce request: the accumulator's waiter
# wakes asyncio.wait() (1), which wakes the sender routine (2), whose produce task writes the request (3).
_PRODUCER_TURNS = 3


class DirectPath(PublisherBase):
    """The sender and acknowledgement tasks of the publisher, and its switch to spill mode."""

    async def _sender(self) -> None:
        """Hand the events on disk to the producer's ``send()`` in outbox order (it partitions and batches)."""
        while True:
            await self._wake_sender.wait()
            self._wake_sender.clear()
            while self._queue and self.mode is Mode.DIRECT and self._producer is not None:
                # No timeout here (it would cost a timer per event): if send() blocks on a stuck producer, the
                # acker's stall check degrades and restarts this task.
                self._sending = True
                try:
                    await self._hand_over(self._producer, min(len(self._queue), _SEND_CHUNK))
                finally:
                    self._sending = False
                await asyncio.sleep(0)  # let publishers and the acker run between chunks

    async def _hand_over(self, producer: Any, count: int) -> None:
        """Hand the first `count` queued events to `producer`'s ``send()``, in order, and to the acker. Stops
        when the publisher degrades, before a send, during one or through its error (the events are on disk:
        the replay sends the rest from the outbox). ``send()`` waits only while the producer's batch for the
        event's partition is full."""
        since = time.monotonic()
        try:
            for _ in range(count):
                if self.mode is not Mode.DIRECT or producer is not self._producer:
                    return
                msg, end = self._queue.popleft()
                topic = self._topics[msg.stream]
                try:
                    fut = await producer.send(topic, msg.value, key=msg.key, headers=list(msg.headers))
                except (KafkaError, OSError, TimeoutError) as e:
                    # What aiokafka 0.14's send() raises: KafkaError (a failed sender task's error too: the sender
                    # wraps what it did not expect in KafkaError, aiokafka/producer/sender.py) or the connection's
                    # OSError / TimeoutError. The event is on disk: the replay sends it.
                    self._degrade(classify(e), f"send failed: {describe(e)}")
                    return
                if self.mode is not Mode.DIRECT or producer is not self._producer:
                    fut.add_done_callback(consume)  # degraded while send() waited
                    return
                self._inflight.append(Sent(fut, end, topic, since))
        finally:
            self._wake_acker.set()

    async def _acker(self) -> None:
        """Take delivered events in outbox order and move the outbox cursor past them (one cursor write for all
        that were delivered while the previous write ran); a failed delivery, or none within
        ``spill_after_s``, sends everything unacknowledged to the outbox replay."""
        while True:
            if not self._inflight:
                self._wake_acker.clear()
                await self._wake_acker.wait()
                continue
            head = self._inflight[0]
            if not head.fut.done():
                left = head.since + self.settings.spill_after_s - time.monotonic()
                if left > 0:
                    await asyncio.wait((head.fut,), timeout=left)
                if not head.fut.done():
                    if self._inflight and self._inflight[0] is head and self.mode is Mode.DIRECT:
                        self._degrade(ErrorReason.STALLED, f"no acknowledgement in {self.settings.spill_after_s} s")
                    continue
            ok: Counter[str] = Counter()
            end: Position | None = None
            count = 0
            while self._inflight and self._inflight[0].fut.done():
                sent = self._inflight[0]
                err = _failure(sent.fut)
                if err is not None:
                    failed = Counter(s.topic for s in self._inflight if s.fut.done() and _failure(s.fut) is not None)
                    for topic, n in failed.items():
                        self._count(topic, "error", n)
                    self._degrade(classify(err), f"delivery failed: {describe(err)}")  # moves the rest
                    break
                self._inflight.popleft()
                ok[sent.topic] += 1
                end, count = sent.end, count + 1
                self._unsaved = True
            for topic, n in ok.items():
                self._count(topic, "ok", n)
            # Wake a waiting publisher only at half the queue, so it proceeds in bursts.
            if not self._room.is_set() and (len(self._queue) + len(self._inflight)) * 2 <= self.settings.queue_size:
                self._room.set()
            if end is None:
                continue
            async with self._cursor:
                try:
                    await asyncio.to_thread(self.outbox.ack_to, end, count)
                except OutboxError as e:
                    log.error("outbox cursor not saved; these events will be sent again after a restart", error=str(e))
                finally:
                    self._unsaved = False
            self._report_outbox()

    def _restart_sender(self) -> None:
        """Cancel a sender blocked in send() on a failed producer and start a fresh one."""
        if not self._tasks or asyncio.current_task() is self._tasks[0]:
            return
        self._tasks[0].cancel()
        self._tasks[0] = asyncio.create_task(self._supervised(self._sender, "kafka-sender"), name="kafka-sender")

    def _degrade(self, reason: ErrorReason, detail: str, *, quiet: bool = False) -> None:
        """Switch to spill mode: drop the in-memory copies of everything unacknowledged (the events are in the
        outbox), replace the producer and let the replay send them again from the outbox cursor, in order."""
        moved = len(self._inflight) + len(self._queue)
        for sent in self._inflight:
            sent.fut.add_done_callback(consume)  # its outcome no longer matters
        if self._sending:
            self._restart_sender()
        topics = [s.topic for s in self._inflight] + [self._topics[m.stream] for m, _ in self._queue]
        self._inflight.clear()
        self._queue.clear()
        was = self.mode
        self.mode = Mode.SPILL
        if was is Mode.DIRECT:
            self._rewind = True
        if not quiet:
            self._fail(KafkaSinkError(reason, detail, retriable=True))
        if was is Mode.DIRECT and not quiet and reason is not ErrorReason.QUEUE_FULL:
            self._retire_producer()
        for topic, n in Counter(topics).items():
            self._count(topic, "outbox", n)
        if moved:
            self._report_outbox()
        self._room.set()
        self._wake_replay.set()

    async def _send_early(self, msgs: list[Message]) -> list[tuple[asyncio.Future[Any], str]] | None:
        """Hand a batch whose outbox write + fsync is running in the commit's thread to the producer's ``send()``
        now, when nothing is ahead of it (no event queued for the sender, inside its ``send()`` or
        unacknowledged), and give the producer :data:`_PRODUCER_TURNS` loop turns to put its produce request on
        the wire; returns each event's delivery future and topic, in order, or None, doing nothing, when something
        is ahead (the sender then takes the batch once it is on disk, in order). The caller
        (:meth:`~agent.sinks.kafka.publisher.KafkaPublisher._commit`) waits for the write before it takes the
        futures to the acker (:meth:`_take_early`) and before it releases anyone waiting for the commit.

        Why early: the broker's copy and the disk's are independent. Durable first is the disk's (the callers
        act only once the fsync returned); the produce request need not wait for it, so the two overlap and
        ``fault.detected`` reaches the broker a thread hop, a write and an fsync sooner. Why before the callers are
        released: a caller that waited for the commit acts next (the engine's restart writes); when those went out
        before the produce request, the broker's append waited behind the apiserver's work for a CPU (bench_e2e,
        agent on a CPU of its own: ``send()`` → broker append p50 5.4 → 2.6 ms).

        A ``send()`` that fails degrades the publisher (:meth:`_degrade`); one that does not return within
        :data:`_SEND_FIRST_S` too (with nothing unacknowledged the producer's accumulator is empty and ``send()``
        does not wait for room). The events handed over by then are in the returned list: the caller drops their
        futures and the replay sends the batch from the outbox."""
        producer = self._producer
        if producer is None or self._queue or self._inflight or self._sending:
            return None
        handed: list[tuple[asyncio.Future[Any], str]] = []
        try:
            async with asyncio.timeout(_SEND_FIRST_S):
                for msg in msgs:
                    if self.mode is not Mode.DIRECT or producer is not self._producer:
                        break
                    topic = self._topics[msg.stream]
                    try:
                        fut = await producer.send(topic, msg.value, key=msg.key, headers=list(msg.headers))
                    except (KafkaError, OSError, TimeoutError) as e:  # as in _hand_over
                        self._degrade(classify(e), f"send failed: {describe(e)}")
                        break
                    handed.append((fut, topic))
        except TimeoutError:
            self._degrade(ErrorReason.STALLED, f"send() did not return within {_SEND_FIRST_S:g} s")
        if self.mode is Mode.DIRECT and producer is self._producer:
            for _ in range(_PRODUCER_TURNS):
                await asyncio.sleep(0)
        return handed

    def _take_early(
        self, msgs: list[Message], ends: list[Position], handed: list[tuple[asyncio.Future[Any], str]], since: float
    ) -> None:
        """The batch :meth:`_send_early` handed over (`handed`, at monotonic `since`) is on disk at `ends`: its
        deliveries go to the acker, in order. When the publisher degraded meanwhile (a failed or stuck ``send()``,
        or a delivery of an earlier batch failed), or not all of the batch was handed over, the in-memory copies
        are dropped and the replay sends the batch from the outbox, as :meth:`_degrade` does for the rest."""
        if self.mode is Mode.DIRECT and len(handed) == len(msgs):
            self._inflight.extend(Sent(f, end, topic, since) for (f, topic), end in zip(handed, ends, strict=True))
            self._wake_acker.set()
            return
        for f, _ in handed:
            f.add_done_callback(consume)  # its outcome no longer matters: the replay sends the event again
        for topic, n in Counter(self._topics[m.stream] for m in msgs).items():
            self._count(topic, "outbox", n)
        if self.mode is Mode.DIRECT:  # not reached (a partial hand-over degraded): the replay must run all the same
            self._degrade(ErrorReason.STALLED, "a batch was handed over in part", quiet=True)
        self._report_outbox()
        self._wake_replay.set()


def _failure(fut: asyncio.Future[Any]) -> BaseException | None:
    """The exception of a done future (CancelledError for a cancelled one), or None on success."""
    if fut.cancelled():
        return asyncio.CancelledError()
    return fut.exception()
