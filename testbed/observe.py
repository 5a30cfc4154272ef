"""Watch testbed objects from outside the agent and timestamp every event on arrival (for the demo and benches).

A :class:`WatchRecorder` lists a collection, then watches it from the list's resourceVersion (re-watching from
the last one seen when the server ends the stream), and keeps each event as a :class:`Seen` with the local
wall-clock time (``time.time()``) at which this process read it. Everything runs on one machine, so these times
compare directly with the injector's write times, the agent's log timestamps and Kafka's record timestamps.

Kafka helper: :func:`ensure_topics` creates the agent's topics with ``message.timestamp.type=LogAppendTime`` so
each record's timestamp is the broker's append time, not the producer's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from testbed.cluster import Testbed
from testbed.rest import Rest

Slim = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Seen:
    """One watch event: ``type`` (ADDED/MODIFIED/DELETED/LISTED), the (slimmed) object, arrival time in s."""

    type: str
    obj: dict[str, Any]
    at: float

    @property
    def name(self) -> str:
        return str(self.obj.get("metadata", {}).get("name", ""))

    @property
    def uid(self) -> str:
        return str(self.obj.get("metadata", {}).get("uid", ""))


def slim_default(obj: dict[str, Any]) -> dict[str, Any]:
    """Keep metadata (name, namespace, uid, labels, ownerReferences, generateName), spec.nodeName and status."""
    meta = obj.get("metadata", {})
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "labels", "ownerReferences", "generateName") if k in meta}
    spec = obj.get("spec", {})
    out: dict[str, Any] = {"metadata": keep, "status": obj.get("status", {})}
    if isinstance(spec, dict) and "nodeName" in spec:
        out["spec"] = {"nodeName": spec["nodeName"]}
    for extra in ("action", "target"):  # Volcano Commands keep these at the top level
        if extra in obj:
            out[extra] = obj[extra]
    return out


@dataclass
class WatchRecorder:
    """Records every event of one collection path (e.g. ``/apis/bus.volcano.sh/v1alpha1/commands``)."""

    testbed: Testbed
    path: str
    slim: Slim = slim_default
    label_selector: str = ""
    events: list[Seen] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _session: aiohttp.ClientSession | None = None
    _listed: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        """Open the session, list, and start watching in the background; returns once the list is read."""
        rest = self.testbed.rest()
        ctx = rest.ctx or ssl.create_default_context()
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {rest.token}"},
            connector=aiohttp.TCPConnector(ssl=ctx),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        )
        self._task = asyncio.create_task(self._run(rest), name=f"watch {self.path}")
        await asyncio.wait_for(self._listed.wait(), timeout=60)

    async def _run(self, rest: Rest) -> None:
        assert self._session is not None
        query = {"labelSelector": self.label_selector} if self.label_selector else {}
        async with self._session.get(f"{rest.base}{self.path}?{urllib.parse.urlencode(query)}") as resp:
            resp.raise_for_status()
            listing = await resp.json()
        now = time.time()
        for item in listing.get("items", []):
            self.events.append(Seen("LISTED", self.slim(item), now))
        rv = str(listing["metadata"]["resourceVersion"])
        self._listed.set()
        while True:
            params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "600"}
            params.update(query)
            try:
                async with self._session.get(f"{rest.base}{self.path}?{urllib.parse.urlencode(params)}") as resp:
                    resp.raise_for_status()
                    async for line in resp.content:
                        at = time.time()
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event.get("object", {})
                        if event.get("type") == "ERROR":
                            raise RuntimeError(f"watch {self.path}: {obj.get('message')}")
                        rv = str(obj.get("metadata", {}).get("resourceVersion", rv))
                        if event.get("type") == "BOOKMARK":
                            continue
                        self.events.append(Seen(str(event["type"]), self.slim(obj), at))
            except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError):
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._session is not None:
            await self._session.close()

    def failed(self) -> BaseException | None:
        """The exception that ended the background watch, if it ended."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            return self._task.exception()
        return None

    async def wait_for(self, predicate: Callable[[Seen], bool], *, timeout_s: float, what: str) -> Seen:
        """The first recorded event matching `predicate` (waiting for it). Raises TimeoutError naming `what`."""
        deadline = time.monotonic() + timeout_s
        checked = 0
        while True:
            for seen in self.events[checked:]:
                if predicate(seen):
                    return seen
            checked = len(self.events)
            err = self.failed()
            if err is not None:
                raise RuntimeError(f"watch {self.path} ended while waiting for {what}: {err!r}") from err
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} within {timeout_s:.0f} s (watch {self.path})")
            await asyncio.sleep(0.02)


async def ensure_topics(bootstrap: str, topics: Iterable[str], *, partitions: int = 6) -> list[str]:
    """Create the missing `topics` with ``message.timestamp.type=LogAppendTime``; returns those created.

    Existing topics are left as they are (their timestamp type may be CreateTime: see :func:`timestamp_types`).
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in topics if t not in existing]
        if missing:
            await admin.create_topics(
                [NewTopic(t, partitions, 1, topic_configs={"message.timestamp.type": "LogAppendTime"}) for t in missing]
            )
        return missing
    finally:
        await admin.close()


async def timestamp_types(bootstrap: str, topics: Iterable[str]) -> dict[str, str]:
    """topic → its ``message.timestamp.type`` (LogAppendTime or CreateTime)."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    out: dict[str, str] = {}
    try:
        names = list(topics)
        answers = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in names])
        for answer in answers:
            for resource in answer.resources:
                topic = resource[3]
                for entry in resource[4]:
                    if entry[0] == "message.timestamp.type":
                        out[str(topic)] = str(entry[1])
    finally:
        await admin.close()
    return out


def pct(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values` by the nearest-rank method (no interpolation)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), int(q * len(ordered) + 0.999999)))
    return ordered[rank - 1]


class TimedRest(Rest):
    """The testbed's admin client that also notes when each write was sent and when it returned: ``writes``
    holds ``(method, path, sent, returned)`` as ``time.time()`` values; fault times are read from it."""

    def __init__(self, base: str, token: str, ca_file: Any) -> None:
        super().__init__(base, token, ca_file)
        self.writes: list[tuple[str, str, float, float]] = []

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        sent = time.time()
        out = super().request(method, path, body, content_type=content_type)
        self.writes.append((method, path, sent, time.time()))
        return out

    def last_write(self, fragment: str, *, sent: bool = False) -> float:
        """When the last write whose path contains `fragment` returned (or, with `sent`, was sent).

        The send time is the conservative fault time under load: a starved client may read the answer only
        after a watcher has already reacted to the write. Raises LookupError if there is no such write.
        """
        for _method, path, at_sent, at_returned in reversed(self.writes):
            if fragment in path:
                return at_sent if sent else at_returned
        raise LookupError(f"no write to a path containing {fragment!r}")

    @classmethod
    def of(cls, testbed: Testbed) -> TimedRest:
        return cls(testbed.apiserver_url, testbed.token, testbed.ca_file)
