"""Sending the outbox to Kafka in order, the publisher's way back from a spill: batches read from the outbox's
read position are handed to the producer's ``send()``, up to :data:`REPLAY_DEPTH` of them before the oldest
one's deliveries are awaited, and acknowledged in the outbox strictly in order, each once all its events are
delivered. A failure stops it; the caller rewinds the outbox to its cursor and starts again later (what was in
flight may be sent twice, with the same CloudEvents ids).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from aiokafka.errors import KafkaError

from agent.sinks.events import Stream
from agent.sinks.kafka.base import Mode, PublisherBase
from agent.sinks.kafka.errors import KafkaSinkError, classify, describe
from agent.sinks.outbox import Batch, Outbox, OutboxError

log = structlog.get_logger(__name__)

REPLAY_DEPTH = 4
"""Outbox batches sent before the oldest one's acknowledgements are awaited."""


async def replay_batches(
    producer: Any,
    outbox: Outbox,
    first: Batch,
    topics: Mapping[Stream, str],
    *,
    read_size: int,
    go_on: Callable[[], bool],
    acked: Callable[[Batch], None],
) -> None:
    """Send `first` and then the outbox's next batches (`read_size` events each, read while `go_on()` is true)
    through `producer`, pipelined (:data:`REPLAY_DEPTH`); after each batch is delivered, acknowledge it in the
    outbox (its cursor moves past it) and call `acked(batch)`. Returns when a read comes back empty, or `go_on()`
    turns false and what was sent is acknowledged. A cursor that cannot be saved is logged (those events are sent
    again after a restart) and does not stop it.

    Raises:
        KafkaError: a ``send()`` or a delivery failed (a cancelled delivery, or one failed with another exception,
            as a KafkaError too).
        OSError, TimeoutError: from the producer's connection.
        OutboxError: the outbox could not be read.
    On raising, the deliveries still in flight are left to finish unobserved (their outcome no longer matters).
    """
    inflight: deque[tuple[Batch, list[asyncio.Future[Any]]]] = deque()
    batch = first
    try:
        while batch.messages or inflight:
            if batch.messages:
                futures = [
                    await producer.send(topics[m.stream], m.value, key=m.key, headers=list(m.headers))
                    for m in batch.messages
                ]
                inflight.append((batch, futures))
                batch = Batch((), batch.end)
                if len(inflight) < REPLAY_DEPTH and go_on():
                    batch = await asyncio.to_thread(outbox.read, read_size)
                    continue
            done_batch, futures = inflight.popleft()
            for f in futures:
                if not f.done():
                    await asyncio.wait((f,))
                if f.cancelled():
                    # The producer was closed under it: the delivery is unknown, so it counts as failed.
                    raise KafkaError("the producer cancelled a delivery")
                err = f.exception()
                if isinstance(err, KafkaError | OSError | TimeoutError):
                    raise err
                if err is not None:  # aiokafka 0.14 fails deliveries with KafkaError; any other is one all the same
                    raise KafkaError(f"delivery failed: {describe(err)}") from err
            try:
                await asyncio.to_thread(outbox.ack, done_batch)
            except OutboxError as e:
                log.error("outbox cursor not saved; these events will be sent again after a restart", error=str(e))
            acked(done_batch)
            if go_on():
                batch = await asyncio.to_thread(outbox.read, read_size)
    except BaseException:
        for _, futures in inflight:
            for f in futures:
                f.add_done_callback(consume)
        raise


def consume(fut: asyncio.Future[Any]) -> None:
    """Retrieve a done future's outcome so asyncio does not log it as never retrieved (a done callback)."""
    if not fut.cancelled():
        fut.exception()


class ReplayPath(PublisherBase):
    """The publisher's replay task: in spill mode, (re)connect with a jittered backoff (0.5 s doubling to 30 s) and
    send the outbox from its cursor (:func:`replay_batches`); switch back to direct once it is empty."""

    async def _replayer(self) -> None:
        backoff = 0.5
        while True:
            if self.mode is not Mode.SPILL or self._closing or not self.settings.enabled:
                self._wake_replay.clear()
                await self._wake_replay.wait()
                continue
            if self._producer is None and not await self._connect():
                await self._sleep_or_wake(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            ok = await self._replay_once()
            if ok:
                backoff = 0.5
            else:
                self._retire_producer()
                await self._sleep_or_wake(backoff)
                backoff = min(backoff * 2, 30.0)

    async def _sleep_or_wake(self, seconds: float) -> None:
        self._wake_replay.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake_replay.wait(), seconds * random.uniform(0.8, 1.2))

    async def _replay_once(self) -> bool:
        """Send the outbox from the read position until it is empty, then switch to direct. False on a failed
        delivery (the next round starts again at the cursor)."""
        if self._rewind:
            # After a degrade: the acker's cursor write in progress (what Kafka acknowledged from memory) ends
            # first, then the replay starts at the cursor (what was in flight may be sent twice, same ids).
            async with self._cursor:
                self._rewind = False
                await asyncio.to_thread(self.outbox.rewind)
        batch = await asyncio.to_thread(self.outbox.read, self.settings.replay_batch)
        if not batch.messages:
            # Nothing after the read position, and nothing on its way to the disk: new events may go straight to
            # Kafka again (a commit that finished during the read moved the outbox's end past the read).
            if not self._commit_buf and not self._committing and not self._closing and batch.end == self._end:
                self.mode = Mode.DIRECT
                self._wake_sender.set()
                log.info("outbox drained; publishing directly again")
            else:
                await self._sleep_or_wake(0.05)
            return True
        producer = self._producer
        if producer is None:
            await asyncio.to_thread(self.outbox.rewind)
            return False
        try:
            await replay_batches(
                producer,
                self.outbox,
                batch,
                self._topics,
                read_size=self.settings.replay_batch,
                go_on=lambda: not self._closing and self.mode is Mode.SPILL,
                acked=self._replayed,
            )
        except (KafkaError, OutboxError, OSError, TimeoutError) as e:  # a send, a delivery or an outbox read failed
            await asyncio.to_thread(self.outbox.rewind)  # start again from the cursor later
            self._fail(KafkaSinkError(classify(e), f"replay failed: {describe(e)}", retriable=True))
            return False
        return True

    def _replayed(self, batch: Batch) -> None:
        """Count a batch the replay delivered (and acknowledged in the outbox)."""
        for topic, n in Counter(self._topics[m.stream] for m in batch.messages).items():
            self._count(topic, "ok", n)
        self._report_outbox()
