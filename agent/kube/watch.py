"""The generic list+watch engine, in three layers (see STYLE.md §2).

1. :meth:`Watcher.run` (forever): calls layer 2 until the stop event, with jittered exponential backoff
   on errors, ``Retry-After`` honoured, and an iteration limit for tests.
2. :meth:`Watcher.list_then_watch`: paginated list (``limit``/``continue``) → diff against the cache →
   changes → a LISTED marker → watch from the list's resourceVersion, re-watching from the last seen
   resourceVersion when a stream ends. 410 Gone (also an expired ``continue`` token) goes back to layer 1,
   which re-lists; deletions are computed only after the whole list was read.
3. :meth:`Watcher.watch_once`: one watch request with ``allowWatchBookmarks`` and server-side
   ``timeoutSeconds``, and an inactivity deadline pushed forward by every event, bookmarks included. It gives the
   event loop a turn every :data:`LINES_PER_TURN` lines: a burst (aiohttp hands over everything buffered at once,
   megabytes of pod events after a slow moment) never holds back a fault read by another watch for longer than
   those lines take.

The engine never builds the client's model classes: list pages and watch lines are parsed with orjson and
handed to a per-resource converter that returns a slim record or a :class:`~agent.core.faults.Rejection`. A
resource with a typed decoder (:class:`~agent.kube.changes.TypedLines`; pods: agent.sources.pods.PodLines) has its
watch lines read by it first, only the fields its converter reads; a line it declines is parsed whole as above.
The engine reads the cache (a mapping key → record) only to compute changes; the sink it calls owns all
writes, so the cluster state and its indexes change in exactly one place.
The wire format is the Kubernetes API's: ``{"type": ..., "object": ...}`` per line
(``k8s.io/apimachinery/pkg/apis/meta/v1.WatchEvent``) and a ``List`` with ``metadata.continue``.

What is watched and the changes handed on are in agent.kube.changes, the counters in agent.kube.watch_observers;
their names are importable from here too, where the engine's users have always imported them.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime
from typing import Any, Generic

import orjson
import structlog

from agent.core.faults import ObjectRef, Rejection
from agent.kube.changes import (
    Change,
    ChangeType,
    HasVersion,
    ListPage,
    R,
    Resource,
    Transport,
    TypedLine,
    TypedLines,
    diff_relist,
    same_write,
)
from agent.kube.errors import KubeError, ResourceGone, StreamCorrupt, WatchSilent, api_error
from agent.kube.watch_observers import CountingObserver, NullObserver, WatchObserver

__all__ = [
    "Change",
    "ChangeType",
    "CountingObserver",
    "HasVersion",
    "ListPage",
    "NullObserver",
    "Resource",
    "Transport",
    "TypedLine",
    "TypedLines",
    "WatchObserver",
    "Watcher",
    "backoff_delay",
    "diff_relist",
    "same_write",
]

log = structlog.get_logger("agent.kube.watch")

_OBJECT_EVENTS = frozenset(("ADDED", "MODIFIED", "DELETED"))
"""The watch event types that carry an object of the collection (BOOKMARK and ERROR do not)."""
_NO_METADATA: dict[str, Any] = {}
"""Read in place of an object's metadata that is not an object (never written)."""

LINES_PER_TURN = 32
"""Watch lines applied between two turns of the event loop (:meth:`Watcher.watch_once`). A pod event costs
~15-60 µs to apply (bench/RESULTS.md, row ``issue 39 ingest floor``), so a turn takes ~0.5-2 ms; without the turns
a burst of pod events held the loop for up to 54 ms in a bench_e2e run (30 jobs, 120 faults, 2026-12-06), while a
device-plugin write waited behind it. The turn itself (``asyncio.sleep(0)``) costs a few µs."""


def backoff_delay(attempt: int, *, initial_s: float, max_s: float, jitter: float) -> float:
    """Seconds to wait before retry number `attempt` (0-based): "equal jitter" exponential backoff.

    The ceiling is ``min(max_s, initial_s * 2**attempt)``; the delay is half of it plus ``jitter`` (in
    [0, 1]) times the other half, so concurrent watchers spread out but never retry at once.
    """
    ceiling = min(max_s, initial_s * (2.0 ** min(attempt, 60)))
    return ceiling / 2.0 + ceiling / 2.0 * min(1.0, max(0.0, jitter))


async def _until_stopped(coro: Coroutine[Any, Any, None], stop: asyncio.Event) -> None:
    """Run `coro` until it ends or `stop` is set (then cancel it). Re-raises the coroutine's error."""
    task = asyncio.ensure_future(coro)
    waiter = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, waiter), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif not task.cancelled():
            # retrieved even when this wait is itself being cancelled (shutdown as the request fails): the
            # error then goes nowhere instead of into asyncio's "Task exception was never retrieved"
            task.exception()
    if not task.cancelled():
        task.result()


def _meta_ref(kind: str, obj: Any) -> tuple[str, str, ObjectRef | None]:
    """(namespace, name, None) from an object's metadata, or ("", "", a ref for the rejection)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return "", "", ObjectRef(kind, "", "<unknown>")
    name = meta.get("name")
    ns = meta.get("namespace", "")
    if not isinstance(name, str) or not name or not isinstance(ns, str):
        return "", "", ObjectRef(kind, ns if isinstance(ns, str) else "", "<unknown>")
    return ns, name, None


class Watcher(Generic[R]):
    """List+watch one :class:`Resource` into a cache through a sink.

    Args:
        transport: the apiserver (or a fake in unit tests and benchmarks).
        resource: what to watch.
        convert: raw object dict → record, or a Rejection naming why it was skipped. Must not raise.
        cache: the store this watcher's source writes (read-only here; the sink writes it).
        sink: receives every Change, synchronously, in order; it must update `cache`.
        observer: counters.
        signal_time: a record's own timestamp for the lag counter (None when it has none).
        page_size, watch_timeout_s, inactivity_s, backoff_initial_s, backoff_max_s: see KubeSettings.
        rng: jitter source (tests pass a seeded Random).
        tap: called with ``(type, raw object)`` for every object the apiserver sent that this watcher keeps
            (each list item as ``ADDED``, then ``("LISTED", {})``; watch events ``ADDED``/``MODIFIED``/``DELETED``
            as sent, bookmarks not): the recording hook (agent.kube.record). Must not block or raise.
        unchanged: ``(raw object, cached record)`` → True when the object would convert to the cached record
            (a write that changed nothing the converter reads, e.g. a pod's managedFields or resourceVersion only):
            the watch event is then counted and tapped but neither converted nor passed to the sink, and the cache
            keeps the record (with the resourceVersion of the write it was converted from). Must not raise.
        typed: the resource's typed decoder of watch lines (pods: agent.sources.pods.PodLines), tried first on every
            line: an ADDED or MODIFIED event it reads is applied from what it decoded (its own same-write check and
            conversion, with the same counts, tap, changes and rejections as the whole-object way); anything it
            declines goes the whole-object way, so a malformed line fails as it always did. None: every line is
            parsed whole.
    """

    def __init__(
        self,
        transport: Transport,
        resource: Resource,
        convert: Callable[[dict[str, Any]], R | Rejection],
        cache: Mapping[str, R],
        sink: Callable[[Change[R]], None],
        *,
        observer: WatchObserver | None = None,
        signal_time: Callable[[R], datetime | None] | None = None,
        page_size: int = 500,
        watch_timeout_s: int = 300,
        inactivity_s: float = 90.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        rng: random.Random | None = None,
        tap: Callable[[str, dict[str, Any]], None] | None = None,
        unchanged: Callable[[dict[str, Any], R], bool] | None = None,
        typed: TypedLines[R] | None = None,
    ) -> None:
        self.transport = transport
        self.resource = resource
        self.convert = convert
        self.cache = cache
        self.sink = sink
        self.observer: WatchObserver = observer or NullObserver()
        self.signal_time = signal_time
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.inactivity_s = inactivity_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.rng = rng or random.Random()
        self.tap = tap
        self.unchanged = unchanged
        self.typed = typed
        self.resource_version = ""  # last seen; "" = must list
        self.listed_once = False
        self._logged: set[tuple[str, str, str, str]] = set()
        self._progress = 0  # bumped by every list and every event: a run that made progress resets backoff
        self._lost = False  # the last list or watch failed without an answer: the next one that works is RESUMED
        ns = resource.namespace
        self._scope: Callable[[str], bool] = (lambda k: k.startswith(ns + "/")) if ns else (lambda k: True)
        self._prefix = resource.name_prefix

    # ---- layer 1 ---------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, *, max_iterations: int | None = None) -> None:
        """Keep the cache in sync until `stop` is set (or `max_iterations` calls of layer 2 ran).

        Never raises KubeError: each is logged, counted as a watch restart and retried after a jittered
        backoff (at least ``Retry-After``). 410 Gone re-lists at once. CancelledError propagates.
        """
        attempt = 0
        iterations = 0
        while not stop.is_set():
            if max_iterations is not None and iterations >= max_iterations:
                return
            iterations += 1
            progress_before = self._progress
            try:
                await _until_stopped(self.list_then_watch(), stop)
                continue  # stopped
            except ResourceGone as e:
                self.resource_version = ""
                self.observer.watch_restart(self.resource.source, "gone")
                log.info("watch.gone", watcher=self.resource.watcher_id, detail=str(e))
                attempt = 0
                continue
            except WatchSilent as e:
                self.observer.watch_restart(self.resource.source, "inactivity")
                log.warning("watch.silent", watcher=self.resource.watcher_id, detail=str(e))
                error: KubeError = e
                self._lost = True
            except KubeError as e:
                self.observer.watch_restart(self.resource.source, "error")
                error = e
                self._lost = self._lost or e.status is None or e.status >= 500
            if self._progress != progress_before:
                attempt = 0
            delay = backoff_delay(
                attempt, initial_s=self.backoff_initial_s, max_s=self.backoff_max_s, jitter=self.rng.random()
            )
            if not error.retriable:
                delay = max(delay, self.backoff_max_s)
            if error.retry_after is not None:
                delay = max(delay, min(error.retry_after, 10 * self.backoff_max_s))
            attempt += 1
            (log.error if not error.retriable else log.warning)(
                "watch.error",
                watcher=self.resource.watcher_id,
                error=type(error).__name__,
                status=error.status,
                detail=str(error),
                retry_in_s=round(delay, 3),
            )
            try:
                async with asyncio.timeout(delay):
                    await stop.wait()
            except TimeoutError:
                pass

    # ---- layer 2 ---------------------------------------------------------------------------------------

    async def list_then_watch(self) -> None:
        """List (when no resourceVersion is known) then watch, re-watching when a stream ends; never returns.

        Raises:
            ResourceGone: the resourceVersion expired (the caller re-lists).
            KubeError: any other failure (connection, HTTP status, silent or corrupt stream).
        """
        if not self.resource_version:
            await self.relist()
        while True:
            await self.watch_once()
            self.observer.watch_restart(self.resource.source, "timeout")

    async def relist(self) -> None:
        """Read the whole collection page by page, emit the diff against the cache, then LISTED.

        An expired ``continue`` token (410 during paging) restarts the list from the first page.
        Deletions are computed only once the last page has been read.

        Raises:
            KubeError: the list failed (the cache is left untouched by the failed attempt's deletions).
        """
        self.observer.relist(self.resource.source)
        started = time.monotonic()
        for _ in range(3):
            try:
                listed, rv = await self._read_all_pages()
                break
            except ResourceGone as e:
                log.info("list.continue-expired", watcher=self.resource.watcher_id, detail=str(e))
        else:
            raise ResourceGone("list: continue token expired three times in a row", status=410)
        now = time.time()
        source = self.resource.source
        self._resumed(now)
        for type_, key, new, old in diff_relist(self.cache, listed, self._scope):
            self.sink(Change(type_, source, key, new, old, True, now))
        self.resource_version = rv
        self._progress += 1
        if self.tap is not None:
            self.tap("LISTED", {})
        first = not self.listed_once
        self.listed_once = True
        self.sink(Change(ChangeType.LISTED, source, "", None, None, True, now, self.resource.watcher_id))
        if first:
            self.observer.cache_synced(source, True)
        log.info(
            "list.done",
            watcher=self.resource.watcher_id,
            objects=len(listed),
            resource_version=rv,
            seconds=round(time.monotonic() - started, 3),
        )

    async def _read_all_pages(self) -> tuple[dict[str, R | None], str]:
        listed: dict[str, R | None] = {}
        token = ""
        while True:
            page = await self.transport.list_page(self.resource, limit=self.page_size, continue_token=token)
            for obj in page.items:
                self._list_item(obj, listed)
            token = page.continue_token
            if not token:
                return listed, page.resource_version

    def _list_item(self, obj: dict[str, Any], listed: dict[str, R | None]) -> None:
        ns, name, bad = _meta_ref(self.resource.kind, obj)
        if bad is not None:
            self._reject(Rejection(bad, "missing-metadata", "object without metadata.name"), "")
            return
        if self._prefix and not name.startswith(self._prefix):
            return
        if self.tap is not None:
            self.tap("ADDED", obj)
        key = f"{ns}/{name}" if ns else name
        old = self.cache.get(key)
        if old is not None and (same_write(obj, old) or (self.unchanged is not None and self.unchanged(obj, old))):
            listed[key] = old  # the cached record is this object's: not converted again
            return
        rec = self.convert(obj)
        if isinstance(rec, Rejection):
            self._reject(rec, key, _resource_version(obj))
            listed[key] = None
        else:
            listed[key] = rec

    # ---- layer 3 ---------------------------------------------------------------------------------------

    async def watch_once(self) -> None:
        """One watch request from the current resourceVersion, applying each event as it arrives.

        Returns when the server ends the stream (its timeoutSeconds). The inactivity deadline is pushed
        forward by every event, bookmarks included.

        Raises:
            WatchSilent: nothing arrived within `inactivity_s`.
            ResourceGone: an ERROR event with code 410, or 410 on the request.
            StreamCorrupt: a line that is not a JSON watch event.
            KubeError: connection or HTTP errors from the transport.
        """
        loop = asyncio.get_running_loop()
        inactivity = self.inactivity_s
        try:
            async with asyncio.timeout_at(loop.time() + inactivity) as deadline:
                async with self.transport.watch(
                    self.resource, resource_version=self.resource_version, timeout_s=self.watch_timeout_s
                ) as chunks:
                    self._resumed(time.time())
                    buf = b""
                    on_line = self.on_line
                    budget = LINES_PER_TURN
                    async for chunk in chunks:
                        deadline.reschedule(loop.time() + inactivity)
                        end = chunk.find(b"\n")
                        if end < 0:
                            buf += chunk
                            continue
                        start = 0
                        if buf:
                            on_line(buf + chunk[:end])  # copy the carried part only, not the whole chunk
                            start = end + 1
                            end = chunk.find(b"\n", start)
                        # the lines inside the chunk are parsed in place (memoryview slices: no copy of each line)
                        view = memoryview(chunk)
                        while end >= 0:
                            if end > start:
                                on_line(view[start:end])
                                budget -= 1
                                if not budget:  # a turn for the rest of the loop (module docstring)
                                    budget = LINES_PER_TURN
                                    await asyncio.sleep(0)
                            start = end + 1
                            end = chunk.find(b"\n", start)
                        buf = chunk[start:]
                    if buf.strip():
                        self.on_line(buf)
        except TimeoutError as e:
            raise WatchSilent(
                f"{self.resource.watcher_id}: no event or bookmark for {inactivity:g} s", retriable=True
            ) from e

    def _resumed(self, now: float) -> None:
        """The apiserver answered a list or watch again after the watcher lost it: emit RESUMED (once)."""
        if self._lost:
            self._lost = False
            log.info("watch.resumed", watcher=self.resource.watcher_id)
            self.sink(
                Change(ChangeType.RESUMED, self.resource.source, "", None, None, False, now, self.resource.watcher_id)
            )

    def on_line(self, line: bytes | memoryview) -> None:
        """Apply one watch event line (JSON ``{"type", "object"}``, bytes or a view into a chunk) to the cache
        through the sink.

        Raises:
            StreamCorrupt: not JSON or not a watch event.
            ResourceGone / KubeApiError: an ERROR event (a ``Status`` object).
        """
        if self.typed is not None and self._typed_line(self.typed, line):
            return
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise StreamCorrupt(f"{self.resource.watcher_id}: watch line is not JSON: {e}") from e
        if not isinstance(event, dict):
            raise StreamCorrupt(f"{self.resource.watcher_id}: watch line is not an object")
        type_ = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise StreamCorrupt(f"{self.resource.watcher_id}: watch event {type_!r} without an object")
        self._progress += 1
        source = self.resource.source
        if type_ == "ERROR":
            code = obj.get("code")
            raise api_error(
                code if isinstance(code, int) else 500,
                f"{self.resource.watcher_id}: watch ERROR event: {obj.get('reason')}: {obj.get('message')}",
            )
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = _NO_METADATA  # rejected below (no name)
        rv = meta.get("resourceVersion")
        if isinstance(rv, str) and rv:
            self.resource_version = rv
        if type_ == "BOOKMARK":
            self.observer.watch_event(source, "BOOKMARK")
            return
        if type_ not in _OBJECT_EVENTS:
            raise StreamCorrupt(f"{self.resource.watcher_id}: unknown watch event type {type_!r}")
        self.observer.watch_event(source, type_)
        # the metadata read once for the resourceVersion, the key and the same-write check (_meta_ref's rules)
        ns = meta.get("namespace", "")
        name = meta.get("name")
        if not isinstance(name, str) or not name or not isinstance(ns, str):
            _, _, bad = _meta_ref(self.resource.kind, obj)
            assert bad is not None  # the same rules: no name, or a namespace that is not text
            self._reject(Rejection(bad, "missing-metadata", "object without metadata.name"), "")
            return
        if self._prefix and not name.startswith(self._prefix):
            return
        if self.tap is not None:
            self.tap(type_, obj)
        key = f"{ns}/{name}" if ns else name
        old = self.cache.get(key)
        if type_ == "DELETED":
            if old is not None:
                self.sink(Change(ChangeType.DELETED, source, key, None, old, False, time.time()))
            return
        if old is not None and (
            (rv == old.resource_version and meta.get("uid") == old.uid)  # same_write, on the metadata read above
            or (self.unchanged is not None and self.unchanged(obj, old))
        ):
            return  # the write the cache holds (replayed after a reconnect), or one that changed nothing it holds
        now = time.time()
        self._converted(source, key, self.convert(obj), old, now, rv if isinstance(rv, str) else "")

    def _typed_line(self, typed: TypedLines[R], line: bytes | memoryview) -> bool:
        """Apply one watch line through `typed` as :meth:`on_line` would apply it parsed whole; False (nothing done)
        when `typed` declines it. Everything that can decline (the decode, the conversion's decoding, the tap's whole
        object) runs before the first effect, so a declined line is applied once, the whole-object way."""
        t = typed.decode(line)
        if t is None:
            return False
        type_, ns, name, uid, rv, _ = t
        if not name:
            return False  # rejected the whole-object way (missing-metadata), with its log and count
        prefix = self._prefix
        kept = not prefix or name.startswith(prefix)
        key = f"{ns}/{name}" if ns else name
        old = self.cache.get(key) if kept else None
        rec: R | Rejection | None = None
        if kept and (old is None or not ((rv == old.resource_version and uid == old.uid) or typed.unchanged(t, old))):
            rec = typed.convert(t)
            if rec is None:
                return False
        tap = self.tap
        whole: Any = None
        if kept and tap is not None:
            try:
                whole = orjson.loads(line)
            except orjson.JSONDecodeError:
                return False
            whole = whole.get("object") if isinstance(whole, dict) else None
            if not isinstance(whole, dict):
                return False
        # the effects, in on_line's order
        self._progress += 1
        if rv:
            self.resource_version = rv
        source = self.resource.source
        self.observer.watch_event(source, type_)
        if not kept:
            return True
        if tap is not None:
            tap(type_, whole)
        if rec is not None:  # None: the write the cache holds, or one that changed nothing it holds
            self._converted(source, key, rec, old, time.time(), rv)
        return True

    def _converted(self, source: str, key: str, rec: R | Rejection, old: R | None, now: float, rv: str) -> None:
        """Hand on the conversion `rec` of a watch event's object at `key` (cached: `old`; resourceVersion `rv`)."""
        if isinstance(rec, Rejection):
            self._reject(rec, key, rv)
            return
        if old is None:
            self.sink(Change(ChangeType.ADDED, source, key, rec, None, False, now))
        elif old.uid != rec.uid:
            self.sink(Change(ChangeType.DELETED, source, key, None, old, False, now))
            self.sink(Change(ChangeType.ADDED, source, key, rec, None, False, now))
            old = None
        elif old.resource_version == rec.resource_version:
            return  # replayed after a reconnect: not a change
        else:
            self.sink(Change(ChangeType.MODIFIED, source, key, rec, old, False, now))
        st = self.signal_time
        if st is not None:
            t = st(rec)
            if t is not None and (old is None or st(old) != t):
                self.observer.detection_lag(now - t.timestamp(), source)

    def _reject(self, rejection: Rejection, key: str, resource_version: str = "") -> None:
        """Count every rejection; log it once per write: the mark holds the object's resourceVersion, so a relist
        of the same write is quiet but a new bad write is logged even when its rejection reads the same."""
        self.observer.input_rejected(rejection.source.kind, rejection.reason)
        mark = (key or str(rejection.source), rejection.reason, rejection.detail, resource_version)
        if mark in self._logged:
            return
        if len(self._logged) > 10000:
            self._logged.clear()
        self._logged.add(mark)
        log.warning(
            "input.rejected",
            watcher=self.resource.watcher_id,
            object=str(rejection.source),
            reason=rejection.reason,
            detail=rejection.detail,
        )


def _resource_version(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return rv if isinstance(rv, str) else ""
