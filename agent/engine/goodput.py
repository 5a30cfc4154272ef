"""The engine's effective-training account (agent.core.goodput): per incident, at the first step after the agent's
restart, the work lost and the lost time by cause; per job, productive vs lost time since its first step.

In memory only: a new leader (or a restarted agent) starts each job's account again at the next first step it
sees; the events topic keeps every incident's figures (``recovery.resumed``), and ``fault-agent goodput`` adds them
up across agent restarts. Bounded: one account per job whose heartbeat the agent follows (dropped with its Lease),
one time to first step per incident for :data:`FIRST_STEPS_KEPT` incidents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from agent.core.goodput import (
    CAUSES,
    JobTraining,
    LostTime,
    ProgressHistory,
    TrainingSummary,
    WorkLost,
    incident_lost_time,
    work_lost,
)
from agent.core.incidents import Incident, Phase
from agent.core.progress import Resumed

FIRST_STEPS_KEPT = 10000
"""Incidents whose time to first step is kept for their ``recovery.succeeded`` (oldest dropped first)."""


@dataclass(frozen=True, slots=True)
class ResumedFigures:
    """What one incident cost, found at the first step after its restart: `stopped_at` (training stopped: the
    first fault's own time, or a hang's last step), `work` lost, `lost` time by cause, the job's `training`
    account after it, and `time_to_first_step_s` (restart sent → first step)."""

    stopped_at: datetime
    work: WorkLost
    lost: LostTime
    training: TrainingSummary
    time_to_first_step_s: float


@dataclass
class GoodputKeeper:
    """Per-job accounts (key ``namespace/name``) fed by :meth:`resumed`. `history`: the heartbeat readings the
    detect pipeline keeps (DetectPipeline.progress); None: no account is kept (an engine without progress)."""

    history: ProgressHistory | None = None
    accounts: dict[tuple[str, str], JobTraining] = field(default_factory=dict)
    stalls: dict[str, datetime] = field(default_factory=dict)  # job UID -> a hang's last step (until its resume)
    first_steps: dict[str, float] = field(default_factory=dict)  # incident id -> time to first step, seconds

    def note_hang(self, job_uid: str, last_step_at: datetime) -> None:
        """A hang of job `job_uid` was decided: its training stopped at `last_step_at`, not at the hang fault's
        time (that is the last step + the timeout)."""
        self.stalls.setdefault(job_uid, last_step_at)
        while len(self.stalls) > FIRST_STEPS_KEPT:
            del self.stalls[next(iter(self.stalls))]

    def time_to_first_step(self, incident_id: str) -> float | None:
        """The incident's time to first step, when its first step was seen already (else None)."""
        return self.first_steps.get(incident_id)

    def resumed(self, incident: Incident, first: Resumed) -> ResumedFigures:
        """Account for `incident`, whose restart's first step is `first` (restart_at set, ≤ first.at)."""
        assert incident.restart_at is not None  # the caller checked
        job = first.job
        key = (job.namespace, job.name)
        stopped = min(self.stalls.pop(job.uid, incident.first_fault_at), incident.first_fault_at)
        readings = self.history.before(job.namespace, job.name, incident.restart_at) if self.history else []
        work = work_lost(readings)
        running = incident.at(Phase.RECOVERED)
        lost = incident_lost_time(
            stopped, incident.at(Phase.ACTING), incident.restart_at, running, first.at, work.seconds
        )
        seen = self.history.first_step_at(job.namespace, job.name) if self.history else None
        account = self.accounts.get(key)
        if account is None:
            account = self.accounts[key] = JobTraining(min(seen or stopped, stopped))
        account.add(lost, stopped, work.steps)
        ttfs = max(0.0, (first.at - incident.restart_at).total_seconds())
        self.first_steps[incident.id] = ttfs
        while len(self.first_steps) > FIRST_STEPS_KEPT:
            del self.first_steps[next(iter(self.first_steps))]
        return ResumedFigures(stopped, work, lost, account.summary(first.at), ttfs)

    def totals(self, now: datetime, exists: Callable[[str, str], bool] = lambda ns, name: True) -> tuple[float, float]:
        """(wall, productive) seconds summed over the jobs followed now whose first step was seen and that
        `exists` (namespace, name: the job is in the watch cache; a Lease can outlive its job): an account's own,
        else the job's first step without incidents (all productive)."""
        wall = productive = 0.0
        if self.history is None:
            return 0.0, 0.0
        for key in list(self.accounts):
            if key not in self.history.jobs:
                del self.accounts[key]  # the Lease went: the job is no longer followed
        for namespace, name in self.history.jobs:
            if not exists(namespace, name):
                continue
            account = self.accounts.get((namespace, name))
            if account is None:
                seen = self.history.first_step_at(namespace, name)
                if seen is None:
                    continue
                account = JobTraining(seen)
            s = account.summary(now)
            wall += s.wall_s
            productive += s.productive_s
        return wall, productive

    def summary(self, namespace: str, name: str, now: datetime) -> TrainingSummary | None:
        """Job `namespace/name`'s account at `now` (None: its first step not seen)."""
        account = self.accounts.get((namespace, name))
        if account is None:
            seen = self.history.first_step_at(namespace, name) if self.history else None
            if seen is None:
                return None
            account = JobTraining(seen)
        return account.summary(now)


__all__ = ["CAUSES", "FIRST_STEPS_KEPT", "GoodputKeeper", "ResumedFigures"]
