"""Checkpoint-aware graceful restarts: when a wait that gives a job time to save may end early. Pure: no I/O, no
clock reads (every time is passed in, on the agent's clock).

Two waits give a job time to save before the agent forces it (docs/progress.md, "Checkpoint-aware graceful
restart"):

- ``grace-over-time`` (``fault-scheduling: grace``): the job's pods are deleted honouring their grace period, and
  those still there after ``policy.grace_over_time_s`` are force-deleted (agent.actions.recovery.finish_grace);
- ``grace-exit`` (``subHealthyStrategy: graceExit``): ``GracefulExit`` 1 in the job's reset-config, then up to
  ``policy.grace_exit_wait_s`` for its training processes to exit before the grace deletion
  (agent.engine.reset_config).

A job that reports its training progress (the heartbeat Lease of agent.core.progress) tells the agent when its
save is done, so each wait also ends as soon as :func:`checkpoint_after_fault` holds. The settings stay the bound:
the wait is never longer than without a signal, and a job without one waits exactly as before.

The rule, precisely: with `base` taken when the wait begins, a reading ends the wait when

1. it reports a complete checkpoint (``fault-agent.io/checkpoint-step`` C), and
2. the agent saw the Lease take that checkpoint value *after* it saw the fault (``checkpoint_seen_at`` >
   ``base.fault_at``, both the agent's clock: no trust in the writer's ``renewTime`` or in node clocks), and
3. C ≥ every step the agent has seen: ``base.step`` (the last step it had seen when the wait began) and the
   reading's own step (a training that still steps after a checkpoint has work the checkpoint does not hold).

Why both 2 and 3. (2) alone would accept a periodic checkpoint that was being written when the fault came and
finished just after it: older than the training's state, so forcing then loses the steps since. (3) alone would
accept the checkpoint the job had before the fault whenever it happened to be at the current step, while the
training may have taken steps the heartbeat has not reported yet (it writes every ``interval_s``). Why not
C > ``base.step``: a hardware fault stops the collective, so the step cannot move after it and the save the job
makes on SIGTERM (or on ``GracefulExit``) is of the last completed step, usually the one already reported; a strict
comparison would never end the commonest wait. Steps completed after the last heartbeat write and before the fault
are invisible to the agent; (2) and (3) cover every step it was told of.

A checkpoint value the agent found already there when it began following a Lease has no seen time (None): it
never ends a wait, since the agent cannot tell whether it came after the fault (a new leader resuming a wait
therefore waits for a checkpoint it sees being written).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class GraceWait(enum.StrEnum):
    """Which wait: ``grace-over-time`` (grace mode's force after the grace deletion) or ``grace-exit``
    (graceExit's wait for the processes before the grace deletion)."""

    GRACE_OVER_TIME = "grace-over-time"
    GRACE_EXIT = "grace-exit"


class WaitEnded(enum.StrEnum):
    """Why a graceful wait ended (the ``ended`` of the event field and the metric label; a bounded set).

    - ``checkpoint``: the job's heartbeat reported a checkpoint newer than the fault (:func:`checkpoint_after_fault`);
    - ``exited``: the job's pods (grace mode) or training processes (graceExit) went on their own;
    - ``node-down``: grace mode only: every pod left was on a node that is down and was forced at once;
    - ``timeout``: the setting's time ran out (``policy.grace_over_time_s`` / ``policy.grace_exit_wait_s``).
    """

    CHECKPOINT = "checkpoint"
    EXITED = "exited"
    NODE_DOWN = "node-down"
    TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class CheckpointReading:
    """A job's heartbeat as the agent follows it now.

    Attributes:
        step: the last completed training step the Lease reported.
        checkpoint_step: the step of its last complete checkpoint (None: not reported).
        checkpoint_seen_at: when the agent saw ``checkpoint_step`` take its current value (agent clock, UTC);
            None when the value was already there when the agent began following the Lease.
    """

    step: int
    checkpoint_step: int | None
    checkpoint_seen_at: datetime | None


@dataclass(frozen=True, slots=True)
class CheckpointBaseline:
    """What a checkpoint must be newer than: `step`, the job's last step as the agent had seen it when the wait
    began, and `fault_at`, when the agent saw the fault (agent clock, UTC: the incident's opening)."""

    step: int
    fault_at: datetime


def baseline(reading: CheckpointReading | None, fault_at: datetime) -> CheckpointBaseline | None:
    """The baseline of a wait that begins now, from the job's `reading` (None: the job has no usable progress
    signal, so the wait is not checkpoint-aware: None)."""
    if reading is None:
        return None
    return CheckpointBaseline(reading.step, fault_at)


def checkpoint_after_fault(base: CheckpointBaseline | None, reading: CheckpointReading | None) -> bool:
    """Whether `reading` reports a checkpoint newer than the fault (the module docstring's rule). False without a
    baseline or a reading (no signal: the wait runs its full time)."""
    if base is None or reading is None:
        return False
    c = reading.checkpoint_step
    seen = reading.checkpoint_seen_at
    return c is not None and seen is not None and seen > base.fault_at and c >= max(base.step, reading.step)


@dataclass(frozen=True, slots=True)
class GraceWaitOutcome:
    """How one graceful wait ended, for the ``recovery.succeeded`` event's ``grace_wait`` and the
    ``fault_agent_grace_wait_seconds`` metric.

    Attributes:
        wait: which wait (:class:`GraceWait`).
        ended: why it ended (:class:`WaitEnded`).
        waited_s: seconds from its start to its end (the agent's monotonic clock), ≥ 0.
        checkpoint_step: the checkpoint that ended it (``checkpoint`` only, else None).
    """

    wait: GraceWait
    ended: WaitEnded
    waited_s: float
    checkpoint_step: int | None = None
