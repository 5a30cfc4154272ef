"""Stage timings of a fault's way to its restart, for operators and benchmarks.

Each restart a fault opens is timed from the moment the agent read the fault (``Fault.observed_at``, the engine
clock) to the stages of :data:`FAULT_STAGES`, in seconds: ``fault_agent_fault_stage_seconds{stage}`` (one sample
per stage reached; bounded labels) and, at debug level, one ``fault stages`` log line per restart with every stage
in milliseconds. The stages, in the order a restart passes them:

- ``decided``: the plan to restart the job was made and its incident opened (correlation and policy done);
- ``durable``: the fault's fault.detected (and recovery.started) is on disk in the outbox and, in direct mode,
  handed to the Kafka producer (agent.sinks.kafka.publisher ``_commit``): the act task may go on;
- ``sent``: the restart's writes (the claim, the pod deletions or the RestartJob Command) are handed to the writer;
- ``answered``: the apiserver answered the restart's writes (the first deletions or the Command).

A stage's time minus the one before it is where the time went: ``decided`` is the fault loop (parse, detect,
correlate, decide, and the faults queued ahead), ``durable - decided`` the group commit (the hop to the outbox
thread, write, fsync, the produce request), ``sent - durable`` the act task waiting for the event loop, ``answered -
sent`` the apiserver.

Wall time on a shared machine mixes the agent's work with the time the OS ran something else. The debug line also
carries the *decision path* of a fault read from its source: from the recovery loop taking it
(:meth:`agent.engine.recovery.RecoveryEngine.handle_fault`, marked in :data:`DECISION_PATH`) until its
fault.detected and recovery.started are handed to the sink, the event loop thread's CPU (``path_cpu_ms``,
``time.thread_time``) and how often the OS took the CPU from it meanwhile (``path_preempted``, involuntary context
switches, ``getrusage(RUSAGE_THREAD)``). The CPU does not depend on the machine's load; a preemption costs the
other runnable tasks' time slices (bench_e2e, 2 shared CPUs: a 1.4 ms path took up to 40 ms of wall time, with no
voluntary switch: nothing on it waits).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

import structlog

from agent.core.clock import Clock, ThreadUsage
from agent.engine.ports import Metrics
from agent.sinks.metrics.labels import FAULT_STAGES

__all__ = ["DECISION_PATH", "FAULT_STAGES", "HOLD_S", "DecisionPath", "FaultStages", "RestartsSending"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class DecisionPath:
    """The decision path of the fault a task is handling: the usage when it was taken (`start`) and the reader
    of the usage now (`read`)."""

    start: ThreadUsage
    read: Callable[[], ThreadUsage]


DECISION_PATH: ContextVar[DecisionPath | None] = ContextVar("decision_path", default=None)
"""The decision path of the task's current fault (set by ``RecoveryEngine.handle_fault`` for a fault read from its
source when it was given a ``thread_usage`` reader, None otherwise): :class:`FaultStages` reads it."""


class FaultStages:
    """The stage times of one restart (see the module docstring).

    Args:
        seen_at: when the agent read the fault (``Fault.observed_at``, UTC, engine clock).
        clock: the engine's clock (the stages are read on it, as `seen_at` was).
        metrics: takes one ``fault_stage(stage, seconds)`` sample per stage reached.
    """

    __slots__ = ("clock", "metrics", "ms", "path", "path_from", "seen_at")

    def __init__(self, seen_at: datetime, clock: Clock, metrics: Metrics) -> None:
        self.seen_at = seen_at
        self.clock = clock
        self.metrics = metrics
        self.ms: dict[str, float] = {}  # stage -> milliseconds after seen_at, in the order reached
        self.path_from = DECISION_PATH.get()  # None: not timed (deferred, re-evaluated, no usage reader)
        self.path: dict[str, float] = {}  # path_cpu_ms, path_preempted, once path_done() was called

    def path_done(self) -> None:
        """The fault's events are handed to the sink: the decision path ends (nothing when it was not timed)."""
        if self.path_from is None or self.path:
            return
        start, now = self.path_from.start, self.path_from.read()
        self.path = {
            "path_cpu_ms": round((now.cpu_s - start.cpu_s) * 1000, 3),
            "path_preempted": now.preempted - start.preempted,
        }

    def mark(self, stage: str) -> None:
        """`stage` (one of :data:`FAULT_STAGES`) reached now: one sample; a stage reached again is not counted
        again (a restart tried twice is timed by its first try)."""
        if stage in self.ms:
            return
        seconds = max(0.0, (self.clock.now() - self.seen_at).total_seconds())
        self.ms[stage] = round(seconds * 1000, 2)
        self.metrics.fault_stage(stage, seconds)

    def log(self, incident: str) -> None:
        """The ``fault stages`` debug line of the stages reached (milliseconds after the fault was read)."""
        if self.ms:
            log.debug(
                "fault stages",
                incident=incident,
                seen_at=round(self.seen_at.timestamp(), 6),
                **{f"{k}_ms": v for k, v in self.ms.items()},
                **self.path,
            )


HOLD_S = 0.5
"""The longest :meth:`RestartsSending.quiet` holds a caller back in one busy period (seconds of the engine's
monotonic clock since the first restart of the period began): writes that can wait are never starved by a steady
stream of restarts."""


class RestartsSending:
    """How many restarts this replica is sending now, from the decision (:meth:`started`) to the end of the act
    task (:meth:`ended`: the restart's writes answered, its incident persisted), and a wait for none
    (:meth:`quiet`). The agent's writes that can wait, its Kubernetes Events (agent.sinks.kube_events
    ``KubeEventRecorder.hold``), wait for it: a fault's fault.detected and recovery.started stand for up to four
    Events (job, pod, node, then the job again), made as the restart is decided; written at once they reached the
    apiserver beside the restart's deletions and took the event loop's time before them.

    Args:
        clock: the engine's clock (its monotonic count bounds the hold: :data:`HOLD_S`).
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.count = 0
        self._busy_since = 0.0
        self._none = asyncio.Event()
        self._none.set()

    def started(self) -> None:
        """A restart is being decided and sent."""
        if self.count == 0:
            self._busy_since = self.clock.monotonic()
            self._none.clear()
        self.count += 1

    def ended(self) -> None:
        """A restart :meth:`started` was sent and answered, or will not be sent (call once per start)."""
        self.count = max(0, self.count - 1)
        if self.count == 0:
            self._none.set()

    async def quiet(self) -> None:
        """Return once no restart is being sent, or at the latest :data:`HOLD_S` after the first restart of this
        busy period started."""
        if self.count == 0:
            return
        left = self._busy_since + HOLD_S - self.clock.monotonic()
        if left <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._none.wait(), left)
