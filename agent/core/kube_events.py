"""Kubernetes Events for the agent's decisions and actions: what ``kubectl describe`` of a job, a pod or a node shows.
Pure: no I/O, time passed in.

Two parts:

- :func:`from_cloudevent`: the Kubernetes Events one of the agent's CloudEvents stands for (every decision and
  action is one already: fault seen, restart, held by the breaker, recovered or failed, budget end, breaker open
  and closed, quarantine released), each regarding the job, the pod or the node it is about. The breaker's open
  and its close both regard the nodes whose faults tripped it (``data.faulty_nodes`` of ``breaker.tripped`` and
  ``breaker.reset``); the jobs it held show their own ``RecoveryStarted`` once the reset lets the agent act.
  A quarantine taint set or removed has no CloudEvent and so no Event (the node's taint shows it).
- :class:`EventCorrelator`: client-go's event recorder rules (``k8s.io/client-go/tools/record/events_cache.go``),
  so a fault storm never floods the apiserver: a spam filter (a token bucket per regarded object: a burst of
  :data:`SPAM_BURST`, one more every :data:`SPAM_REFILL`), aggregation (more than :data:`AGGREGATE_AFTER` events of
  the same object, type and reason with other notes within :data:`AGGREGATE_WINDOW` become one event whose note
  says so), and de-duplication (an event like one sent within :data:`AGGREGATE_WINDOW` updates that one's series:
  count and last time; client-go keeps it until its cache drops it, so after the window a new Event shows).
  Its caches keep at most :data:`MAX_KEYS` keys each, oldest dropped first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

REPORTING_CONTROLLER = "fault-agent.io/agent"
"""``reportingController`` of every Event the agent writes (the admission policy admits only these)."""
SPAM_BURST = 25
SPAM_REFILL = timedelta(minutes=5)
AGGREGATE_AFTER = 10
AGGREGATE_WINDOW = timedelta(minutes=10)
MAX_KEYS = 4096
MAX_NOTE = 1024  # events.k8s.io/v1 refuses a longer note
AGGREGATED_PREFIX = "(combined from similar events): "

_JOB_KINDS = {"vcjob": ("Job", "batch.volcano.sh/v1alpha1"), "acjob": ("AscendJob", "mindxdl.gitee.com/v1")}


@dataclass(frozen=True, slots=True)
class Regarding:
    """The object an Event is about (``regarding``): kind, apiVersion, namespace ("" for a Node), name, uid."""

    kind: str
    api_version: str
    namespace: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class KubeEvent:
    """One Event to record. `type_` is ``Normal`` or ``Warning``; `reason` a CamelCase word; `action` what was
    done (``Detect``, ``Restart``, ``Release``…); `note` a sentence (cut to :data:`MAX_NOTE`)."""

    regarding: Regarding
    type_: str
    reason: str
    action: str
    note: str


def _job(data: Mapping[str, Any]) -> Regarding | None:
    job = data.get("job")
    if not isinstance(job, Mapping):
        return None
    kind = _JOB_KINDS.get(str(job.get("kind", "")))
    ns, name = str(job.get("namespace") or ""), str(job.get("name") or "")
    if kind is None or not ns or not name:
        return None
    return Regarding(kind[0], kind[1], ns, name, str(job.get("uid") or ""))


def _node(name: object, node_uid: Callable[[str], str]) -> Regarding | None:
    if not isinstance(name, str) or not name:
        return None
    return Regarding("Node", "v1", "", name, node_uid(name))


def _pod(ref: object) -> Regarding | None:
    """The pod a business fault or disruption names (``data.fault.pod``), None when none."""
    if not isinstance(ref, Mapping) or ref.get("kind") != "Pod" or not ref.get("namespace") or not ref.get("name"):
        return None
    return Regarding("Pod", "v1", str(ref["namespace"]), str(ref["name"]), str(ref.get("uid") or ""))


def _fault_text(fault: Mapping[str, Any]) -> str:
    chips = ",".join(str(c) for c in fault.get("chips") or [])
    codes = ",".join(str(c) for c in fault.get("codes") or [])
    text = f"{fault.get('kind', 'fault')} fault {fault.get('level', '')} on node {fault.get('node') or '?'}"
    if chips:
        text += f" chips {chips}"
    if codes:
        text += f" codes {codes}"
    if fault.get("reason"):
        text += f" ({fault['reason']})"
    return text


def from_cloudevent(doc: Mapping[str, Any], node_uid: Callable[[str], str]) -> list[KubeEvent]:
    """The Kubernetes Events the agent's CloudEvent `doc` (its JSON, agent.sinks.events) stands for; [] for a type
    that has none or data it cannot read (never raises). `node_uid` gives a node's UID ("" when unknown), which
    ``kubectl describe node`` matches on."""
    kind = str(doc.get("type", "")).removeprefix("io.faultagent.").rsplit(".v", 1)[0]
    data = doc.get("data")
    if not isinstance(data, Mapping):
        return []
    job = _job(data)
    out: list[KubeEvent] = []

    def add(regarding: Regarding | None, type_: str, reason: str, action: str, note: str) -> None:
        if regarding is not None:
            out.append(KubeEvent(regarding, type_, reason, action, note[:MAX_NOTE]))

    raw_fault = data.get("fault")
    fault: Mapping[str, Any] = raw_fault if isinstance(raw_fault, Mapping) else {}
    incident = f" (incident {data['incident_id']})" if data.get("incident_id") else ""
    if kind == "fault.detected":
        text = _fault_text(fault)
        add(job, "Warning", "FaultDetected", "Detect", f"{text}{incident}")
        add(_pod(fault.get("pod")), "Warning", "FaultDetected", "Detect", f"{text}{incident}")
        add(_node(fault.get("node"), node_uid), "Warning", "FaultDetected", "Detect", text)
    elif kind == "fault.cleared":
        text = f"{_fault_text(fault)} cleared after {float(data.get('fault_duration_s') or 0):.0f} s"
        add(job, "Normal", "FaultCleared", "Detect", text)
        add(_node(fault.get("node"), node_uid), "Normal", "FaultCleared", "Detect", text)
    elif kind == "recovery.held":
        shadow = " [dry-run]" if data.get("dry_run") else ""
        add(job, "Warning", "HeldByBreaker", "Hold",
            f"{data.get('action')} held: {data.get('reason', '')}{incident}{shadow}")  # fmt: skip
    elif kind == "recovery.started":
        shadow = " [dry-run: nothing written]" if data.get("dry_run") else ""
        add(job, "Warning", "RecoveryStarted", str(data.get("action") or "Restart"),
            f"{data.get('action')}: {data.get('reason', '')}{incident}{shadow}")  # fmt: skip
    elif kind == "recovery.succeeded":
        total = (data.get("durations") or {}).get("total_s") if isinstance(data.get("durations"), Mapping) else None
        took = f" in {float(total):.1f} s from the fault" if isinstance(total, int | float) else ""
        add(job, "Normal", "Recovered", str(data.get("action") or "Restart"), f"recovered{took}{incident}")
    elif kind == "recovery.failed":
        reason = str(data.get("reason") or "")
        word = "RetryBudgetExhausted" if reason == "budget-exhausted" else "RecoveryFailed"
        add(job, "Warning", word, "Restart", f"{reason}: {data.get('detail', '')}{incident}".rstrip(": "))
    elif kind == "breaker.tripped":
        note = f"restart circuit breaker open: {data.get('reason', '')}; the agent restarts no job until a reset"
        for name in list(data.get("faulty_nodes") or [])[:SPAM_BURST]:
            add(_node(name, node_uid), "Warning", "BreakerTripped", "Trip", note)
    elif kind == "breaker.reset":
        note = f"restart circuit breaker closed by {data.get('by') or 'unknown'}: {data.get('reason') or '(no reason)'}"
        if isinstance(data.get("open_s"), int | float):
            note += f"; open {float(data['open_s']):.0f} s"
        note += "; the agent acts on the faults it held back and restarts jobs again"
        for name in list(data.get("faulty_nodes") or [])[:SPAM_BURST]:
            add(_node(name, node_uid), "Normal", "BreakerReset", "Reset", note)
    elif kind == "quarantine.released":
        chips = ",".join(str(c) for c in data.get("chips") or [])
        still = data.get("still_quarantined")
        note = f"quarantine released by {data.get('by')}: {data.get('reason') or '(no reason)'}"
        note += f"; chips {chips} no longer isolated" if chips else ""
        note += f"; still quarantined at {still} (a fault is still reported)" if still else ""
        add(_node(data.get("node"), node_uid), "Normal", "QuarantineReleased", "Release", note)
    elif kind == "job.misconfigured":
        add(job, "Warning", "Misconfigured", "Check",
            f"label {data.get('label')}={data.get('value')!r}: {data.get('problem', '')}")  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------------- correlation

K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A dict that keeps at most `size` keys, dropping the least recently used."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._d: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._d.get(key)
        if value is not None:
            self._d.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.size:
            self._d.popitem(last=False)

    def __len__(self) -> int:
        return len(self._d)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: datetime


@dataclass(slots=True)
class _Seen:
    name: str  # the Event object's name
    count: int
    first: datetime
    last: datetime


@dataclass(slots=True)
class _Similar:
    notes: set[str]
    since: datetime


@dataclass(frozen=True, slots=True)
class Create:
    """Create a new Event `name` for `event` (its note possibly the aggregate's)."""

    event: KubeEvent
    name: str


@dataclass(frozen=True, slots=True)
class Update:
    """Update Event `name`'s series: `count` occurrences, the last at `last`."""

    event: KubeEvent
    name: str
    count: int
    last: datetime


@dataclass(frozen=True, slots=True)
class Drop:
    """Send nothing: `why` (``spam``)."""

    event: KubeEvent
    why: str


def event_name(regarding: Regarding, now: datetime) -> str:
    """An Event's name as client-go makes it: ``<object name>.<unix nanoseconds in hex>``."""
    ns = int(now.timestamp() * 1_000_000_000)
    return f"{regarding.name}.{ns:x}"


class EventCorrelator:
    """Decides, for each Event, whether to create it, update an earlier one's series, or drop it (see the module
    docstring for the rules and where they come from)."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self._buckets: _Lru[Regarding, _Bucket] = _Lru(max_keys)
        self._similar: _Lru[tuple[Regarding, str, str], _Similar] = _Lru(max_keys)
        self._seen: _Lru[tuple[Regarding, str, str, str, str], _Seen] = _Lru(max_keys)

    def observe(self, event: KubeEvent, now: datetime) -> Create | Update | Drop:
        """What to do with `event` at `now`."""
        bucket = self._buckets.get(event.regarding)
        if bucket is None:
            bucket = _Bucket(float(SPAM_BURST), now)
        refill = max(0.0, (now - bucket.at) / SPAM_REFILL)
        bucket.tokens, bucket.at = min(float(SPAM_BURST), bucket.tokens + refill), now
        self._buckets.put(event.regarding, bucket)
        if bucket.tokens < 1:
            return Drop(event, "spam")
        bucket.tokens -= 1
        similar_key = (event.regarding, event.type_, event.reason)
        similar = self._similar.get(similar_key)
        if similar is None or now - similar.since > AGGREGATE_WINDOW:
            similar = _Similar(set(), now)
        similar.notes.add(event.note)
        self._similar.put(similar_key, similar)
        if len(similar.notes) > AGGREGATE_AFTER:
            note = (AGGREGATED_PREFIX + event.note)[:MAX_NOTE]
            event = KubeEvent(event.regarding, event.type_, event.reason, event.action, note)
            key = (event.regarding, event.type_, event.reason, event.action, AGGREGATED_PREFIX)
        else:
            key = (event.regarding, event.type_, event.reason, event.action, event.note)
        seen = self._seen.get(key)
        if seen is not None and now - seen.last <= AGGREGATE_WINDOW:
            seen.count += 1
            seen.last = now
            self._seen.put(key, seen)
            return Update(event, seen.name, seen.count, now)
        name = event_name(event.regarding, now)
        self._seen.put(key, _Seen(name, 1, now, now))
        return Create(event, name)
