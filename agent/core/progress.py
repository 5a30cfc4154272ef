"""Training progress from a per-job heartbeat Lease, and hang detection over it. Pure: no I/O, no clock reads.

The heartbeat (docs/progress.md argues its name and shape): rank 0 of a job that opted in with the job label
``fault-agent.io/progress: lease`` keeps one ``coordination.k8s.io/v1`` Lease in the job's namespace, named
``fault-agent-progress-<job>`` and labelled ``fault-agent.io/progress=lease`` and ``fault-agent.io/job=<job>``.
``spec.holderIdentity`` is the writing pod's name, ``spec.renewTime`` the writer's time of the write,
``spec.leaseDurationSeconds`` the longest gap it promises between writes while training makes progress; the
annotations carry the progress:

- ``fault-agent.io/step``: the last completed training step, a non-negative integer (required);
- ``fault-agent.io/step-time-s``: the recent seconds per step, a positive number (optional);
- ``fault-agent.io/checkpoint-step``: the step of the last checkpoint written completely (optional);
- ``fault-agent.io/checkpointing``: ``true`` while a checkpoint is being written (optional).

The writer is agent.training.progress_client. Progress is timed on the agent's clock (when the agent saw the step
change), never on the writer's ``renewTime``, so clock skew between nodes does not move a hang.

Hang rule (:class:`HangDetector`): a job whose step has not changed for its hang timeout is hung. The timeout is
the job label ``fault-agent.io/hang-timeout-s`` or, without it, ``step_time_multiple`` × the step time, clamped to
[floor, ceiling]; never below the Lease's ``leaseDurationSeconds``. No hang before the agent has seen the step
change once since it started watching or since the job's restart counter moved (the first step after a (re)start),
and the timeout is at least ``checkpoint_max_s`` while the Lease says a checkpoint is being written. A hang is a
business fault (reason ``hang``) of the pod the Lease names (rank 0), so the policy charges the job's business
retry budget (``fault-retry-times``) as MindCluster charges a business failure, and a hang on a node whose hardware
fault already opened an incident joins that incident. A bad or missing signal is rejected once and never acted on.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from agent.core.checkpoint_wait import CheckpointReading
from agent.core.cluster import JobKey, JobKind, JobRecord, PodRecord
from agent.core.detect.common import DetectResult
from agent.core.faults import Fault, FaultCleared, FaultKind, FaultLevel, ObjectRef, Rejection

PROGRESS_LABEL = "fault-agent.io/progress"
"""The job label that opts a job in (value :data:`PROGRESS_LEASE`); the heartbeat Lease carries it too."""
PROGRESS_LEASE = "lease"
"""The heartbeat Lease signal (the value of :data:`PROGRESS_LABEL`)."""
PROGRESS_PROMETHEUS = "prometheus"
"""The Prometheus signal: a PromQL query per job (agent.core.progress_prom)."""
PROMETHEUS_SOURCE_KIND = "PrometheusQuery"
"""The ``kind`` of the source ref of a reading taken from Prometheus (namespace and name: the job's)."""
SIGNALS = {"Lease": PROGRESS_LEASE, PROMETHEUS_SOURCE_KIND: PROGRESS_PROMETHEUS}
"""A reading's source kind → the :data:`PROGRESS_LABEL` value under which a job is followed through it."""
HANG_TIMEOUT_LABEL = "fault-agent.io/hang-timeout-s"
"""Optional job label: seconds without a step change after which the job is hung (an integer)."""
LEASE_JOB_LABEL = "fault-agent.io/job"
"""The heartbeat Lease's label naming its job (the job's ``metadata.name``)."""
LEASE_PREFIX = "fault-agent-progress-"
"""The heartbeat Lease's name: this prefix and the job's name."""
STEP_ANNOTATION = "fault-agent.io/step"
STEP_TIME_ANNOTATION = "fault-agent.io/step-time-s"
CHECKPOINT_STEP_ANNOTATION = "fault-agent.io/checkpoint-step"
CHECKPOINTING_ANNOTATION = "fault-agent.io/checkpointing"
RANK_STEP_TIMES_ANNOTATION = "fault-agent.io/rank-step-times-s"
"""Per-pod-rank step times (seconds, comma separated, rank order) for straggler detection (agent.core.straggler)."""
LEASE_ANNOTATIONS = frozenset(
    {STEP_ANNOTATION, STEP_TIME_ANNOTATION, CHECKPOINT_STEP_ANNOTATION, CHECKPOINTING_ANNOTATION,
     RANK_STEP_TIMES_ANNOTATION}
)  # fmt: skip
"""The annotations the source keeps on a :class:`LeaseRecord` (the others are dropped)."""

HANG_REASON = "hang"
"""The reason (and the one code) of a hang fault."""
HANG_TIMEOUT_MIN_S = 5
HANG_TIMEOUT_MAX_S = 7 * 24 * 3600
"""The values :data:`HANG_TIMEOUT_LABEL` may take (seconds); another value is rejected and the derived one used."""
_MAX_STEP = 2**63 - 1


def lease_name(job: str) -> str:
    """The heartbeat Lease's name for job `job` (``fault-agent-progress-<job>``)."""
    return f"{LEASE_PREFIX}{job}"


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """A watched heartbeat Lease, slimmed (agent.sources.leases).

    Attributes:
        job: its :data:`LEASE_JOB_LABEL` label ("" when absent).
        holder: ``spec.holderIdentity`` (the writing pod's name; "" when absent).
        renew_time: ``spec.renewTime`` (the writer's clock; None when absent or unreadable).
        duration_s: ``spec.leaseDurationSeconds`` (None when absent).
        annotations: only the :data:`LEASE_ANNOTATIONS`, as written.
    """

    namespace: str
    name: str
    uid: str
    resource_version: str
    job: str
    holder: str
    renew_time: datetime | None
    duration_s: int | None
    annotations: tuple[tuple[str, str], ...]

    @property
    def key(self) -> str:
        """``namespace/name``, the state's key."""
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef("Lease", self.namespace, self.name, self.uid)

    def annotation(self, key: str) -> str | None:
        return next((v for k, v in self.annotations if k == key), None)


@dataclass(frozen=True, slots=True)
class Progress:
    """What a heartbeat says: `step` (completed steps), `step_time_s` (seconds per step, None when not given),
    `checkpoint_step` (last complete checkpoint, None when not given), `checkpointing` (one is being written)."""

    step: int
    step_time_s: float | None
    checkpoint_step: int | None
    checkpointing: bool


def _count(text: str) -> int | None:
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    value = int(text)
    return value if value <= _MAX_STEP else None


def parse_progress(lease: LeaseRecord) -> Progress | Rejection:
    """Read `lease`'s progress annotations.

    Rejection reasons (source kind ``Lease``): ``no-job-label`` (no :data:`LEASE_JOB_LABEL`), ``missing-step``,
    ``bad-step`` (not a non-negative integer), ``bad-step-time`` (not a finite positive number),
    ``bad-checkpoint-step``, ``bad-checkpointing`` (not ``true``/``false``).
    """
    ref = lease.ref
    if not lease.job:
        return Rejection(ref, "no-job-label", f"the Lease has no {LEASE_JOB_LABEL} label")
    text = lease.annotation(STEP_ANNOTATION)
    if text is None:
        return Rejection(ref, "missing-step", f"no {STEP_ANNOTATION} annotation")
    step = _count(text)
    if step is None:
        return Rejection(ref, "bad-step", f"{STEP_ANNOTATION}={text[:40]!r} is not a non-negative integer")
    step_time: float | None = None
    raw = lease.annotation(STEP_TIME_ANNOTATION)
    if raw is not None:
        try:
            step_time = float(raw)
        except ValueError:
            step_time = None
        if step_time is None or not math.isfinite(step_time) or step_time <= 0:
            return Rejection(ref, "bad-step-time", f"{STEP_TIME_ANNOTATION}={raw[:40]!r} is not a positive number")
    checkpoint: int | None = None
    raw = lease.annotation(CHECKPOINT_STEP_ANNOTATION)
    if raw is not None:
        checkpoint = _count(raw)
        if checkpoint is None:
            return Rejection(
                ref, "bad-checkpoint-step", f"{CHECKPOINT_STEP_ANNOTATION}={raw[:40]!r} is not a non-negative integer"
            )
    raw = lease.annotation(CHECKPOINTING_ANNOTATION)
    if raw not in (None, "true", "false"):
        return Rejection(ref, "bad-checkpointing", f"{CHECKPOINTING_ANNOTATION}={str(raw)[:40]!r} is not true/false")
    return Progress(step, step_time, checkpoint, raw == "true")


def hang_timeout_label_problem(value: str | None) -> str | None:
    """Why the :data:`HANG_TIMEOUT_LABEL` value `value` cannot be used, or None (absent or usable)."""
    if value is None:
        return None
    n = _count(value)
    if n is None or not HANG_TIMEOUT_MIN_S <= n <= HANG_TIMEOUT_MAX_S:
        return f"not an integer {HANG_TIMEOUT_MIN_S}–{HANG_TIMEOUT_MAX_S} (seconds); the derived timeout applies"
    return None


@dataclass(frozen=True, slots=True)
class HangSettings:
    """The hang rule's bounds (agent.settings.ProgressSettings): `floor_s` and `ceiling_s` clamp a derived
    timeout, `step_time_multiple` × the step time derives it, `checkpoint_max_s` is the least timeout while a
    checkpoint is written. Seconds."""

    floor_s: float
    ceiling_s: float
    step_time_multiple: float
    checkpoint_max_s: float


def hang_timeout(
    label: str | None, step_time_s: float | None, duration_s: int | None, checkpointing: bool, s: HangSettings
) -> tuple[float, str]:
    """The hang timeout in seconds and where it came from (``label``, ``step-time``, ``ceiling``).

    `label`: the job's :data:`HANG_TIMEOUT_LABEL` (an unusable value is ignored here; see
    :func:`hang_timeout_label_problem`); `step_time_s`: the heartbeat's step time (None: unknown, the ceiling
    applies); `duration_s`: the Lease's ``leaseDurationSeconds``, a lower bound (the writer's longest promised gap);
    `checkpointing`: a checkpoint is being written (at least ``checkpoint_max_s``)."""
    if label is not None and hang_timeout_label_problem(label) is None:
        timeout, source = float(label), "label"
    elif step_time_s is not None:
        timeout = min(s.ceiling_s, max(s.floor_s, s.step_time_multiple * step_time_s))
        source = "step-time"
    else:
        timeout, source = s.ceiling_s, "ceiling"
    if duration_s is not None and duration_s > timeout:
        timeout = float(duration_s)
    if checkpointing:
        timeout = max(timeout, s.checkpoint_max_s)
    return timeout, source


class ProgressSource(Protocol):
    """Where a reading came from, as :class:`HangDetector` follows it: a :class:`LeaseRecord`, or a reading taken
    from Prometheus (agent.core.progress_prom.PrometheusReading). `key`: the detector's key for it; `job`: the
    job's name (in `namespace`); `holder`: the pod that writes it ("" when unknown: rank 0 is charged);
    `duration_s`: the longest gap its writer promises between fresh readings (a lower bound of the timeout)."""

    @property
    def key(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def job(self) -> str: ...
    @property
    def holder(self) -> str: ...
    @property
    def duration_s(self) -> int | None: ...
    @property
    def ref(self) -> ObjectRef: ...


@dataclass(frozen=True, slots=True)
class Hang:
    """One hang found by :meth:`HangDetector.tick`: the fault and what the ``job.hung`` event reports."""

    fault: Fault
    job: JobRecord
    step: int
    checkpoint_step: int | None
    idle_s: float
    timeout_s: float
    timeout_from: str


@dataclass(frozen=True, slots=True)
class Resumed:
    """The first step the agent saw a job take after its restart counter moved: `job` (as watched then), `step`,
    `checkpoint_step` (None: not reported) and `at` (when the agent saw the step change, its clock)."""

    job: JobRecord
    step: int
    checkpoint_step: int | None
    at: datetime


@dataclass
class _Track:
    """One Lease as the detector follows it. `since`: when the agent saw `step` first (agent clock); `armed`: the
    step changed since the agent began following or since the job's restart counter last moved; `version`: that
    counter when last seen; `hung`: the hang fault raised and not yet cleared; `restarted`: the counter moved and
    no step was seen since; `resumed_at`: when the first step after that was seen (reported at the next tick);
    `checkpoint_at`: when the agent saw the checkpoint step take its current value (None: it was there when the
    agent began following the Lease; agent.core.checkpoint_wait)."""

    lease: ProgressSource
    progress: Progress
    since: datetime
    armed: bool = False
    version: str | None = None
    hung: Fault | None = None
    restarted: bool = False
    resumed_at: datetime | None = None
    checkpoint_at: datetime | None = None
    seq: int = 0  # when the detector began following it: ticks visit tracks in this order (the dict's)
    due_at: datetime | None = None  # the deadline queued for it (HangDetector._due), None: none queued


DEADLINE_MARGIN_US = 2
"""Microseconds a queued deadline is put before the timeout (:func:`due_before`): the queued time is then never after
the first `now` at which the float compare of the idle seconds with the timeout (which decides) holds, so no tick
that would find something is skipped; a tick that looks too early finds nothing and queues the deadline again."""


def due_before(since: datetime, timeout_s: float) -> datetime | None:
    """A time at or before the first `now` with ``(now - since).total_seconds() >= timeout_s`` (the hang rule's
    compare): `since` + the timeout in whole microseconds, less :data:`DEADLINE_MARGIN_US`. None: beyond the
    calendar (never due)."""
    try:
        return since + timedelta(microseconds=math.floor(timeout_s * 1e6) - DEADLINE_MARGIN_US)
    except OverflowError:
        return None


JobLookup = Callable[[str, str], tuple[JobRecord | None, list[PodRecord]]]
"""(namespace, job name) → the opted-in job of that name (None when none) and its pods."""


@dataclass
class HangDetector:
    """Follows the heartbeat Leases and raises a hang fault per job whose step stopped (see the module docstring).

    Use: :meth:`update` on every Lease written, :meth:`delete` when one goes, :meth:`tick` once a second; with
    :attr:`lookup` set, :meth:`update` also sees a job's restart between ticks.

    A tick given the jobs touched since the last one looks only at the tracks that can find something (issue 39:
    no per-tick work proportional to the Leases followed): those whose reading changed, those of the jobs touched,
    those whose hang deadline passed (a heap of deadlines: a tick that passes none looks at none), and
    those whose job's restart counter moved at the last tick; in the order of :attr:`tracks`, each exactly as a
    look at every track would, so the faults, rejections and first steps are the same at the same ticks.
    """

    settings: HangSettings
    tracks: dict[str, _Track] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # Lease key -> the rejection reason reported
    resumed: list[Resumed] = field(default_factory=list)  # first steps after a restart, found by tick; the caller
    # takes them (bounded by the jobs followed: one per restart, taken every tick)
    lookup: JobLookup | None = None  # when given, a Lease write first checks its job's restart counter (see update)
    visits: int = 0  # tracks looked at by tick, in all (the work a tick does; the tests count it)
    _seq: int = 0
    _dirty: set[str] = field(default_factory=set)  # tracks to look at next tick whatever the jobs touched
    _due: list[tuple[datetime, int, str]] = field(default_factory=list)  # heap of (deadline, seq, key)
    _by_job: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (namespace, job) -> its tracks' keys

    def _follow(self, key: str, track: _Track, source: ProgressSource) -> None:
        """`track` (at `key`) now reads `source`: indexed under its job, looked at by the next tick."""
        old = track.lease
        if old is not source and (old.namespace, old.job) != (source.namespace, source.job):
            keys = self._by_job.get((old.namespace, old.job))
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_job[(old.namespace, old.job)]
        track.lease = source
        self._by_job.setdefault((source.namespace, source.job), set()).add(key)
        self._dirty.add(key)

    def update(self, lease: LeaseRecord, now: datetime) -> DetectResult:
        """A Lease written: its progress read (a bad one rejected once per reason, its last good reading kept) and
        a changed step noted at `now`; a step change of a hung job clears its hang."""
        out = DetectResult()
        got = parse_progress(lease)
        if isinstance(got, Rejection):
            if self.rejected.get(lease.key) != got.reason:
                self.rejected[lease.key] = got.reason
                out.rejections.append(got)
            track = self.tracks.get(lease.key)
            if track is not None:
                self._follow(lease.key, track, lease)
            return out
        self.rejected.pop(lease.key, None)
        track = self.tracks.get(lease.key)
        if self.lookup is not None and track is not None and track.version is not None:
            # the job's restart counter may have moved since the last tick: a step written now is then the first
            # of the new generation, not one to wait past (else the first step counted is the next write's)
            job, _ = self.lookup(lease.namespace, lease.job)
            signal = SIGNALS.get(lease.ref.kind)
            if job is not None and job.label(PROGRESS_LABEL) == signal and job.version != track.version:
                _restarted(track, job.version, now)
                self._dirty.add(lease.key)
        return self.observe(lease, got, now)

    def observe(self, source: ProgressSource, got: Progress, now: datetime) -> DetectResult:
        """A reading `got` from `source` taken at `now` (a Lease's, or one from Prometheus): a changed step noted;
        a step change of a hung job clears its hang."""
        out = DetectResult()
        track = self.tracks.get(source.key)
        if track is None:
            self._seq += 1
            track = self.tracks[source.key] = _Track(source, got, now, seq=self._seq)
            self._follow(source.key, track, source)
            return out
        moved = got.step != track.progress.step
        if got.checkpoint_step != track.progress.checkpoint_step:
            track.checkpoint_at = now
        self._follow(source.key, track, source)
        track.progress = got
        if moved:
            track.since = now
            track.armed = True
            if track.restarted:
                track.restarted, track.resumed_at = False, now
            if track.hung is not None:
                out.cleared.append(FaultCleared(track.hung, now, source.ref))
                track.hung = None
        return out

    def blind(self, key: str, now: datetime) -> None:
        """No reading could be taken at `now` for `key` (its source did not answer, or answered nothing usable):
        the idle time restarts at `now`, so a hang needs a whole timeout of readings that all show the same step
        and a gap in the signal never counts as a stall. The last reading, and whether the track is armed, stay."""
        track = self.tracks.get(key)
        if track is not None and track.hung is None:
            track.since = max(track.since, now)
            self._dirty.add(key)

    def checkpoint_reading(self, namespace: str, job: str) -> CheckpointReading | None:
        """The job `namespace/job`'s heartbeat as followed now, for a checkpoint-aware wait
        (agent.core.checkpoint_wait); None when its Lease is not followed (absent, or never readable)."""
        track = self.tracks.get(f"{namespace}/{lease_name(job)}")
        if track is None:
            return None
        return CheckpointReading(track.progress.step, track.progress.checkpoint_step, track.checkpoint_at)

    def delete(self, key: str, now: datetime) -> DetectResult:
        """The Lease at `key` is gone: forgotten; its hang (if any) cleared."""
        out = DetectResult()
        self.rejected.pop(key, None)
        track = self.tracks.pop(key, None)
        self._dirty.discard(key)
        if track is not None:
            job = (track.lease.namespace, track.lease.job)
            keys = self._by_job.get(job)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_job[job]
        if track is not None and track.hung is not None:
            out.cleared.append(FaultCleared(track.hung, now, track.lease.ref))
        return out

    def tick(
        self, now: datetime, lookup: JobLookup, touched: Iterable[tuple[str, str]] | None = None
    ) -> tuple[DetectResult, list[Hang]]:
        """The Leases whose step has not changed for their timeout at `now`: one hang fault each (once per
        stall). A Lease whose job (looked up by `lookup`) is not there, has not opted in or has no pods is
        skipped; a job whose restart counter moved waits for its first step again, and that first step is added to
        :attr:`resumed`. Returns the faults (and the rejections of unusable timeout labels, once per value) and the
        hangs they came from.

        `touched`: the ``(namespace, job name)`` of every job whose record or pods changed since the last tick
        (agent.sources.state.JobTouches); then only the tracks that can find something are looked at (see the
        class docstring). None: every track is looked at."""
        out = DetectResult()
        hangs: list[Hang] = []
        if touched is None:
            self._due.clear()
            for track in self.tracks.values():
                track.due_at = None
            keys: list[str] = list(self.tracks)
        else:
            todo = self._dirty
            for job in touched:
                todo.update(self._by_job.get(job, ()))
            while self._due and self._due[0][0] <= now:
                due_at, _, key = heapq.heappop(self._due)
                queued = self.tracks.get(key)
                if queued is not None and queued.due_at == due_at:
                    queued.due_at = None
                    todo.add(key)
            keys = sorted((k for k in todo if k in self.tracks), key=lambda k: self.tracks[k].seq)
        self._dirty = set()
        for key in keys:
            self._look(key, self.tracks[key], now, lookup, out, hangs)
        if len(self._due) > 2 * len(self.tracks) + 64:  # deadlines moved on since: the heap rebuilt without them
            self._due = [(t.due_at, t.seq, k) for k, t in self.tracks.items() if t.due_at is not None]
            heapq.heapify(self._due)
        return out, hangs

    def _look(
        self, key: str, track: _Track, now: datetime, lookup: JobLookup, out: DetectResult, hangs: list[Hang]
    ) -> None:
        """One track at `now`, as :meth:`tick` describes; what it leaves to a later tick is queued: a deadline, or
        the next tick after a restart."""
        self.visits += 1
        lease = track.lease
        job, pods = lookup(lease.namespace, lease.job)
        if job is None or job.label(PROGRESS_LABEL) != SIGNALS.get(lease.ref.kind):
            return  # the job follows another signal now: this one is not its progress
        if job.version != track.version:
            _restarted(track, job.version, now)
            self._dirty.add(key)  # the next tick goes on from here
            return
        label = job.label(HANG_TIMEOUT_LABEL)
        problem = hang_timeout_label_problem(label)
        if problem is not None and self.rejected.get(f"label:{key}") != label:
            self.rejected[f"label:{key}"] = str(label)
            ref = ObjectRef(job.kind.api_kind, job.namespace, job.name, job.uid)
            out.rejections.append(Rejection(ref, "bad-hang-timeout", f"{HANG_TIMEOUT_LABEL}={label!r}: {problem}"))
        if track.resumed_at is not None:
            p = track.progress
            self.resumed.append(Resumed(job, p.step, p.checkpoint_step, track.resumed_at))
            track.resumed_at = None
        if not track.armed or track.hung is not None:
            return
        p = track.progress
        timeout, source = hang_timeout(label, p.step_time_s, lease.duration_s, p.checkpointing, self.settings)
        idle = (now - track.since).total_seconds()
        if idle < timeout:
            due_at = due_before(track.since, timeout)
            if due_at is not None and due_at != track.due_at:
                track.due_at = due_at
                heapq.heappush(self._due, (due_at, track.seq, key))
            return
        pod = _writer(lease, pods)
        if pod is None:
            return  # looked at again when the job or its pods change
        fault = Fault(
            kind=FaultKind.BUSINESS,
            level=FaultLevel.RESTART_BUSINESS,
            node=pod.node,
            chips=(),
            codes=(HANG_REASON,),
            signal_time=track.since + timedelta(seconds=timeout),
            observed_at=now,
            source=lease.ref,
            reason=HANG_REASON,
            pod=ObjectRef("Pod", pod.namespace, pod.name, pod.uid),
        )
        track.hung = fault
        out.faults.append(fault)
        hangs.append(Hang(fault, job, p.step, p.checkpoint_step, idle, timeout, source))


def _restarted(track: _Track, version: str | None, now: datetime) -> None:
    """`track`'s job now has restart counter `version` (seen at `now`): it restarted (or is seen first), so no hang
    before its first step in this generation, and that first step is a resume when a counter was seen before."""
    track.restarted = track.version is not None
    track.resumed_at = None
    track.version = version
    track.armed = False
    track.since = now


def progress_label_problem(value: str | None) -> str | None:
    """Why the job label :data:`PROGRESS_LABEL` value `value` cannot be used, or None (absent or ``lease``)."""
    if value is None or value in SIGNALS.values():
        return None
    return f"not one of {sorted(SIGNALS.values())}; the job's progress is not followed"


class JobIndex(Protocol):
    """The jobs :meth:`SignalCheck.check_touched` reads (agent.sources.state.ClusterState is one): a job by kind
    and name, where it comes in a scan of every job, its pods, and the heartbeat Leases by ``namespace/name``."""

    @property
    def leases(self) -> Mapping[str, LeaseRecord]: ...
    def job(self, kind: JobKind, namespace: str, name: str) -> JobRecord | None: ...
    def job_position(self, kind: JobKind, namespace: str, name: str) -> tuple[int, int]: ...
    def pods_of_job(self, kind: JobKind, namespace: str, name: str) -> list[PodRecord]: ...


@dataclass
class SignalCheck:
    """Reports, once each, the jobs whose progress signal is unusable or missing (never an action):

    - ``bad-progress-label``: the job's :data:`PROGRESS_LABEL` is not a known signal (:data:`SIGNALS`; once per
      job UID and value);
    - ``no-heartbeat``: the job opted in and its oldest live pod has run for `grace_s` seconds, but its Lease
      (:func:`lease_name`) does not exist (once per job UID, again after the Lease appeared and went).

    :meth:`check` looks at every job; :meth:`check_touched` only at the jobs touched since the last check and those
    whose grace ends (a heap of deadlines), with the same outcome at the same checks (issue 39: no per-tick work
    proportional to the jobs).
    """

    grace_s: float
    reported: dict[str, str] = field(default_factory=dict)  # job UID -> the last problem reported
    visits: int = 0  # jobs looked at, in all (the work a check does; the tests count it)
    _uid_at: dict[JobKey, str] = field(default_factory=dict)  # a job whose UID has a report -> that UID
    _due: list[tuple[datetime, JobKey]] = field(default_factory=list)  # heap of (grace ends, job)
    _due_at: dict[JobKey, datetime] = field(default_factory=dict)  # the deadline queued per job

    def check(
        self, jobs: list[JobRecord], pods_of: Callable[[JobRecord], list[PodRecord]], leases: set[str], now: datetime
    ) -> list[Rejection]:
        """The new problems among `jobs` (with `leases`: the ``namespace/name`` of the Leases that exist): every job
        is looked at, and a report of a job not among them is forgotten."""
        out: list[Rejection] = []
        seen: set[str] = set()
        self._uid_at.clear()
        self._due.clear()
        self._due_at.clear()
        for job in jobs:
            if self._look(job, pods_of, leases.__contains__, now, out):
                seen.add(job.uid)
        for uid in [u for u in self.reported if u not in seen]:  # jobs gone or no longer opted in: forgotten
            del self.reported[uid]
        return out

    def check_touched(self, touched: Iterable[tuple[str, str]], index: JobIndex, now: datetime) -> list[Rejection]:
        """The new problems among the jobs `touched` (``(namespace, name)``, any kind: a job, its pods or its Lease
        changed since the last check) and those whose grace ended by `now`, taken in the order of a scan of every
        job; a report of a job gone, created again or no longer opted in is forgotten. After one :meth:`check`
        (every job), the same as :meth:`check` would give at each call."""
        keys: set[JobKey] = {(kind, ns, name) for ns, name in touched for kind in JobKind}
        while self._due and self._due[0][0] <= now:
            due_at, key = heapq.heappop(self._due)
            if self._due_at.get(key) == due_at:
                del self._due_at[key]
                keys.add(key)
        out: list[Rejection] = []
        leases = index.leases
        for key in sorted(keys, key=lambda k: index.job_position(*k)):
            job = index.job(*key)
            uid = self._uid_at.get(key)
            labelled = job is not None and job.label(PROGRESS_LABEL) is not None
            if uid is not None and (job is None or not labelled or job.uid != uid):
                self.reported.pop(uid, None)  # gone, created again or no longer opted in: forgotten
                del self._uid_at[key]
            if job is not None and labelled:
                self._look(job, lambda j: index.pods_of_job(j.kind, j.namespace, j.name), leases.__contains__, now,
                           out)  # fmt: skip
        if len(self._due) > 2 * len(self._due_at) + 64:  # deadlines moved on since: the heap rebuilt without them
            self._due = [(at, key) for key, at in self._due_at.items()]
            heapq.heapify(self._due)
        return out

    def _look(
        self,
        job: JobRecord,
        pods_of: Callable[[JobRecord], list[PodRecord]],
        lease_exists: Callable[[str], bool],
        now: datetime,
        out: list[Rejection],
    ) -> bool:
        """One job at `now`: its new problem added to `out`, the end of its grace queued when it is to come.
        Returns whether it opted in (its label is there)."""
        self.visits += 1
        value = job.label(PROGRESS_LABEL)
        if value is None:
            return False
        key = (job.kind, job.namespace, job.name)
        if job.uid in self.reported:
            self._uid_at[key] = job.uid  # (after a check() that forgot where the reports are)
        ref = ObjectRef(job.kind.api_kind, job.namespace, job.name, job.uid)
        problem = progress_label_problem(value)
        if problem is not None:
            mark = f"label:{value}"
            if self.reported.get(job.uid) != mark:
                self.reported[job.uid] = mark
                self._uid_at[key] = job.uid
                out.append(Rejection(ref, "bad-progress-label", f"{PROGRESS_LABEL}={value[:40]!r}: {problem}"))
            return True
        if value != PROGRESS_LEASE:  # another signal reports its own gaps (agent.core.progress_prom)
            return True
        if lease_exists(f"{job.namespace}/{lease_name(job.name)}"):
            if self.reported.get(job.uid) == "missing":
                del self.reported[job.uid]
            return True
        started = [p.created_at for p in pods_of(job) if p.phase == "Running" and p.created_at is not None]
        if not started:
            return True  # looked at again when its pods change
        if (now - min(started)).total_seconds() < self.grace_s:
            due_at = due_before(min(started), self.grace_s)
            if due_at is not None and self._due_at.get(key) != due_at:
                self._due_at[key] = due_at
                heapq.heappush(self._due, (due_at, key))
            return True
        if self.reported.get(job.uid) != "missing":
            self.reported[job.uid] = "missing"
            self._uid_at[key] = job.uid
            out.append(Rejection(ref, "no-heartbeat", f"no Lease {job.namespace}/{lease_name(job.name)} after "
                                 f"{self.grace_s:.0f} s of training: no hang detection for this job"))  # fmt: skip
        return True


def _writer(lease: ProgressSource, pods: list[PodRecord]) -> PodRecord | None:
    """The pod a hang is charged to: the Lease's holder when it is one of the job's pods, else the job's rank 0,
    else its first pod by name; finished and deleting pods left out. None: the job has no such pod."""
    live = sorted((p for p in pods if p.phase not in ("Succeeded", "Failed") and p.deletion_timestamp is None),
                  key=lambda p: p.name)  # fmt: skip
    if not live:
        return None
    return (
        next((p for p in live if p.name == lease.holder), None)
        or next((p for p in live if p.rank == 0), None)
        or live[0]
    )


def is_hang(fault: Fault) -> bool:
    """True for a fault :class:`HangDetector` raised."""
    return fault.kind is FaultKind.BUSINESS and fault.reason == HANG_REASON and fault.source.kind in SIGNALS
