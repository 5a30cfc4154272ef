"""The engine's effective-training account (agent.core.goodput): per incident, at the first step after the agent's
restart, the work lost and the lost time by cause; per job, productive vs lost time since its first step.

In memory only: a new leader (or a restarted agent) starts each job's account again at the next first step it
sees; the events topic keeps every incident's figures (``recovery.resumed``), and ``fault-agent goodput`` adds them
up across agent restarts. Bounded: one account per job whose heartbeat the agent follows (dropped with its Lease),
one time to first step per incident for :data:`FIRST_STEPS_KEPT` incidents.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction

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
from agent.core.progress import Resumed, due_before

FIRST_STEPS_KEPT = 10000
"""Incidents whose time to first step is kept for their ``recovery.succeeded`` (oldest dropped first)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


@dataclass(slots=True)
class _Summed:
    """One job in :meth:`GoodputKeeper.totals_changed`'s sums: from `first_us` (its account's start, microseconds
    since the epoch) with `lost_s` lost seconds (as :meth:`JobTraining.summary` adds them up); `wall`: counted in the
    wall sum (now ≥ its start), `productive`: in the productive sum (its wall seconds ≥ `lost_s`)."""

    first: datetime
    first_us: int
    lost_s: float
    wall: bool = False
    productive: bool = False


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
    # totals_changed: the jobs summed, the sums (exact: microseconds and Fractions), the jobs to look at next, the
    # heap of the times a job enters a sum, the last `now`, and whether the next call sums every job again
    visits: int = 0  # jobs looked at by totals_changed, in all (the tests count it)
    _summed: dict[tuple[str, str], _Summed] = field(default_factory=dict)
    _wall_n: int = 0
    _wall_us: int = 0  # Σ first_us over the jobs in the wall sum
    _prod_n: int = 0
    _prod_us: int = 0
    _prod_lost: Fraction = field(default_factory=Fraction)  # Σ lost_s over the jobs in the productive sum
    _todo: set[tuple[str, str]] = field(default_factory=set)
    _due: list[tuple[datetime, tuple[str, str]]] = field(default_factory=list)
    _last: datetime | None = None
    _again: bool = True

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
        self._todo.add(key)
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

    def totals_changed(
        self, now: datetime, exists: Callable[[str, str], bool], touched: Iterable[tuple[str, str]]
    ) -> tuple[float, float]:
        """:meth:`totals` looking only at what changed (issue 39: no per-tick work proportional to the jobs
        followed): the jobs whose heartbeat appeared, went or took its first step (ProgressHistory.changed), whose
        account changed, `touched` ((namespace, name) of the jobs added or deleted since the last call:
        agent.sources.state.JobTouches), and those whose sum they enter at `now` (a heap of those times). The sums
        are kept exactly (microseconds, and the lost seconds as fractions), so they equal :meth:`totals`' up to its
        float rounding. Every job is summed again at the first call, after :meth:`pause` and when the clock went
        back."""
        history = self.history
        if history is None:
            return 0.0, 0.0
        if self._again or history.changed is None or (self._last is not None and now < self._last):
            self._again = False
            history.changed = set()
            self._summed.clear()
            self._due.clear()
            self._wall_n = self._wall_us = self._prod_n = self._prod_us = 0
            self._prod_lost = Fraction()
            todo = set(history.jobs) | set(self.accounts)
        else:
            todo, self._todo = self._todo, set()
            todo |= history.changed
            history.changed = set()
            todo.update(touched)
            while self._due and self._due[0][0] <= now:
                todo.add(heapq.heappop(self._due)[1])
        self._todo.clear()
        self._last = now
        for key in todo:
            self._look(key, now, exists)
        if len(self._due) > 2 * len(self._summed) + 64:  # entries of jobs looked at again since: rebuilt without
            self._due = [(self._next_entry(s), key) for key, s in self._summed.items() if not s.productive]
            heapq.heapify(self._due)
        now_us = (now - _EPOCH) // _US
        wall = Fraction(self._wall_n * now_us - self._wall_us, 1_000_000)
        productive = Fraction(self._prod_n * now_us - self._prod_us, 1_000_000) - self._prod_lost
        return float(wall), float(productive)

    def pause(self) -> None:
        """Totals are not asked for now (a standby): the changes are not kept; the next :meth:`totals_changed`
        sums every job again."""
        self._again = True
        self._todo.clear()
        if self.history is not None:
            self.history.changed = None

    def _look(self, key: tuple[str, str], now: datetime, exists: Callable[[str, str], bool]) -> None:
        """Job `key` taken out of the sums and put back as it stands at `now`; the time it enters a sum queued."""
        assert self.history is not None
        self.visits += 1
        old = self._summed.pop(key, None)
        if old is not None:
            if old.wall:
                self._wall_n -= 1
                self._wall_us -= old.first_us
            if old.productive:
                self._prod_n -= 1
                self._prod_us -= old.first_us
                self._prod_lost -= Fraction(old.lost_s)
        if key not in self.history.jobs:
            self.accounts.pop(key, None)  # the Lease went: the job is no longer followed
            return
        if not exists(*key):
            return
        account = self.accounts.get(key)
        if account is not None:
            first, lost_s = account.first_step_at, sum(account.lost.values())
        else:
            seen = self.history.first_step_at(*key)
            if seen is None:
                return
            first, lost_s = seen, 0.0
        summed = self._summed[key] = _Summed(first, (first - _EPOCH) // _US, lost_s)
        self._enter(key, summed, now)

    def _enter(self, key: tuple[str, str], summed: _Summed, now: datetime) -> None:
        """Put `summed` in the sums it belongs to at `now` (as :meth:`JobTraining.summary` counts it: wall seconds
        max(0, now - first), productive = wall - min(wall, lost)); queue the time it enters the next one."""
        if not summed.wall:
            if now < summed.first:
                heapq.heappush(self._due, (self._next_entry(summed), key))
                return
            summed.wall = True
            self._wall_n += 1
            self._wall_us += summed.first_us
        if not summed.productive:
            if (now - summed.first).total_seconds() < summed.lost_s:
                heapq.heappush(self._due, (self._next_entry(summed), key))
                return
            summed.productive = True
            self._prod_n += 1
            self._prod_us += summed.first_us
            self._prod_lost += Fraction(summed.lost_s)

    @staticmethod
    def _next_entry(summed: _Summed) -> datetime:
        """When `summed` may enter its next sum: the wall sum at its start, the productive one at most
        :data:`~agent.core.progress.DEADLINE_MARGIN_US` before its wall seconds reach its lost seconds."""
        if not summed.wall:
            return summed.first
        return due_before(summed.first, summed.lost_s) or datetime.max.replace(tzinfo=UTC)

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
