"""The words of the agent's events: their CloudEvents types, the stream (topic family) of each, the reasons a
recovery fails, and the error a builder raises.

Types are versioned names ``io.faultagent.<thing>.<what>.v1`` (:data:`EVENT_TYPES`); each has a JSON Schema of its
``data`` in ``agent/sinks/schemas/<type>.json`` (:mod:`agent.sinks.events.schemas`). Nothing here does I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from agent.core.observe import ACTED_BY_AGENT, ACTED_BY_OBSERVED

FAULT_DETECTED: Final = "io.faultagent.fault.detected.v1"
FAULT_CLEARED: Final = "io.faultagent.fault.cleared.v1"
RECOVERY_HELD: Final = "io.faultagent.recovery.held.v1"
RECOVERY_STARTED: Final = "io.faultagent.recovery.started.v1"
RECOVERY_SUCCEEDED: Final = "io.faultagent.recovery.succeeded.v1"
RECOVERY_FAILED: Final = "io.faultagent.recovery.failed.v1"
RECOVERY_RESUMED: Final = "io.faultagent.recovery.resumed.v1"
BREAKER_TRIPPED: Final = "io.faultagent.breaker.tripped.v1"
BREAKER_RESET: Final = "io.faultagent.breaker.reset.v1"
JOB_MISCONFIGURED: Final = "io.faultagent.job.misconfigured.v1"
JOB_HUNG: Final = "io.faultagent.job.hung.v1"
JOB_STRAGGLER: Final = "io.faultagent.job.straggler.v1"
QUARANTINE_RELEASED: Final = "io.faultagent.quarantine.released.v1"

EVENT_TYPES: Final[tuple[str, ...]] = (
    FAULT_DETECTED,
    FAULT_CLEARED,
    RECOVERY_HELD,
    RECOVERY_STARTED,
    RECOVERY_SUCCEEDED,
    RECOVERY_FAILED,
    RECOVERY_RESUMED,
    BREAKER_TRIPPED,
    BREAKER_RESET,
    JOB_MISCONFIGURED,
    JOB_HUNG,
    QUARANTINE_RELEASED,
    JOB_STRAGGLER,
)
ACTED_BY: Final[tuple[str, ...]] = (ACTED_BY_AGENT, ACTED_BY_OBSERVED)
"""``data.acted_by`` of the recovery events: the agent restarted the job, or someone else did and the agent
watched (policy.mode=observe; agent.core.observe)."""

CONTENT_TYPE: Final = "application/cloudevents+json"
DATA_CONTENT_TYPE: Final = "application/json"
PARTITION_KEY: Final = "partitionkey"


class Stream(enum.StrEnum):
    """Which topic an event goes to (topic names come from KafkaSettings)."""

    FAULTS = "faults"  # fault detected / cleared
    RECOVERIES = "recoveries"  # recovery started / succeeded / failed, breaker tripped / reset, job misconfigured
    # (a quarantine released goes with the faults: it ends what their fault.detected began on the node)


STREAM_OF: Final[dict[str, Stream]] = {
    FAULT_DETECTED: Stream.FAULTS,
    FAULT_CLEARED: Stream.FAULTS,
    RECOVERY_HELD: Stream.RECOVERIES,
    RECOVERY_STARTED: Stream.RECOVERIES,
    RECOVERY_SUCCEEDED: Stream.RECOVERIES,
    RECOVERY_FAILED: Stream.RECOVERIES,
    RECOVERY_RESUMED: Stream.RECOVERIES,
    BREAKER_TRIPPED: Stream.RECOVERIES,
    BREAKER_RESET: Stream.RECOVERIES,
    JOB_MISCONFIGURED: Stream.RECOVERIES,
    JOB_HUNG: Stream.RECOVERIES,
    JOB_STRAGGLER: Stream.RECOVERIES,
    QUARANTINE_RELEASED: Stream.FAULTS,
}


class FailureReason(enum.StrEnum):
    """Why a recovery failed (``data.reason`` of a recovery-failed event)."""

    BUDGET_EXHAUSTED = "budget-exhausted"  # the job's retry budget (maxRetry / fault-retry-times) is spent
    TIMEOUT = "timeout"  # not recovered within policy.recovery_deadline_s
    ACTION_ERROR = "action-error"  # the action (Command, pod delete, resubmit) could not be carried out
    BREAKER_OPEN = "breaker-open"  # held by the open circuit breaker until the recovery deadline passed
    JOB_GONE = "job-gone"  # the job was deleted while recovering
    JOB_FAILED = "job-failed"  # the job's controller gave it up (Volcano: Failed at retryCount == maxRetry)
    # the lease ran out before anything of the restart was sent, and no leader took the incident up
    # (agent.engine.unsent): the job was not restarted for it
    LEADERSHIP_LOST = "leadership-lost"


class EventBuildError(ValueError):
    """An event could not be built from the arguments given (a caller bug, never Kafka's fault).

    Attributes:
        event_type: the type being built.
        field: the argument that was wrong.
        retriable: always False: the same arguments fail again.
    """

    retriable = False

    def __init__(self, event_type: str, field: str, message: str) -> None:
        super().__init__(f"{event_type}: {field}: {message}")
        self.event_type = event_type
        self.field = field


@dataclass(frozen=True, slots=True)
class Durations:
    """Phases of one recovery, seconds (all ≥ 0).

    detection: fault signal time → the agent saw it; decision: saw it → decided; action: decided → action done
    (Command accepted, pods deleted); reschedule: action done → job running again; total: signal time → running.
    """

    detection: float
    decision: float
    action: float
    reschedule: float
    total: float
