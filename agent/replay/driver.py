"""The replay: recorded (or scenario) changes through the agent's own watchers, detect pipeline, state cache and
recovery engine, on a virtual clock, with recording ports instead of a cluster and Kafka.

Wiring (the same parts as agent.runtime.app's ``run_agent``, no copy of them):
:func:`agent.sources.watchers.build_watchers` for the configured sources, each record handed to its watcher as the
watch line it was (:meth:`agent.kube.watch.Watcher.on_line`) and a LISTED record answered by the watcher's own re-list
(:meth:`~agent.kube.watch.Watcher.relist`, the items being the ADDED records since the watcher's last other
record), so the state cache (agent.sources.state) and the detectors (agent.engine.detecting) see what the live
agent saw; :func:`agent.engine.loops.recovery_loop` and :func:`~agent.engine.loops.tick_loop` drive
:class:`agent.engine.recovery.RecoveryEngine` as in the agent, on a :class:`~agent.replay.vloop.VirtualLoop`.

Time: virtual second 0 is the first record's ``t``; the loop sleeps until each record's ``t`` (the engine's ticks,
deferred restarts and follow-ups run in between, at their virtual times) and stops `tail_s` after the last one.

Readiness: a watcher is listed at its LISTED record; one the input never lists (a source the recording agent did
not watch) is listed with what it has seen `list_window_s` after the start, as an empty list when nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from itertools import islice
from typing import Any

import orjson
import structlog

from agent.core.cluster import JobRecord
from agent.core.detect.nesting import MAX_NESTING, too_deep, too_deep_message
from agent.core.faults import Fault, FaultCleared
from agent.core.policy import Decision
from agent.core.quarantine import RELEASE_ANNOTATION
from agent.engine.detecting import DetectPipeline
from agent.engine.loops import recovery_loop, tick_loop
from agent.engine.recovery import RecoveryEngine
from agent.kube.errors import KubeError
from agent.kube.record import record_resource
from agent.kube.watch import HasVersion, ListPage, Resource, Watcher, same_write
from agent.replay.ports import DECISION, AgentOwned, Collector, Output, RecordingSink, RecordingWriter
from agent.replay.records import ALL_SOURCES, InputProblem, Problems, Record, check_record
from agent.replay.vloop import VirtualClock, VirtualLoop, run_virtual
from agent.settings import Settings
from agent.sources.state import ClusterState
from agent.sources.watchers import build_watchers

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class ReplayResult:
    """What a replay did besides its outputs.

    Attributes:
        problems: the input records skipped (each ``<file>:<line>: <what>``).
        counts: outputs by kind (``decision``, ``write``, ``event``).
        records: records applied; ignored: records no watcher of this configuration takes (another namespace,
            a filtered name or label).
        start, end: the virtual times of the first record and of the replay's end (None: no record).
        decisions: every decision as ``(virtual time, fault, job, decision)``, in order.
    """

    problems: list[InputProblem] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    records: int = 0
    ignored: int = 0
    start: datetime | None = None
    end: datetime | None = None
    decisions: list[tuple[datetime, Fault, JobRecord, Decision]] = field(default_factory=list)


class _ListTransport:
    """The watchers' transport: a re-list returns the items the replay set for that watcher, `limit` a page (made
    only as the page is asked for, so a list of 100,000 objects is never all in memory as dicts); no watch."""

    def __init__(self) -> None:
        self.items: dict[str, Iterator[dict[str, Any]]] = {}

    async def list_page(self, resource: Resource, *, limit: int, continue_token: str) -> ListPage:
        items = self.items.get(resource.watcher_id)
        size = max(limit, 1)
        page = list(islice(items, size)) if items is not None else []
        if len(page) < size:
            self.items.pop(resource.watcher_id, None)
            return ListPage(page, "", "")
        return ListPage(page, "", "more")

    @asynccontextmanager
    async def watch(self, resource: Resource, *, resource_version: str, timeout_s: int) -> AsyncIterator[Any]:
        if resource.source:  # always: a replay never watches (only its re-lists read this transport)
            raise KubeError("a replay has no apiserver to watch")
        yield iter(())


def selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    """Whether `labels` satisfy a Kubernetes label selector (``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``,
    ``k in (a,b)``, ``k notin (a,b)``, comma-separated). "" matches everything. Pure."""
    for op, key, values in _selector_terms(selector):
        has = labels.get(key)
        if op == "in":
            if has is None or has not in values:
                return False
        elif op == "notin" or op == "!=":
            if has is not None and has in values:
                return False
        elif op == "=":
            if has is None or has not in values:
                return False
        elif op == "!":
            if key in labels:
                return False
        elif key not in labels:  # "exists"
            return False
    return True


@lru_cache(maxsize=256)
def _selector_terms(selector: str) -> tuple[tuple[str, str, frozenset[str]], ...]:
    """`selector` parsed once: ``(op, key, values)`` per term, op one of ``in``, ``notin``, ``=``, ``!=``, ``!``,
    ``exists`` (``=`` and ``!=`` with their one value)."""
    raws: list[str] = []
    depth, cur = 0, ""
    for ch in selector:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            raws.append(cur)
            cur = ""
        else:
            cur += ch
    raws.append(cur)
    terms: list[tuple[str, str, frozenset[str]]] = []
    for raw in raws:
        term = raw.strip()
        if not term:
            continue
        for op in (" notin ", " in "):
            if op in term:
                key, _, values = term.partition(op)
                wanted = frozenset(v.strip() for v in values.strip().strip("()").split(","))
                terms.append((op.strip(), key.strip(), wanted))
                break
        else:
            if "!=" in term:
                key, _, value = term.partition("!=")
                terms.append(("!=", key.strip(), frozenset((value.strip(),))))
            elif "=" in term:
                key, _, value = term.replace("==", "=").partition("=")
                terms.append(("=", key.strip(), frozenset((value.strip(),))))
            elif term.startswith("!"):
                terms.append(("!", term[1:].strip(), frozenset()))
            else:
                terms.append(("exists", term, frozenset()))
    return tuple(terms)


def takes(resource: Resource, record_resource_name: str, obj: Mapping[str, Any]) -> bool:
    """Whether the watcher of `resource` would have received `obj` (a record of `record_resource_name`): same
    collection, its namespace, name prefix, field-selected name and labels. Pure."""
    if record_resource(resource) != record_resource_name:
        return False
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    name = str(meta.get("name", ""))
    if resource.namespace and meta.get("namespace", "") != resource.namespace:
        return False
    if resource.name_prefix and not name.startswith(resource.name_prefix):
        return False
    if resource.field_selector.startswith("metadata.name=") and name != resource.field_selector.split("=", 1)[1]:
        return False
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    return selector_matches(resource.label_selector, labels or {})


def _listed_by(source: str, resource: Resource) -> bool:
    """Whether a LISTED record of the recording's watcher `source` ends the list of the watcher of `resource`."""
    if source == ALL_SOURCES or source == resource.watcher_id:
        return True
    name, _, ns = source.partition("@")
    return name == resource.source and ns in ("*", resource.namespace or "*")


def run_replay(
    records: Iterable[Record],
    settings: Settings,
    *,
    on_output: Callable[[Output], None],
    on_problem: Callable[[InputProblem], None] | None = None,
    tick_s: float = 1.0,
    tail_s: float = 0.0,
    list_window_s: float = 30.0,
    inject: Iterable[Record] = (),
    on_decision: Callable[[Output], None] | None = None,
) -> ReplayResult:
    """Replay `records` (time order; Unix-ms ``t``) under `settings`; every output goes to `on_output` as it is
    final (time order; see :class:`~agent.replay.ports.Collector`). Synchronous: runs its own virtual loop.

    Args:
        records: the input, read lazily (a generator of millions is fine: nothing is kept per record).
        settings: the configuration replayed (``kube.*`` picks the watched sources, ``policy.*`` and ``detect.*``
            decide; ``kafka``, ``leader`` and ``server`` are not used).
        on_problem: told of each skipped record (also listed in the result).
        tick_s: the engine's tick period, virtual seconds (the agent's is 1 s).
        tail_s: virtual seconds replayed after the last record (deadlines, follow-ups).
        list_window_s: see the module docstring (readiness).
        inject: records applied at the first record's time before it (e.g. a fault-level override ConfigMap;
            their ``t`` is ignored).
        on_decision: told of each decision the moment it is made (the output `on_output` gets later: the
            collector hands a millisecond's outputs on only once a later millisecond has one), for timing.

    Returns:
        the :class:`ReplayResult` (problems, counts, the decisions).

    Raises:
        agent.replay.vloop.ReplayStalled: a bug (the loop would wait forever).
    """
    result = ReplayResult()
    problems = Problems(result.problems, on_problem)
    done: ReplayResult = run_virtual(_replay(iter(records), settings, on_output, problems, result, tick_s, tail_s,
                               list_window_s, list(inject), on_decision))  # fmt: skip
    return done


def replay(records: Iterable[Record], settings: Settings, **kwargs: Any) -> tuple[list[Output], ReplayResult]:
    """:func:`run_replay` collecting the outputs in a list: ``(outputs, result)``."""
    outputs: list[Output] = []
    result = run_replay(records, settings, on_output=outputs.append, **kwargs)
    return outputs, result


def _first_valid(records: Iterator[Record], problems: Problems) -> Record | None:
    for rec in records:
        problem = check_record(rec, None)
        if problem is None:
            return rec
        problems.add(rec.where, problem)
    return None


async def _replay(
    records: Iterator[Record],
    settings: Settings,
    on_output: Callable[[Output], None],
    problems: Problems,
    result: ReplayResult,
    tick_s: float,
    tail_s: float,
    list_window_s: float,
    inject: list[Record],
    on_decision: Callable[[Output], None] | None = None,
) -> ReplayResult:
    first = _first_valid(records, problems)
    if first is None:
        result.counts = {}
        return result
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualLoop)
    start_ms = first.t_ms
    clock = VirtualClock(loop, datetime.fromtimestamp(start_ms / 1000.0, UTC))
    result.start = clock.now()
    collector = Collector(on_output)
    state = ClusterState()
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    pipeline = DetectPipeline(settings, state, queue, clock=clock)
    transport = _ListTransport()
    watchers = build_watchers(
        settings.kube,
        transport,
        state,
        sink=pipeline,
        node_annotation_keys=(settings.policy.taint_key, RELEASE_ANNOTATION),
    )
    owned = AgentOwned(settings.policy.taint_key, echo=watchers[0].sink if watchers else None)
    writer = RecordingWriter(settings, state, clock, collector, owned)

    def decided(fault: Fault, job: JobRecord, decision: Decision) -> None:
        now = clock.now()
        result.decisions.append((now, fault, job, decision))
        out = Output(now, DECISION, f"{job.namespace}/{job.name}", decision.action.value, decision.reason)
        collector.add(out)
        if on_decision is not None:
            on_decision(out)

    engine = RecoveryEngine(
        settings, state, writer, events=RecordingSink(clock, collector), clock=clock,
        active_faults=pipeline.active_faults, on_decision=decided,
    )  # fmt: skip
    engine.ctx.checkpoint_of = pipeline.hang.checkpoint_reading  # checkpoint-aware graceful waits, as the agent
    # as agent.runtime.app wires them: the job.hung and recovery.resumed events read what the hang detector found
    engine.ctx.hang_of = pipeline.hang_of
    engine.ctx.take_resumed = pipeline.take_resumed
    stop = asyncio.Event()
    loops = [
        asyncio.create_task(recovery_loop(engine, state, queue, stop, pipeline.report_depth), name="recovery"),
        asyncio.create_task(tick_loop(engine, pipeline, state, stop, tick_s), name="tick"),
    ]
    feeder = _Feeder(watchers, transport, owned, problems, result, inject_faultconfig=bool(inject))
    window_at = list_window_s
    window_done = False
    last_t = start_ms
    for rec in inject:
        await feeder.apply(rec)
    pending: Record | None = first
    encoded: bytes | str | None = None  # the pending record's object, encoded (see _encoded)
    while pending is not None:
        rec = pending
        at = (rec.t_ms - start_ms) / 1000.0
        if not window_done and at > window_at:
            await _sleep_until(loop, window_at)
            await feeder.list_unlisted()
            window_done = True
        await _sleep_until(loop, at)
        await feeder.apply(rec, encoded if isinstance(encoded, bytes) else None)
        last_t = rec.t_ms
        pending = encoded = None
        for nxt in records:
            problem = check_record(nxt, last_t, nesting=False)
            if problem is None and nxt.type != "LISTED":
                encoded = _encoded(nxt)
                problem = encoded if isinstance(encoded, str) else None
            if problem is None:
                pending = nxt
                break
            problems.add(nxt.where, problem)
    end = (last_t - start_ms) / 1000.0 + tail_s
    if not window_done and end >= window_at:
        await _sleep_until(loop, window_at)
        await feeder.list_unlisted()
    elif not window_done:
        await feeder.list_unlisted()  # a short input: no watcher may stay unlisted for ever
    await _sleep_until(loop, end)
    await asyncio.sleep(0.0005)  # everything due at `end` runs first (time moves only when nothing is ready)
    stop.set()
    await asyncio.gather(*loops)
    engine.tasks.cancel_leader_only()
    await engine.idle()
    collector.flush()
    result.end = clock.now()
    result.counts = dict(collector.counts)
    return result


_SAME_INSTANT_S = 1e-6
"""Virtual times closer than this are one instant: records due at one ``t`` are fed together, whatever float
rounding the engine's own timers (follow-up polls, ticks) left in the loop's clock; no tick runs between them."""


async def _sleep_until(loop: asyncio.AbstractEventLoop, at: float) -> None:
    delay = at - loop.time()
    if delay > _SAME_INSTANT_S:
        await asyncio.sleep(delay)


def _encoded(rec: Record) -> bytes | str:
    """`rec`'s object as JSON (orjson's bytes), or why it cannot be replayed (a str: nested deeper than the
    engine's readers and the replay's encoder can go, agent.core.detect.nesting). A document with no more ``{``
    and ``[`` characters than the limit (strings' included) cannot nest deeper, so only a larger one is walked:
    the same verdict as :func:`~agent.replay.records.check_record`'s, for the cost of counting two bytes."""
    try:
        encoded = orjson.dumps(rec.object)
    except orjson.JSONEncodeError:  # orjson's own depth limit, among others
        if too_deep(rec.object):
            return f"the object is {too_deep_message()}"
        raise
    if encoded.count(b"{") + encoded.count(b"[") > MAX_NESTING and too_deep(rec.object):
        return f"the object is {too_deep_message()}"
    return encoded


REWRITTEN = frozenset(("nodes", "jobrecords"))
"""The sources whose cached records the replay itself rewrites under a new resourceVersion (the agent's writes:
quarantine taints and holds on nodes, :class:`~agent.replay.ports.AgentOwned`; its job records,
:class:`~agent.replay.ports.RecordingWriter`). A held item of another source whose record the cache held at once
keeps no line (:class:`_Held`)."""


@dataclass(frozen=True, slots=True)
class _Held:
    """An ADDED record kept for the re-list its LISTED record asks for, compactly: the watch line it was fed as
    (JSON bytes, a fifth of the parsed dict's memory) and, when the watcher's cache held the record of this very
    write right after it (``same_write``: its UID and resourceVersion), that record.

    The line is None when the record is held and the replay never rewrites its source's records under another
    resourceVersion (not :data:`REWRITTEN`): then the cache holds a record of this write (the UID and resourceVersion
    of `record`) at the re-list, whatever the state made of it in between (a job's PodGroup settings, an AscendJob's
    restart counter: the same write), since any other record of the watcher ends the run (a MODIFIED or DELETED) or
    replaces this item (an ADDED). So the re-list reads only the item's metadata, as for a record the cache still
    holds: the line is never parsed (at 100,000 nodes the held device ConfigMaps' and pods' lines were ~90 and
    ~115 MB)."""

    key: str  # the watcher's cache key (``namespace/name``, or the name of a cluster-scoped object)
    line: bytes | None  # ``{"type": "ADDED", "object": …}`` copied to its length (orjson keeps a larger buffer)
    record: HasVersion | None  # the cached record of this write


def _list_items(w: Watcher[Any], held: list[_Held]) -> Iterator[dict[str, Any]]:
    """The re-list items of `held`, one at a time. An item whose write the cache still holds (a record with its UID
    and resourceVersion: no change came between) is only its metadata's name, namespace, UID and resourceVersion,
    which is all the re-list reads of it (``same_write`` with the cached record: kept, not converted again, as the
    whole object would be); any other is the object parsed back from its line.

    Raises:
        AssertionError: an item without a line whose write the cache no longer holds (a bug: see :class:`_Held`).
    """
    for h in held:
        rec = h.record
        cached = w.cache.get(h.key) if rec is not None and w.tap is None else None
        if (
            rec is not None
            and cached is not None
            and (cached is rec or (cached.uid == rec.uid and cached.resource_version == rec.resource_version))
        ):
            ns, _, name = h.key.rpartition("/")
            meta = {"name": name, "uid": cached.uid, "resourceVersion": cached.resource_version}
            if ns:
                meta["namespace"] = ns
            yield {"metadata": meta}
        else:
            assert h.line is not None, f"{w.resource.watcher_id}: {h.key}: held without its line, changed since"
            yield orjson.loads(h.line)["object"]


class _Feeder:
    """Hands records to the watchers that take them (see the module docstring)."""

    def __init__(
        self,
        watchers: list[Watcher[Any]],
        transport: _ListTransport,
        owned: AgentOwned,
        problems: Problems,
        result: ReplayResult,
        *,
        inject_faultconfig: bool,
    ) -> None:
        self.watchers = watchers
        self.transport = transport
        self.owned = owned
        self.problems = problems
        self.result = result
        # per watcher, the ADDED records since its last other record, by key (a re-list's items when a LISTED
        # record follows; any other record ends the run, so it stays short in a live stream; an initial list's
        # run holds the whole collection): see _Held
        self.runs: dict[str, dict[str, _Held]] = {w.resource.watcher_id: {} for w in watchers}
        self.listed: set[str] = set()
        # per record resource, its watchers with what `takes` reads of each, worked out once
        self.by_resource: dict[str, list[tuple[Watcher[Any], str, str, str | None, str]]] = {}
        for w in watchers:
            r = w.resource
            field_name = r.field_selector.split("=", 1)[1] if r.field_selector.startswith("metadata.name=") else None
            entry = (w, r.namespace or "", r.name_prefix or "", field_name, r.label_selector or "")
            self.by_resource.setdefault(record_resource(r), []).append(entry)
        self.inject_faultconfig = inject_faultconfig

    async def apply(self, rec: Record, encoded: bytes | None = None) -> None:
        """Apply one record (a LISTED one re-lists the watchers it ends); `encoded`: its object as JSON when the
        caller has it (:func:`_encoded`)."""
        if rec.type == "LISTED":
            for w in self.watchers:
                if rec.source is not None and _listed_by(rec.source, w.resource):
                    await self._relist(w)
            self.result.records += 1
            return
        obj = self.owned.rewrite(rec.resource, rec.object)
        targets = self._takers(rec.resource, obj)
        if self.inject_faultconfig and not rec.where.startswith("<inject>"):
            # the compared configuration's fault levels replace the recorded override ConfigMap
            targets = [w for w in targets if w.resource.source != "faultconfig"]
        if not targets:
            self.result.ignored += 1
            return
        if obj is rec.object and encoded is not None:  # as orjson.dumps({"type": …, "object": obj}) writes it
            line = b'{"type":"' + rec.type.encode() + b'","object":' + encoded + b"}"
        else:
            line = orjson.dumps({"type": rec.type, "object": obj})
        for w in targets:
            try:
                w.on_line(line)
            except KubeError as e:  # not a watch event the watcher takes (never from a checked record)
                self.problems.add(rec.where, str(e))
                continue
            run = self.runs[w.resource.watcher_id]
            if rec.type == "ADDED":
                meta = obj.get("metadata") or {}
                ns, name = meta.get("namespace", ""), meta.get("name", "")
                key = f"{ns}/{name}" if ns else str(name)
                cached = w.cache.get(key)
                held = cached if cached is not None and same_write(obj, cached) else None
                keep = held is None or w.tap is not None or w.resource.source in REWRITTEN
                # orjson's buffer is larger than the line: copied to its length when kept
                run[f"{ns}/{name}"] = _Held(key, bytes(memoryview(line)) if keep else None, held)
            else:
                run.clear()
        self.result.records += 1

    def _takers(self, resource: str, obj: Mapping[str, Any]) -> list[Watcher[Any]]:
        """The watchers that would have received `obj` (a record of `resource`): :func:`takes` of each, from what
        was worked out of its resource once."""
        found: list[Watcher[Any]] = []
        raw = obj.get("metadata")
        meta: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        name: str | None = None
        for w, namespace, prefix, field_name, selector in self.by_resource.get(resource, ()):
            if namespace and meta.get("namespace", "") != namespace:
                continue
            if prefix or field_name is not None:
                name = str(meta.get("name", "")) if name is None else name
                if (prefix and not name.startswith(prefix)) or (field_name is not None and name != field_name):
                    continue
            if selector:
                labels = meta.get("labels")
                if not selector_matches(selector, labels if isinstance(labels, dict) else {}):
                    continue
            found.append(w)
        return found

    async def _relist(self, w: Watcher[Any]) -> None:
        wid = w.resource.watcher_id
        self.transport.items[wid] = _list_items(w, list(self.runs[wid].values()))
        self.runs[wid] = {}
        await w.relist()
        self.listed.add(wid)

    async def list_unlisted(self) -> None:
        """List every watcher that has not listed yet with what it has seen (the end of the list window)."""
        missing = sorted(w.resource.watcher_id for w in self.watchers if w.resource.watcher_id not in self.listed)
        if missing:
            log.info("replay: sources the input never lists are listed with what they have", watchers=missing)
        for w in self.watchers:
            if w.resource.watcher_id not in self.listed:
                await self._relist(w)
