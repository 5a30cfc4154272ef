"""Effective training time: the work an incident lost and where the time went. Pure: no I/O, no clock reads.

A job that reports its progress (agent.core.progress, docs/progress.md) lets the agent measure what a restart
really cost, from the heartbeat readings it saw (timed on the agent's clock):

- **work lost** (:func:`work_lost`): the steps done since the last complete checkpoint the heartbeat reported
  before the restart (last step seen − checkpoint step), which the job computes again after loading that
  checkpoint, and their seconds (those steps × the step time; without a step time, the agent-clock time between
  seeing the checkpoint step reached and seeing the last step);
- **lost time by cause** (:func:`incident_lost_time`), one interval after the other on one time line:
  ``detection`` (training stopped → the agent's decision; training stops at the fault's own time, or for a hang
  at the last step seen), ``restart`` (decision → the restart request sent, graceful waits included),
  ``rescheduling`` (→ the job's pods Running again: the controller deleting and recreating them, the scheduler
  placing them, the containers starting), ``initialisation`` (pods Running → the first step the agent saw), and
  ``recomputation`` (the work lost, above);
- **effective training time per job** (:class:`JobTraining`): wall time since the job's first step the agent saw,
  productive = wall − the lost time of its incidents, the running share = productive / wall.

:class:`GoodputFold` computes the same per job from the ``io.faultagent.recovery.resumed.v1`` events (the
``fault-agent goodput`` command): each carries its incident's breakdown and the job's first step.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agent.core.progress import Progress

CAUSES: tuple[str, ...] = ("detection", "restart", "rescheduling", "initialisation", "recomputation")
"""The causes lost training time is split by, in time-line order (the ``cause`` label's values)."""

READINGS_KEPT = 32
"""Readings kept per job (:class:`ProgressHistory`): only those where the step or checkpoint changed, so a few
dozen cover the last minutes before a restart and the first steps after it."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One heartbeat reading: `step`, `checkpoint_step` (None: not reported), `step_time_s` (None: not reported),
    and `at`, when the agent saw it (agent clock, UTC)."""

    step: int
    checkpoint_step: int | None
    step_time_s: float | None
    at: datetime


@dataclass(slots=True)
class _History:
    readings: deque[Reading] = field(default_factory=lambda: deque(maxlen=READINGS_KEPT))
    first_step_at: datetime | None = None  # when the agent first saw the step change


@dataclass
class ProgressHistory:
    """The recent heartbeat readings per job, keyed ``(namespace, job name)``; bounded by the jobs whose Lease the
    agent follows (:meth:`forget` when a Lease goes) × :data:`READINGS_KEPT`. `changed`: the jobs that appeared,
    went or had their first step seen since its reader (agent.engine.goodput) last took them; None: no reader, not
    kept."""

    jobs: dict[tuple[str, str], _History] = field(default_factory=dict)
    changed: set[tuple[str, str]] | None = None

    def observe(self, namespace: str, job: str, progress: Progress, at: datetime) -> None:
        """A good reading of job `namespace/job`'s heartbeat seen at `at`; kept when its step or checkpoint step
        changed (the step time is taken from the newest)."""
        key = (namespace, job)
        h = self.jobs.get(key)
        if h is None:
            h = self.jobs[key] = _History()
            if self.changed is not None:
                self.changed.add(key)
        reading = Reading(progress.step, progress.checkpoint_step, progress.step_time_s, at)
        last = h.readings[-1] if h.readings else None
        if last is not None and (last.step, last.checkpoint_step) == (reading.step, reading.checkpoint_step):
            if last.step_time_s != reading.step_time_s:
                h.readings[-1] = Reading(last.step, last.checkpoint_step, reading.step_time_s, last.at)
            return
        if last is not None and last.step != reading.step and h.first_step_at is None:
            h.first_step_at = at
            if self.changed is not None:
                self.changed.add(key)
        h.readings.append(reading)

    def forget(self, namespace: str, job: str) -> None:
        if self.jobs.pop((namespace, job), None) is not None and self.changed is not None:
            self.changed.add((namespace, job))

    def first_step_at(self, namespace: str, job: str) -> datetime | None:
        """When the agent first saw the job's step change (None: not yet)."""
        h = self.jobs.get((namespace, job))
        return None if h is None else h.first_step_at

    def before(self, namespace: str, job: str, t: datetime) -> list[Reading]:
        """The kept readings seen at or before `t`, oldest first."""
        h = self.jobs.get((namespace, job))
        return [] if h is None else [r for r in h.readings if r.at <= t]

    def last_step_change(self, namespace: str, job: str, t: datetime) -> datetime | None:
        """When the agent saw the last step change at or before `t` (None: none kept)."""
        readings = self.before(namespace, job, t)
        for newer, older in zip(reversed(readings), reversed(readings[:-1]), strict=False):
            if newer.step != older.step:
                return newer.at
        return None


@dataclass(frozen=True, slots=True)
class WorkLost:
    """The work an incident lost (see the module docstring). `steps`: last step seen − checkpoint step (None when
    the heartbeat reported no checkpoint or no reading was seen); `seconds` (None when not known); `step_at_fault`:
    the last step seen before the restart; `checkpoint_step`: the last checkpoint reported then; `step_time_s`:
    the step time used (None: the seconds come from the agent's clock, or are unknown)."""

    steps: int | None
    seconds: float | None
    step_at_fault: int | None
    checkpoint_step: int | None
    step_time_s: float | None

    def as_data(self) -> dict[str, Any]:
        """The event's ``data.work_lost`` object."""
        return {
            "steps": self.steps,
            "seconds": self.seconds,
            "step_at_fault": self.step_at_fault,
            "checkpoint_step": self.checkpoint_step,
            "step_time_s": self.step_time_s,
        }


NO_WORK_LOST = WorkLost(None, None, None, None, None)


def observed_step_time(readings: list[Reading]) -> float | None:
    """Seconds per step from the readings' own times (agent clock): the longest run of increasing steps at the end
    of `readings` (oldest first); None with fewer than two steps in it."""
    run = readings[-1:]
    for older in reversed(readings[:-1]):
        if older.step >= run[0].step:
            break
        run.insert(0, older)
    if len(run) < 2:
        return None
    steps = run[-1].step - run[0].step
    seconds = (run[-1].at - run[0].at).total_seconds()
    return seconds / steps if steps > 0 and seconds > 0 else None


def work_lost(readings: list[Reading]) -> WorkLost:
    """The work lost by a restart given the `readings` seen before it (oldest first; :meth:`ProgressHistory.before`
    the restart's time). Steps: last step − its checkpoint step (≥ 0). Seconds: steps × the step time (the last
    reading's, else :func:`observed_step_time`); without either, the agent-clock time from the first reading at or
    past the checkpoint step to the last reading."""
    if not readings:
        return NO_WORK_LOST
    last = readings[-1]
    if last.checkpoint_step is None:
        return WorkLost(None, None, last.step, None, last.step_time_s)
    steps = max(0, last.step - last.checkpoint_step)
    step_time = last.step_time_s or observed_step_time(readings)
    if step_time is not None:
        return WorkLost(steps, steps * step_time, last.step, last.checkpoint_step, step_time)
    reached = next((r for r in readings if r.step >= last.checkpoint_step), None)
    seconds = None if reached is None else max(0.0, (last.at - reached.at).total_seconds())
    return WorkLost(steps, seconds, last.step, last.checkpoint_step, None)


@dataclass(frozen=True, slots=True)
class LostTime:
    """One incident's lost training time by cause, seconds (each ≥ 0; see the module docstring)."""

    detection_s: float = 0.0
    restart_s: float = 0.0
    rescheduling_s: float = 0.0
    initialisation_s: float = 0.0
    recomputation_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.detection_s + self.restart_s + self.rescheduling_s + self.initialisation_s + self.recomputation_s

    def by_cause(self) -> dict[str, float]:
        """``{cause: seconds}`` for each of :data:`CAUSES`."""
        return {cause: float(getattr(self, f"{cause}_s")) for cause in CAUSES}

    def as_data(self) -> dict[str, float]:
        """The event's ``data.lost_s`` object: ``<cause>_s`` for each cause, and ``total_s``."""
        return {**{f"{c}_s": v for c, v in self.by_cause().items()}, "total_s": self.total_s}


def incident_lost_time(
    stopped_at: datetime,
    decided_at: datetime | None,
    restart_at: datetime,
    running_at: datetime | None,
    first_step_at: datetime,
    recomputation_s: float | None,
) -> LostTime:
    """Split the time from `stopped_at` (training stopped) to `first_step_at` (the first step after the restart)
    at `decided_at` (the agent's decision; None: at the restart), `restart_at` (the restart sent) and `running_at`
    (the job's pods Running again; None, or later than the first step: the first step). Each boundary is clamped
    between its neighbours, so the four intervals add up to first_step_at − stopped_at (0 when negative).
    `recomputation_s`: the work lost's seconds (None: 0)."""
    t0 = stopped_at
    t4 = max(t0, first_step_at)
    t1 = min(max(t0, decided_at or restart_at), t4)
    t2 = min(max(t1, restart_at), t4)
    t3 = min(max(t2, running_at or t4), t4)
    rec = recomputation_s if recomputation_s is not None and math.isfinite(recomputation_s) else 0.0
    return LostTime(
        (t1 - t0).total_seconds(),
        (t2 - t1).total_seconds(),
        (t3 - t2).total_seconds(),
        (t4 - t3).total_seconds(),
        max(0.0, rec),
    )


@dataclass(frozen=True, slots=True)
class TrainingSummary:
    """A job's effective training time at some moment: `wall_s` since its first step, `lost_s` (≤ wall) split in
    `lost_by_cause`, `productive_s` = wall − lost, `running_share` = productive / wall (None while wall is 0),
    `incidents` counted, `work_lost_steps` summed (over the incidents that reported a checkpoint)."""

    first_step_at: datetime
    wall_s: float
    lost_s: float
    productive_s: float
    running_share: float | None
    lost_by_cause: Mapping[str, float]
    incidents: int
    work_lost_steps: int

    def as_data(self) -> dict[str, Any]:
        """The event's ``data.training`` object (times as RFC 3339 by the caller: `first_step_at` is left out)."""
        return {
            "wall_s": self.wall_s,
            "lost_s": self.lost_s,
            "productive_s": self.productive_s,
            "running_share": self.running_share,
            "incidents": self.incidents,
        }


@dataclass
class JobTraining:
    """One job's effective-training account: from `first_step_at` (the first step the agent saw, or an earlier
    stop), the lost seconds by cause of its incidents (:meth:`add`)."""

    first_step_at: datetime
    lost: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    incidents: int = 0
    work_lost_steps: int = 0

    def add(self, lost: LostTime, stopped_at: datetime, steps: int | None) -> None:
        """Count one incident's `lost` time (training stopped at `stopped_at`; `steps` of work lost, None: unknown)."""
        self.first_step_at = min(self.first_step_at, stopped_at)
        for cause, seconds in lost.by_cause().items():
            self.lost[cause] += seconds
        self.incidents += 1
        self.work_lost_steps += steps or 0

    def summary(self, now: datetime) -> TrainingSummary:
        """The account at `now` (lost time capped at the wall time)."""
        wall = max(0.0, (now - self.first_step_at).total_seconds())
        lost = min(wall, sum(self.lost.values()))
        productive = wall - lost
        share = productive / wall if wall > 0 else None
        return TrainingSummary(
            self.first_step_at, wall, lost, productive, share, dict(self.lost), self.incidents, self.work_lost_steps
        )


# ---------------------------------------------------------------------------------------------- from the events


@dataclass(frozen=True, slots=True)
class JobGoodput:
    """One job's row of ``fault-agent goodput``: `namespace`, `name`, and its :class:`TrainingSummary` over the
    window asked for."""

    namespace: str
    name: str
    summary: TrainingSummary

    def as_data(self) -> dict[str, Any]:
        s = self.summary
        return {
            "namespace": self.namespace,
            "name": self.name,
            "from": s.first_step_at.isoformat().replace("+00:00", "Z"),
            "wall_s": round(s.wall_s, 3),
            "productive_s": round(s.productive_s, 3),
            "lost_s": round(s.lost_s, 3),
            "lost_by_cause_s": {c: round(v, 3) for c, v in s.lost_by_cause.items()},
            "running_share": None if s.running_share is None else round(s.running_share, 6),
            "incidents": s.incidents,
            "work_lost_steps": s.work_lost_steps,
        }


class GoodputEventError(ValueError):
    """A ``recovery.resumed`` event lacks what the fold needs; `field` names it."""

    def __init__(self, field_name: str, detail: str) -> None:
        super().__init__(f"data.{field_name}: {detail}")
        self.field = field_name


@dataclass(frozen=True, slots=True)
class _Resumed:
    incident_id: str
    namespace: str
    name: str
    job_first_step_at: datetime
    stopped_at: datetime
    first_step_at: datetime
    lost: LostTime
    work_lost_steps: int | None


def _time(data: Mapping[str, Any], key: str) -> datetime:
    text = data.get(key)
    if not isinstance(text, str):
        raise GoodputEventError(key, "missing or not a string")
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise GoodputEventError(key, f"{text[:40]!r} is not an RFC 3339 time") from None
    if when.tzinfo is None:
        raise GoodputEventError(key, "has no time zone")
    return when


def _seconds(data: Mapping[str, Any], key: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise GoodputEventError(key, f"{value!r} is not a number of seconds ≥ 0")
    return float(value)


def read_resumed(data: Mapping[str, Any]) -> _Resumed:
    """The figures the fold needs from a ``recovery.resumed`` event's `data` (schema
    config/schemas/io.faultagent.recovery.resumed.v1.json). Raises :class:`GoodputEventError`; an event of an
    earlier agent without ``lost_s`` is refused as ``lost_s`` missing."""
    incident = data.get("incident_id")
    job = data.get("job")
    if not isinstance(incident, str) or not incident:
        raise GoodputEventError("incident_id", "missing")
    if (
        not isinstance(job, Mapping)
        or not isinstance(job.get("namespace"), str)
        or not isinstance(job.get("name"), str)
    ):
        raise GoodputEventError("job", "no namespace and name")
    lost = data.get("lost_s")
    training = data.get("training")
    if not isinstance(lost, Mapping):
        raise GoodputEventError("lost_s", "missing (an event of an agent before effective training time)")
    if not isinstance(training, Mapping):
        raise GoodputEventError("training", "missing")
    work = data.get("work_lost")
    steps = work.get("steps") if isinstance(work, Mapping) else None
    return _Resumed(
        incident,
        str(job["namespace"]),
        str(job["name"]),
        _time(training, "first_step_at"),
        _time(data, "stopped_at"),
        _time(data, "first_step_at"),
        LostTime(*(_seconds(lost, f"{c}_s") for c in CAUSES)),
        steps if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0 else None,
    )


@dataclass
class GoodputFold:
    """Effective training time per job from ``recovery.resumed`` events (:meth:`add`, any order, duplicates of an
    incident counted once). A job is ``namespace/name`` (a resubmitted job, a new UID, continues the same training).
    Bounded by the jobs and incidents in the events read."""

    resumed: dict[str, _Resumed] = field(default_factory=dict)  # incident id -> its figures
    rejected: int = 0

    def add(self, data: Mapping[str, Any]) -> GoodputEventError | None:
        """Fold one ``recovery.resumed`` event's `data`; returns why it was refused (counted in :attr:`rejected`)."""
        try:
            r = read_resumed(data)
        except GoodputEventError as e:
            self.rejected += 1
            return e
        self.resumed.setdefault(r.incident_id, r)
        return None

    def report(self, now: datetime, *, since: datetime | None = None, namespace: str | None = None) -> list[JobGoodput]:
        """One row per job (sorted by namespace, name): wall time from the job's first step (or `since`, when
        later) to `now`, and the lost time of the incidents whose first step after the restart falls in that
        window (an incident that began before `since` counts whole). Only `namespace`'s jobs when given."""
        jobs: dict[tuple[str, str], JobTraining] = {}
        for r in sorted(self.resumed.values(), key=lambda x: x.first_step_at):
            if namespace is not None and r.namespace != namespace:
                continue
            start = r.job_first_step_at if since is None else max(since, r.job_first_step_at)
            account = jobs.setdefault((r.namespace, r.name), JobTraining(start))
            account.first_step_at = min(account.first_step_at, start)
            if since is not None and r.first_step_at < since:
                continue
            account.add(r.lost, max(r.stopped_at, since) if since is not None else r.stopped_at, r.work_lost_steps)
        return [JobGoodput(ns, name, acc.summary(now)) for (ns, name), acc in sorted(jobs.items())]
