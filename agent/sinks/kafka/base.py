"""The state the Kafka publisher's paths share (:class:`PublisherBase`), its connection to Kafka (connect, check
the topics, retire a failed producer, record a failure) and its counting. The paths themselves are
:mod:`agent.sinks.kafka.direct` (memory to Kafka), :mod:`agent.sinks.kafka.replay` (outbox to Kafka) and
:class:`agent.sinks.kafka.publisher.KafkaPublisher` (the group commit and the lifecycle).

A connection problem never raises out of here: it becomes a :class:`~agent.sinks.kafka.errors.KafkaSinkError`
that is logged once per reason, counted (``stats.errors``, ``fault_agent_kafka_errors_total``) and kept in
``last_error``.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from agent.settings import KafkaSettings
from agent.sinks.events import Message, Stream
from agent.sinks.kafka.errors import ErrorReason, KafkaSinkError, classify, describe
from agent.sinks.kafka.producer import build_producer, check_topics, learn_partitions, producer_options, stop_producer
from agent.sinks.kafka.tls import tls_problem
from agent.sinks.outbox import Outbox, Position

log = structlog.get_logger(__name__)


class SinkMetrics(Protocol):
    """What the publisher reports; ``agent.sinks.metrics.AgentMetrics`` implements it."""

    def event_published(self, topic: str, result: str, n: int = 1) -> None: ...

    def outbox_events(self, n: int) -> None: ...

    def outbox_bytes(self, n: int) -> None: ...


class Mode(enum.StrEnum):
    """How the publisher sends now: from memory (direct), from the outbox after a problem (spill), not at all."""

    DIRECT = "direct"
    SPILL = "spill"
    STOPPED = "stopped"


@dataclass(slots=True)
class PublisherStats:
    """Counters kept by the publisher itself (also forwarded to :class:`SinkMetrics` when given).

    published: results by (topic, result) with result in ok, outbox, error, invalid.
    errors: Kafka problems by :class:`ErrorReason` value.
    """

    published: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)


@dataclass(slots=True)
class Sent:
    """One event handed to the producer: its delivery future, where it ends in the outbox, its topic, and when
    it was handed over (monotonic seconds; the stall check's start)."""

    fut: asyncio.Future[Any]
    end: Position
    topic: str
    since: float


class PublisherBase:
    """What :class:`~agent.sinks.kafka.publisher.KafkaPublisher` is made of: the settings, the outbox, the
    producer and the queues, events and flags its tasks share, with the connection and counting they all use.

    Args:
        settings: the ``kafka`` settings group.
        metrics: where to report (``AgentMetrics``); counters are also kept in :attr:`stats`.
        outbox: an outbox to use instead of one in ``settings.outbox_dir`` (tests, benchmarks).
        producer_factory: builds the producer from keyword arguments (default ``AIOKafkaProducer``).
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        metrics: SinkMetrics | None = None,
        outbox: Outbox | None = None,
        producer_factory: Callable[..., Any] = AIOKafkaProducer,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.outbox = outbox if outbox is not None else Outbox(settings.outbox_dir, max_bytes=settings.outbox_max_bytes)
        self.stats = PublisherStats()
        self.mode = Mode.STOPPED
        self.last_error: KafkaSinkError | None = None
        self._factory = producer_factory
        self._producer: Any = None
        self._connected = False
        self._topics = {Stream.FAULTS: settings.faults_topic, Stream.RECOVERIES: settings.recoveries_topic}
        self._commit_buf: list[tuple[Message, asyncio.Future[None]]] = []  # submitted, not yet on disk
        self._committing = 0  # events in the write running now
        self._end = Position(0, 0)  # the outbox's end after the last commit (where the next one goes)
        self._queue: deque[tuple[Message, Position]] = deque()  # on disk, waiting for the sender
        self._inflight: deque[Sent] = deque()  # handed to the producer, not yet taken by the acker
        self._wake_commit = asyncio.Event()
        self._wake_sender = asyncio.Event()
        self._wake_acker = asyncio.Event()
        self._wake_replay = asyncio.Event()
        self._room = asyncio.Event()
        self._cursor = asyncio.Lock()  # held while the outbox cursor is written or rewound
        self._sending = False  # the sender task is inside producer.send()
        self._unsaved = False  # the acker took delivered events whose cursor write has not ended yet
        self._rewind = False  # the replay must start again from the outbox cursor (after a degrade)
        self._tasks: list[asyncio.Task[None]] = []
        self._old_producers: set[asyncio.Task[None]] = set()
        self._closing = False
        self._adopted: set[asyncio.Future[None]] = set()  # commit futures of events taken over from a gone peer
        self._switch_before: float | None = None  # the thread switch interval before start() (publisher.py)

    @property
    def connected(self) -> bool:
        """True while a producer is connected and the topics were found (or created)."""
        return self._connected

    @property
    def pending(self) -> int:
        """Events accepted and not yet acknowledged by Kafka (on their way to the outbox, or in it)."""
        return len(self._commit_buf) + self._committing + self.outbox.pending

    def _stopping(self) -> bool:
        """Whether :meth:`stop` has begun (read afresh at each step of a loop that awaits in between)."""
        return self._closing

    async def _supervised(self, body: Callable[[], Any], name: str) -> None:
        """Run a background loop; a bug that escapes it is logged, counted and the loop restarted after 1 s."""
        while True:
            try:
                await body()
                return
            except asyncio.CancelledError:
                raise
            # last resort of the publisher's background tasks (kafka-sender, -commit, -replay, -acker, -adopt):
            # each loop handles Kafka's and the disk's errors itself, so what escapes one is a bug; the events are
            # in the outbox, so the task is logged, counted (fault_agent_task_failures_total) and restarted.
            except Exception:
                log.exception("kafka publisher task failed; restarting it", task=name)
                hook = getattr(self.metrics, "task_failed", None)
                if callable(hook):
                    hook(name)
                await asyncio.sleep(1.0)

    async def _connect(self) -> bool:
        """Start a producer and check the topics; on failure record the error and return False."""
        s = self.settings
        producer: Any = None
        opts: dict[str, Any] = {}
        try:
            opts = producer_options(s)
            producer = build_producer(self._factory, s, opts)
            await producer.start()
            await self._check_topics(opts)
            await learn_partitions(producer, self._topics.values())
        except asyncio.CancelledError:
            await self._discard(producer)  # stop() cancelled us mid-connect: release the sockets, then go
            raise
        except KafkaSinkError as e:
            await self._discard(producer)
            self._fail(e)
            return False
        except (KafkaError, OSError) as e:
            await self._discard(producer)
            reason = classify(e)
            tls = opts.get("ssl_context") if reason is ErrorReason.UNREACHABLE else None
            problem = await tls_problem(s, tls) if tls is not None else None
            self._fail(
                problem
                or KafkaSinkError(
                    reason,
                    f"cannot connect to {s.bootstrap_servers} ({s.security_protocol}): {describe(e)}",
                    retriable=True,
                )
            )
            return False
        self._producer = producer
        self._connected = True
        if self.last_error is not None:
            log.info("kafka reachable again", bootstrap=s.bootstrap_servers)
        self.last_error = None
        return True

    async def _check_topics(self, opts: dict[str, Any]) -> None:
        """The topics exist, or are created (:func:`~agent.sinks.kafka.producer.check_topics`)."""
        await check_topics(self.settings, opts, self._topics.values())

    async def _discard(self, producer: Any) -> None:
        if producer is not None:
            await stop_producer(producer, self.settings.request_timeout_ms / 1000 + 1)

    async def _close_producer(self, wait_s: float) -> None:
        producer, self._producer, self._connected = self._producer, None, False
        if producer is not None:
            try:
                await asyncio.wait_for(producer.stop(), wait_s + self.settings.request_timeout_ms / 1000)
            except (TimeoutError, KafkaError, OSError) as e:
                log.warning("kafka producer did not close cleanly", error=str(e))

    def _retire_producer(self) -> None:
        """Drop the producer after a failure (its idempotence state may be stale); close it in the background."""
        producer, self._producer, self._connected = self._producer, None, False
        if producer is not None:
            task = asyncio.create_task(self._discard(producer), name="kafka-close-old")
            self._old_producers.add(task)
            task.add_done_callback(self._old_producers.discard)

    def _fail(self, err: KafkaSinkError) -> None:
        first = self.last_error is None or self.last_error.reason is not err.reason
        self.last_error = err
        self.stats.errors[err.reason.value] += 1
        # A metrics object with kafka_error(reason) (AgentMetrics: fault_agent_kafka_errors_total) counts these.
        hook = getattr(self.metrics, "kafka_error", None)
        if callable(hook):
            hook(err.reason.value)
        if first:
            log.error("kafka unavailable; events go to the outbox", reason=err.reason.value, error=str(err))

    def _full(self) -> bool:
        return len(self._queue) + len(self._inflight) >= self.settings.queue_size

    def _count(self, topic: str, result: str, n: int = 1) -> None:
        self.stats.published[(topic, result)] += n
        if self.metrics is not None:
            self.metrics.event_published(topic, result, n)

    def _report_outbox(self) -> None:
        if self.metrics is not None:
            self.metrics.outbox_events(self.outbox.pending)
            self.metrics.outbox_bytes(self.outbox.size_bytes)
