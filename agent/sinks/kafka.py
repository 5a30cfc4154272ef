"""Publish the agent's CloudEvents to Kafka without losing any: an on-disk outbox first, Kafka behind it.

Paths an event takes (one :class:`KafkaPublisher` per agent, used by the leader only):

- *durable first*: every event is appended to the :class:`~agent.sinks.outbox.Outbox` (write + fsync) before
  the agent treats it as sent, or acts on the step it describes, whatever Kafka does. ``submit()`` hands the
  event over (the order of ``submit()`` calls is the delivery order) and returns the future of its commit;
  ``publish()`` awaits that future. Group commit: a commit task writes everything submitted while the previous
  write was running in one write + fsync and adds no wait of its own, so an event waits for at most the write in
  progress and its own, and events submitted together share one fsync.
- *direct*: once on disk, the event is handed to the aiokafka producer's ``send()`` in outbox order: by the commit
  task itself, before the callers waiting for the commit are released, when nothing is ahead of it (so the produce
  request leaves before whatever those callers do next), else by a sender task. The producer does the rest: its
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
import enum
import random
import ssl
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, KafkaError
from aiokafka.partitioner import DefaultPartitioner
from cloudevents.core.v1.event import CloudEvent

from agent.settings import KafkaSettings
from agent.sinks.events import EventBuildError, Message, Stream, encode
from agent.sinks.outbox import Batch, Outbox, OutboxError, OutboxFull, Position, adopt, open_gone, remove_taken

log = structlog.get_logger(__name__)

_TOPIC_ALREADY_EXISTS = 36
_YIELD_EVERY = 256  # events submitted in a row after which submit() yields to the commit task
_REPLAY_DEPTH = 4  # outbox batches sent before the oldest one's acknowledgements are awaited
_QUEUE_WAIT_S = 1.0  # how long submit() waits for room when queue_size events wait for Kafka, before spilling
_SEND_CHUNK = 4096  # events the sender hands to the producer before it lets other tasks run
_SEND_FIRST_S = 1.0  # bound on the producer's send() of a commit's events, after which the publisher spills
# Loop turns aiokafka 0.14's Sender takes from send() to writing the produce request: the accumulator's waiter
# wakes asyncio.wait() (1), which wakes the sender routine (2), whose produce task writes the request (3).
_PRODUCER_TURNS = 3
_METADATA_WAIT_S = 2.0  # how long the connect waits for a topic's partition metadata before leaving it to send()
_PARTITION_CACHE = 65536  # (key, partition count) entries the partitioner keeps before it starts again


class SinkMetrics(Protocol):
    """What the publisher reports; ``agent.sinks.metrics.AgentMetrics`` implements it."""

    def event_published(self, topic: str, result: str, n: int = 1) -> None: ...

    def outbox_events(self, n: int) -> None: ...

    def outbox_bytes(self, n: int) -> None: ...


class ErrorReason(enum.StrEnum):
    """Why Kafka could not be used (``KafkaSinkError.reason``, the publisher's ``errors`` counter keys)."""

    CONFIG = "config"  # the settings cannot work (SASL without user, missing SSL files)
    UNREACHABLE = "unreachable"  # no broker answered at the bootstrap addresses
    AUTH = "auth"  # SASL / SSL handshake or credentials refused
    TOPIC_MISSING = "topic-missing"  # a topic does not exist and create_topics is off
    TOPIC_CREATE = "topic-create"  # creating a topic failed
    DELIVERY = "delivery"  # a send failed or timed out
    STALLED = "stalled"  # no acknowledgement within spill_after_s
    QUEUE_FULL = "queue-full"  # the in-memory queue was full
    OUTBOX = "outbox"  # the outbox could not take events (they are dropped)
    INVALID = "invalid"  # publish() got an event that cannot be encoded (a caller bug)


class KafkaSinkError(Exception):
    """Kafka cannot take events now. `reason` is an :class:`ErrorReason`; `retriable` says whether waiting helps."""

    def __init__(self, reason: ErrorReason, message: str, *, retriable: bool) -> None:
        super().__init__(f"kafka {reason.value}: {message}")
        self.reason = reason
        self.retriable = retriable


class Mode(enum.StrEnum):
    DIRECT = "direct"
    SPILL = "spill"
    STOPPED = "stopped"


class CachedPartitioner:
    """aiokafka's :class:`~aiokafka.partitioner.DefaultPartitioner` (murmur2 of the key, as every Kafka client)
    with its answers kept per (key, partition count), given to the producer as its ``partitioner``: the keys are
    job UIDs and node names, a bounded set, and murmur2 in pure Python was a fifth of a ``send()``'s cost.
    Keyless records go to the default partitioner's random choice.

    Called by aiokafka as ``partitioner(key_bytes, all_partitions, available_partitions)``; returns a partition id.
    """

    def __init__(self) -> None:
        self._default = DefaultPartitioner()
        self._cache: dict[tuple[bytes, int], int] = {}

    def __call__(self, key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        if key is None:
            return int(self._default(key, all_partitions, available))
        slot = (key, len(all_partitions))
        got = self._cache.get(slot)
        if got is None:
            if len(self._cache) >= _PARTITION_CACHE:
                self._cache.clear()
            got = self._cache[slot] = int(self._default(key, all_partitions, available))
        return got


@dataclass(slots=True)
class PublisherStats:
    """Counters kept by the publisher itself (also forwarded to :class:`SinkMetrics` when given).

    published: results by (topic, result) with result in ok, outbox, error, invalid.
    errors: Kafka problems by :class:`ErrorReason` value.
    """

    published: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)


def producer_options(settings: KafkaSettings) -> dict[str, Any]:
    """aiokafka producer/admin keyword arguments for `settings` (security included).

    Raises:
        KafkaSinkError: (config, not retriable) SASL without mechanism/user/password, or an unreadable SSL file.
    """
    opts: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "client_id": settings.client_id,
        "request_timeout_ms": settings.request_timeout_ms,
        "security_protocol": settings.security_protocol,
    }
    proto = settings.security_protocol
    if proto.startswith("SASL"):
        missing = [
            name
            for name, value in (
                ("sasl_mechanism", settings.sasl_mechanism),
                ("sasl_username", settings.sasl_username),
                ("sasl_password", settings.sasl_password),
            )
            if not value
        ]
        if missing:
            raise KafkaSinkError(
                ErrorReason.CONFIG, f"security_protocol {proto} needs {', '.join(missing)}", retriable=False
            )
        opts |= {
            "sasl_mechanism": settings.sasl_mechanism,
            "sasl_plain_username": settings.sasl_username,
            "sasl_plain_password": settings.sasl_password,
        }
    if proto.endswith("SSL"):
        opts["ssl_context"] = tls_context(settings)
    return opts


def _setting(name: str) -> str:
    """``kafka.<name> [FAULT_AGENT_KAFKA__<NAME>]``: how an error names a Kafka setting."""
    return f"kafka.{name} [FAULT_AGENT_KAFKA__{name.upper()}]"


def _encrypted_key() -> bytes:
    raise ValueError("the key is encrypted; the agent reads an unencrypted PEM key")


def _config_error(message: str) -> KafkaSinkError:
    return KafkaSinkError(ErrorReason.CONFIG, message, retriable=False)


def tls_context(settings: KafkaSettings) -> ssl.SSLContext:
    """The client TLS context of `settings` (security_protocol SSL or SASL_SSL): the brokers' certificates verified
    against ``ssl_cafile`` (else the system's CAs), their host names checked unless ``ssl_check_hostname`` is off,
    and the client certificate ``ssl_certfile`` with its key ``ssl_keyfile`` presented when set.

    Raises:
        KafkaSinkError: (config, not retriable) one line naming the setting and its file: a file that is missing,
            unreadable or not what the setting needs (no PEM certificate, an encrypted key, a key that does not
            match the certificate), or ``ssl_keyfile`` without ``ssl_certfile``.
    """
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        path = getattr(settings, name)
        if not path:  # unset (an empty value too)
            continue
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as e:
            raise _config_error(f"{_setting(name)}: cannot read {path}: {e.strerror or e}") from e
    if settings.ssl_keyfile and not settings.ssl_certfile:
        raise _config_error(
            f"{_setting('ssl_keyfile')} is {settings.ssl_keyfile} but {_setting('ssl_certfile')} is not set: "
            "a client key needs its certificate"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, host names checked
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.ssl_cafile:
        try:
            ctx.load_verify_locations(cafile=settings.ssl_cafile)
        except (ssl.SSLError, ValueError) as e:
            raise _config_error(
                f"{_setting('ssl_cafile')}: {settings.ssl_cafile} holds no usable PEM CA certificate ({_ssl_reason(e)})"
            ) from e
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if settings.ssl_certfile:
        files = f"{settings.ssl_certfile}" + (f" and {settings.ssl_keyfile}" if settings.ssl_keyfile else "")
        names = _setting("ssl_certfile") + (f" / {_setting('ssl_keyfile')}" if settings.ssl_keyfile else "")
        try:
            ctx.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile or None, password=_encrypted_key)
        except (ssl.SSLError, ValueError) as e:
            raise _config_error(
                f"{names}: {files} hold no usable PEM client certificate and matching key ({_ssl_reason(e)})"
            ) from e
    ctx.check_hostname = settings.ssl_check_hostname
    return ctx


def _ssl_reason(err: BaseException) -> str:
    """OpenSSL's short reason (``KEY_VALUES_MISMATCH``, ``NO_CERTIFICATE_OR_CRL_FOUND``), else the message."""
    reason = getattr(err, "reason", None)
    return str(reason) if reason else str(err)


def _host_ports(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (``[IPv6]:port`` too) as (host, port) pairs."""
    out = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return out


async def tls_problem(settings: KafkaSettings, ctx: ssl.SSLContext, wait_s: float = 5.0) -> KafkaSinkError | None:
    """Why the TLS handshake with the first bootstrap broker that accepts a TCP connection fails, or None when it
    does not (or none accepts one). aiokafka reports a refused certificate only as "Unable to bootstrap"; this
    names the cause: a broker certificate the CA does not sign, one that does not name the host, or a client
    certificate the broker refuses or wanted and did not get. Takes at most `wait_s` seconds in all."""
    deadline = asyncio.get_running_loop().time() + wait_s
    for host, port in _host_ports(settings.bootstrap_servers):
        try:
            async with asyncio.timeout_at(deadline):
                reader, writer = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=host)
        except ssl.SSLError as e:
            return _tls_error(settings, host, port, e)
        except TimeoutError:
            return None  # no time left: aiokafka's own error stands
        except OSError:
            continue  # not reachable: aiokafka's own error says so
        try:
            # TLS 1.3: a broker refuses the client certificate (or its absence) after the handshake, with an alert
            # or by closing the connection, seen on the first read; a Kafka broker itself sends nothing unasked.
            async with asyncio.timeout_at(min(deadline, asyncio.get_running_loop().time() + 1.0)):
                if await reader.read(1) == b"":
                    return _tls_error(settings, host, port, ssl.SSLError("connection closed after the handshake"))
        except ssl.SSLError as e:
            return _tls_error(settings, host, port, e)
        except ConnectionError:
            return _tls_error(settings, host, port, ssl.SSLError("connection reset after the handshake"))
        except (OSError, TimeoutError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        return None
    return None


def _tls_error(settings: KafkaSettings, host: str, port: int, err: ssl.SSLError) -> KafkaSinkError:
    detail = getattr(err, "verify_message", None) or _ssl_reason(err)
    if isinstance(err, ssl.SSLCertVerificationError):
        if "hostname" in str(err).lower() or "ip address mismatch" in str(err).lower():
            hint = f"the broker's certificate does not name {host} (see {_setting('ssl_check_hostname')})"
        else:
            ca = settings.ssl_cafile or "the system's CAs"
            hint = f"the broker's certificate is not signed by a CA in {_setting('ssl_cafile')} ({ca})"
        message = f"TLS handshake with {host}:{port} failed: certificate verify failed: {detail}; {hint}"
    elif "certificate" in str(err).lower() or "after the handshake" in str(err):  # refused: an alert, EOF or RST
        message = (
            f"TLS handshake with {host}:{port} failed: the broker refused the client certificate ({detail}; "
            f"{_setting('ssl_certfile')} is {settings.ssl_certfile or 'not set'}: it must be signed by a CA the "
            "broker trusts)"
        )
    else:
        message = f"TLS handshake with {host}:{port} failed: {detail} (is it a TLS listener?)"
    return KafkaSinkError(ErrorReason.AUTH, message, retriable=True)


def describe(err: BaseException) -> str:
    """``<ExceptionType>: <message>`` without repeating the type when the message already starts with it."""
    text = str(err) or repr(err)
    name = type(err).__name__
    return text if text.startswith(name) else f"{name}: {text}"


def classify(err: BaseException) -> ErrorReason:
    """Map an aiokafka / OS exception to an :class:`ErrorReason`."""
    name = type(err).__name__
    if "Authentication" in name or "Sasl" in name or "SSL" in name or "Authorization" in name:
        return ErrorReason.AUTH
    if isinstance(err, KafkaConnectionError | ConnectionError | OSError):
        return ErrorReason.UNREACHABLE
    if "UnknownTopic" in name:
        return ErrorReason.TOPIC_MISSING
    return ErrorReason.DELIVERY


_TASK_STOP_S = 2.0
"""Seconds stop() waits for its cancelled background tasks."""


@dataclass(slots=True)
class _Sent:
    """One event handed to the producer: its delivery future, where it ends in the outbox, its topic, and when
    it was handed over (monotonic seconds; the stall check's start)."""

    fut: asyncio.Future[Any]
    end: Position
    topic: str
    since: float


class KafkaPublisher:
    """Publishes :mod:`agent.sinks.events` CloudEvents to Kafka with an on-disk outbox as a safety net.

    Args:
        settings: the ``kafka`` settings group.
        metrics: where to report (``AgentMetrics``); counters are also kept in :attr:`stats`.
        outbox: an outbox to use instead of one in ``settings.outbox_dir`` (tests, benchmarks).
        producer_factory: builds the producer from keyword arguments (default ``AIOKafkaProducer``).

    Lifecycle: ``await start()``, ``await publish(event)`` (or ``await submit(event)``) any number of times,
    ``await stop()``.
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
        self._inflight: deque[_Sent] = deque()  # handed to the producer, not yet taken by the acker
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

    # --- public ---------------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while a producer is connected and the topics were found (or created)."""
        return self._connected

    @property
    def pending(self) -> int:
        """Events accepted and not yet acknowledged by Kafka (on their way to the outbox, or in it)."""
        return len(self._commit_buf) + self._committing + self.outbox.pending

    async def start(self) -> None:
        """Open the outbox and connect to Kafka.

        A Kafka problem does not raise: it is logged once with a specific reason, counted, kept in
        :attr:`last_error`, and events go to the outbox until a background task connects.

        Raises:
            OutboxError: the outbox directory cannot be used (without it no delivery guarantee holds).
            KafkaSinkError: (config, not retriable) the security settings cannot work.
        """
        producer_options(self.settings)  # fail now on impossible settings
        await asyncio.to_thread(self.outbox.open)
        if self.settings.outbox_peers_dir:
            await asyncio.to_thread(self._adopt_peers, Path(self.settings.outbox_peers_dir))
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

    def _adopt_peers(self, peers: Path) -> None:
        """Take over the outboxes under `peers` that no live process holds (:func:`agent.sinks.outbox.adopt`),
        before this process sends anything: their events go out after this process's own pending ones, each
        outbox's in its order, the outboxes in name order. `peers` itself is one too when it holds an outbox's files
        (the layout of the versions before per-pod folders). A problem is logged once per directory and skipped
        (its events stay there for the next start)."""
        own = self.outbox.directory.resolve()
        try:
            dirs = [peers, *sorted(d for d in peers.iterdir() if d.is_dir())]
        except OSError as e:
            log.error("outbox peers not listed", directory=str(peers), error=str(e))
            return
        for d in dirs:
            if d.resolve() == own:
                continue
            try:
                moved = adopt(self.outbox, d)
            except (OutboxError, OSError) as e:
                log.error("outbox of a gone process not taken over; left for the next start", directory=str(d),
                          error=str(e))  # fmt: skip
                continue
            if moved:
                log.warning("outbox of a gone process taken over", directory=str(d), events=moved)

    async def _adopter(self) -> None:
        """While running: every ``outbox_adopt_interval_s`` take over the outboxes under ``outbox_peers_dir`` that
        no live process holds (a replica that died while this one runs), through this publisher's own commit path
        (:meth:`_adopt_running`). Off when either setting is empty or 0."""
        peers, interval = self.settings.outbox_peers_dir, self.settings.outbox_adopt_interval_s
        if not peers or interval <= 0:
            return
        while not self._stopping():
            await asyncio.sleep(interval)
            if self._stopping():
                return
            try:
                dirs = await asyncio.to_thread(
                    lambda: [Path(peers), *sorted(d for d in Path(peers).iterdir() if d.is_dir())]
                )
            except OSError as e:
                log.debug("outbox peers not listed", directory=peers, error=str(e))
                continue
            own = self.outbox.directory.resolve()
            for d in dirs:
                if self._stopping():
                    return
                if d.resolve() == own:
                    continue
                moved = await self._adopt_running(d)
                if moved:
                    log.warning("outbox of a gone process taken over while running", directory=str(d), events=moved)

    def _stopping(self) -> bool:
        """Whether :meth:`stop` has begun (read afresh at each step of a loop that awaits in between)."""
        return self._closing

    async def _adopt_running(self, directory: Path, batch: int = 1000) -> int:
        """Take over the outbox in `directory` when no live process holds it: each batch of its events goes
        through the group commit like a new event (durable in this outbox, then sent, in order), and is
        acknowledged in the old outbox only once that commit is on disk; then its files go
        (:func:`agent.sinks.outbox.remove_taken`). A commit that fails (this outbox full, I/O) leaves the rest
        there for the next round. Returns the events moved; problems are logged and return what was moved.

        Events appended here come after whatever this replica published before: the bound that keeps a dead
        leader's events ahead of its successor's is the interval (default 5 s) against the Lease (15 s): a
        replica that dies releases its lock at once, and the successor's term opens ``lease_duration_s`` after
        the dead leader's last renewal."""
        try:
            peer = await asyncio.to_thread(
                open_gone, directory, fsync=self.outbox.fsync, max_bytes=self.outbox.max_bytes
            )
        except OutboxError as e:
            log.error("outbox of a gone process not taken over; tried again later", directory=str(directory),
                      error=str(e))  # fmt: skip
            return 0
        if peer is None:
            return 0
        moved = 0
        try:
            while not self._stopping() and (taken := await asyncio.to_thread(peer.read, batch)).messages:
                if not await self._commit_adopted(taken.messages):
                    log.error("outbox of a gone process: this outbox took no more of its events; tried again later",
                              directory=str(directory), moved=moved)  # fmt: skip
                    await asyncio.to_thread(peer.close)
                    return moved
                await asyncio.to_thread(peer.ack, taken)
                moved += len(taken.messages)
            if self._stopping():
                await asyncio.to_thread(peer.close)
                return moved
            await asyncio.to_thread(remove_taken, peer)
        except (OutboxError, OSError) as e:
            log.error("outbox of a gone process not wholly taken over; tried again later", directory=str(directory),
                      moved=moved, error=str(e))  # fmt: skip
            with contextlib.suppress(OutboxError, OSError):
                await asyncio.to_thread(peer.close)
        return moved

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
        self.mode = Mode.STOPPED
        log.info("kafka publisher stopped", outbox=self.outbox.pending)

    async def _supervised(self, body: Callable[[], Any], name: str) -> None:
        """Run a background loop; a bug that escapes it is logged, counted and the loop restarted after 1 s."""
        while True:
            try:
                await body()
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # last resort of a supervised loop: a bug is logged, counted, the loop restarted
                log.exception("kafka publisher task failed; restarting it", task=name)
                hook = getattr(self.metrics, "task_failed", None)
                if callable(hook):
                    hook(name)
                await asyncio.sleep(1.0)

    # --- connection -----------------------------------------------------------------------------------

    async def _connect(self) -> bool:
        """Start a producer and check the topics; on failure record the error and return False."""
        s = self.settings
        producer: Any = None
        try:
            opts = producer_options(s)
            producer = self._factory(
                **opts,
                acks="all",
                enable_idempotence=True,
                compression_type=s.compression_type,
                linger_ms=s.linger_ms,
                max_batch_size=s.max_batch_bytes,
                partitioner=CachedPartitioner(),
            )
            await producer.start()
            await self._check_topics(opts)
            await self._learn_partitions(producer)
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
        s = self.settings
        admin = AIOKafkaAdminClient(**opts)
        try:
            await admin.start()
            existing = set(await admin.list_topics())
            missing = [t for t in self._topics.values() if t not in existing]
            if not missing:
                return
            if not s.create_topics:
                raise KafkaSinkError(
                    ErrorReason.TOPIC_MISSING,
                    f"topic(s) {', '.join(missing)} do not exist and create_topics is off "
                    "(create them, or set FAULT_AGENT_KAFKA__CREATE_TOPICS=true)",
                    retriable=True,
                )
            resp = await admin.create_topics(
                [NewTopic(t, s.topic_partitions, s.topic_replication_factor) for t in missing]
            )
            for err in getattr(resp, "topic_errors", ()):
                name, code = err[0], err[1]
                if code not in (0, _TOPIC_ALREADY_EXISTS):
                    detail = err[2] if len(err) > 2 else ""
                    raise KafkaSinkError(
                        ErrorReason.TOPIC_CREATE, f"creating {name}: error code {code} {detail}", retriable=True
                    )
            log.info("kafka topics created", topics=missing, partitions=s.topic_partitions)
        finally:
            await admin.close()

    async def _learn_partitions(self, producer: Any) -> None:
        """Fetch the topics' partition metadata into `producer` now (``partitions_for``), so that the first event
        of each topic is not held up by a metadata round trip inside ``send()`` (~2 ms on the testbed, once per
        topic and producer). The producer's ``start()`` learns the brokers only. Best effort: a topic just created
        whose metadata is not there yet within ``_METADATA_WAIT_S`` is left to ``send()``, which waits for it."""
        for topic in self._topics.values():
            try:
                await asyncio.wait_for(producer.partitions_for(topic), _METADATA_WAIT_S)
            except (TimeoutError, KafkaError) as e:
                log.debug(
                    "kafka topic metadata not there yet; the first send waits for it", topic=topic, error=describe(e)
                )

    async def _discard(self, producer: Any) -> None:
        if producer is None:
            return
        try:
            await asyncio.wait_for(producer.stop(), self.settings.request_timeout_ms / 1000 + 1)
        except Exception as e:  # a producer that cannot stop cleanly still must release its sockets
            log.debug("kafka producer stop failed; closing its connections", error=describe(e))
            with contextlib.suppress(Exception):
                await producer.client.close()

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

    # --- direct path ----------------------------------------------------------------------------------

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
                except Exception as e:  # any producer error: the event is on disk, the replay sends it
                    self._degrade(classify(e), f"send failed: {describe(e)}")
                    return
                if self.mode is not Mode.DIRECT or producer is not self._producer:
                    fut.add_done_callback(_consume)  # degraded while send() waited
                    return
                self._inflight.append(_Sent(fut, end, topic, since))
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
            sent.fut.add_done_callback(_consume)  # its outcome no longer matters
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

    # --- commit path ---------------------------------------------------------------------------------

    async def _committer(self) -> None:
        while True:
            await self._wake_commit.wait()
            self._wake_commit.clear()
            while self._commit_buf:
                await self._commit()

    async def _commit(self) -> None:
        """Write everything submitted so far to the outbox in one write + fsync (group commit); in direct mode
        hand the events to the producer (:meth:`_send_first`, when nothing is ahead of them) or queue them for
        the sender; in spill mode wake the replay. The callers waiting for the commit are released last, and in
        every case (an outbox failure, a cancellation)."""
        batch, self._commit_buf = self._commit_buf, []
        msgs = [m for m, _ in batch]
        self._committing = len(msgs)
        try:
            try:
                ends = await asyncio.to_thread(self.outbox.append, msgs)
            except OutboxError as e:
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
            if self.mode is Mode.DIRECT and not self._closing:
                if not await self._send_first(msgs, ends):
                    self._queue.extend(zip(msgs, ends, strict=True))
                    self._wake_sender.set()
            else:
                for topic, n in Counter(self._topics[m.stream] for m in msgs).items():
                    self._count(topic, "outbox", n)
                self._report_outbox()
                self._wake_replay.set()
        finally:
            for _, f in batch:
                if not f.done():
                    f.set_result(None)

    async def _send_first(self, msgs: list[Message], ends: list[Position]) -> bool:
        """Hand a batch just committed to the producer's ``send()`` now, before the callers waiting for its
        commit are released, when nothing is ahead of it (no event queued for the sender, inside its ``send()``
        or unacknowledged); returns False, doing nothing, otherwise (the sender then takes it, in order).

        Why: a caller that waited for the commit acts next. The engine sends its restart's apiserver writes once
        a fault's ``fault.detected`` is durable; when those went out before the produce request, the broker's
        append waited behind the apiserver's work for a CPU. So after the sends the producer's background task
        gets :data:`_PRODUCER_TURNS` loop turns to put its produce request on the wire first (bench_e2e, agent on
        a CPU of its own: ``send()`` → broker append p50 5.4 → 2.6 ms). With nothing unacknowledged the
        producer's accumulator is empty and ``send()`` does not wait for room; it is bounded by
        :data:`_SEND_FIRST_S` all the same, after which the publisher spills (the events are on disk)."""
        if self._producer is None or self._queue or self._inflight or self._sending:
            return False
        self._queue.extend(zip(msgs, ends, strict=True))
        try:
            async with asyncio.timeout(_SEND_FIRST_S):
                await self._hand_over(self._producer, len(msgs))
        except TimeoutError:
            self._degrade(ErrorReason.STALLED, f"send() did not return within {_SEND_FIRST_S:g} s")
            return True
        for _ in range(_PRODUCER_TURNS):
            await asyncio.sleep(0)
        return True

    # --- replay path ----------------------------------------------------------------------------------

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
        # Pipelined: up to _REPLAY_DEPTH batches are handed to the producer before the oldest one's
        # acknowledgements are awaited; batches are acknowledged in the outbox strictly in order.
        inflight: deque[tuple[Batch, list[asyncio.Future[Any]]]] = deque()
        try:
            while batch.messages or inflight:
                if batch.messages:
                    topics = self._topics
                    futures = [
                        await producer.send(topics[m.stream], m.value, key=m.key, headers=list(m.headers))
                        for m in batch.messages
                    ]
                    inflight.append((batch, futures))
                    batch = Batch((), batch.end)
                    if len(inflight) < _REPLAY_DEPTH and not self._closing and self.mode is Mode.SPILL:
                        batch = await asyncio.to_thread(self.outbox.read, self.settings.replay_batch)
                        continue
                done_batch, futures = inflight.popleft()
                for f in futures:
                    if not f.done():
                        await asyncio.wait((f,))
                    err = _failure(f)
                    if err is not None:
                        raise err
                try:
                    await asyncio.to_thread(self.outbox.ack, done_batch)
                except OutboxError as e:
                    log.error("outbox cursor not saved; these events will be sent again after a restart", error=str(e))
                ok: Counter[str] = Counter(self._topics[m.stream] for m in done_batch.messages)
                for topic, n in ok.items():
                    self._count(topic, "ok", n)
                self._report_outbox()
                if not self._closing and self.mode is Mode.SPILL:
                    batch = await asyncio.to_thread(self.outbox.read, self.settings.replay_batch)
        except Exception as e:  # a failed send or delivery: start again from the cursor later
            for _, futures in inflight:
                for f in futures:
                    f.add_done_callback(_consume)
            await asyncio.to_thread(self.outbox.rewind)
            self._fail(KafkaSinkError(classify(e), f"replay failed: {describe(e)}", retriable=True))
            return False
        return True

    # --- reporting ------------------------------------------------------------------------------------

    def _count(self, topic: str, result: str, n: int = 1) -> None:
        self.stats.published[(topic, result)] += n
        if self.metrics is not None:
            self.metrics.event_published(topic, result, n)

    def _report_outbox(self) -> None:
        if self.metrics is not None:
            self.metrics.outbox_events(self.outbox.pending)
            self.metrics.outbox_bytes(self.outbox.size_bytes)


def _failure(fut: asyncio.Future[Any]) -> BaseException | None:
    """The exception of a done future (CancelledError for a cancelled one), or None on success."""
    if fut.cancelled():
        return asyncio.CancelledError()
    return fut.exception()


def _consume(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


async def wait_until(check: Callable[[], bool], wait_s: float, interval: float = 0.05) -> bool:
    """Poll `check` until it is true or `wait_s` seconds pass; returns the last result (tests, CLI)."""
    deadline = time.monotonic() + wait_s
    while not check():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(interval)
    return True


__all__ = [
    "ErrorReason",
    "KafkaPublisher",
    "KafkaSinkError",
    "Mode",
    "PublisherStats",
    "SinkMetrics",
    "classify",
    "producer_options",
    "tls_context",
    "tls_problem",
    "wait_until",
]
