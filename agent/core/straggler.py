"""Straggler detection from the per-rank step times in a job's heartbeat Lease. Pure: no I/O, no clock reads.

The signal (docs/progress.md argues it): rank 0 of a job labelled ``fault-agent.io/straggler: detect`` or
``avoid`` (besides ``fault-agent.io/progress: lease``) adds to its heartbeat Lease the annotation
``fault-agent.io/rank-step-times-s``: one number per pod rank (the pod's ``hccl/rankIndex``, 0, 1, …), comma
separated, each the seconds that pod's training processes spent computing per step (the slowest process of the
pod; time waiting in collectives left out, or every rank would read the same) since the previous write. Rank 0
gathers these from the collective it already runs (one ``all_gather`` of one float per process every write), so
the per-rank variant costs no apiserver write beyond the job's one heartbeat per interval.

Rule (:class:`StragglerDetector`): each heartbeat write whose step moved since the previous one is one *window*.
A pod rank whose time is above ``multiple`` × the window's median (the lower median, so a job of two pods has a
healthy reference) for ``windows`` consecutive windows is a straggler: one :class:`Straggler` finding per episode.
The episode ends (:class:`StragglerEnded`) when the rank is at or below the multiple for ``windows`` consecutive
windows (``recovered``), when the job's restart counter moves (``restarted``: its pods were replaced), when the job
goes or stops opting in (``job-gone``, ``opted-out``), when its Lease goes (``lease-gone``) or when the number of
ranks reported changes (``ranks-changed``). Windows with fewer than ``min_ranks`` ranks are not judged. A finding
never restarts anything; with ``avoid`` the engine marks the straggler's node sub-healthy (agent.engine.stragglers).
Bad signals (an unreadable annotation, an unusable label, a rank no pod holds) are reported once and not acted on.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from agent.core.cluster import JobRecord, PodRecord
from agent.core.faults import ObjectRef, Rejection
from agent.core.progress import RANK_STEP_TIMES_ANNOTATION, LeaseRecord, Progress, parse_progress

STRAGGLER_LABEL = "fault-agent.io/straggler"
"""The job label that opts a job in to straggler detection: ``detect`` (events and metrics) or ``avoid`` (also
marks the straggler's node sub-healthy so the next restart avoids it)."""
STRAGGLER_DETECT = "detect"
STRAGGLER_AVOID = "avoid"
STRAGGLER_MODES = (STRAGGLER_DETECT, STRAGGLER_AVOID)
MAX_RANKS = 20000
"""Most entries :data:`RANK_STEP_TIMES_ANNOTATION` may hold (about 200 KiB at 9 characters each, under the
apiserver's 256 KiB limit for all annotations of an object)."""
_PENDING_MAX = 64  # windows kept between two ticks per Lease (a tick takes them every second)
_INDEX = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True, slots=True)
class StragglerSettings:
    """The rule's settings (agent.settings.DetectSettings ``straggler_*``): `multiple` of the median above which a
    rank is slow, `windows` consecutive windows to find (and to clear) a straggler, `min_ranks` the fewest ranks a
    window must report to be judged."""

    multiple: float
    windows: int
    min_ranks: int


def parse_rank_step_times(text: str) -> tuple[float, ...] | str:
    """The per-rank step times in `text` (:data:`RANK_STEP_TIMES_ANNOTATION`), or why they cannot be read: not a
    comma-separated list of finite positive numbers, empty, or more than :data:`MAX_RANKS` entries."""
    parts = text.split(",")
    if len(parts) > MAX_RANKS:
        return f"{len(parts)} entries, more than {MAX_RANKS}"
    out: list[float] = []
    for i, part in enumerate(parts):
        try:
            value = float(part)
        except ValueError:
            return f"entry {i} ({part.strip()[:20]!r}) is not a number"
        if not math.isfinite(value) or value <= 0:
            return f"entry {i} ({part.strip()[:20]!r}) is not a positive number of seconds"
        out.append(value)
    return tuple(out)


def straggler_label_problem(value: str | None) -> str | None:
    """Why the job label :data:`STRAGGLER_LABEL` value `value` cannot be used, or None (absent or usable)."""
    if value is None or value in STRAGGLER_MODES:
        return None
    return f"not one of {', '.join(STRAGGLER_MODES)}; stragglers of this job are not looked for"


def rank_pod(rank: int, pods: list[PodRecord]) -> PodRecord | None:
    """The live pod of pod rank `rank` among a job's `pods`: the one whose ``hccl/rankIndex`` is `rank`; when no
    live pod carries a rank (a Volcano Job whose operator did not set it), the `rank`-th by the index at the end of
    its name (Volcano names them ``<job>-<task>-<index>``), then by name. None: no such pod."""
    live = [p for p in pods if p.phase not in ("Succeeded", "Failed") and p.deletion_timestamp is None]
    if any(p.rank is not None for p in live):
        return next((p for p in live if p.rank == rank), None)

    def order(p: PodRecord) -> tuple[str, int, str]:
        m = _INDEX.match(p.name)
        return (m.group(1), int(m.group(2)), p.name) if m else (p.name, -1, p.name)

    ordered = sorted(live, key=order)
    return ordered[rank] if 0 <= rank < len(ordered) else None


@dataclass(frozen=True, slots=True)
class Straggler:
    """One straggling episode found: `job`, the `pod` of pod rank `rank` (its node and chips name where),
    `step_time_s` its time in the window that made it a straggler, `median_s` that window's median, `step` the
    heartbeat's step then, `lease` the heartbeat, `at` when found (agent clock), `mode` the job's
    :data:`STRAGGLER_LABEL` value."""

    job: JobRecord
    pod: PodRecord
    rank: int
    step_time_s: float
    median_s: float
    multiple: float
    windows: int
    step: int
    lease: ObjectRef
    at: datetime
    mode: str

    @property
    def key(self) -> tuple[str, str, int]:
        """(``straggler``, job UID, rank): the quarantine reason key of an ``avoid`` episode."""
        return ("straggler", self.job.uid, self.rank)


@dataclass(frozen=True, slots=True)
class StragglerEnded:
    """The end of `straggler`'s episode at `at`: `cause` (see the module docstring); `step_time_s`, `median_s`:
    the rank's time and the median in the window that ended it (None when no window did)."""

    straggler: Straggler
    cause: str
    at: datetime
    step_time_s: float | None = None
    median_s: float | None = None


@dataclass
class StragglerNews:
    """What one :meth:`StragglerDetector.tick` found."""

    found: list[Straggler] = field(default_factory=list)
    ended: list[StragglerEnded] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)


@dataclass
class _RankTrack:
    """One Lease as the detector follows it: `step` the step of the last window, `pending` windows not judged yet
    ((step, times) in arrival order), `above`/`below` consecutive windows per rank, `active` episodes by rank,
    `ranks` the number of ranks of the last judged window, `version` the job's restart counter."""

    lease: LeaseRecord
    step: int | None = None
    pending: list[tuple[int, tuple[float, ...]]] = field(default_factory=list)
    above: dict[int, int] = field(default_factory=dict)
    below: dict[int, int] = field(default_factory=dict)
    active: dict[int, Straggler] = field(default_factory=dict)
    ranks: int | None = None
    version: str | None = None
    seq: int = 0  # when the detector began following it: ticks visit tracks in this order (the dict's)
    uid: str | None = None  # the UID of its job at its last look (None: no job)


StragglerLookup = Callable[[str, str], tuple[JobRecord | None, list[PodRecord]]]
"""(namespace, job name) → the job following its progress Lease (None when none) and its pods."""


@dataclass
class StragglerDetector:
    """Follows the per-rank step times of the heartbeat Leases (see the module docstring).

    Use: :meth:`update` on every Lease written, :meth:`delete` when one goes, :meth:`tick` once a second.
    Memory: one track per Lease carrying the annotation, at most :data:`_PENDING_MAX` windows each between ticks.

    A tick given the jobs touched since the last one looks only at the tracks written since (their windows) and
    those of the jobs touched (issue 39: no per-tick work proportional to the Leases followed), in the order of
    :attr:`tracks`, each exactly as a look at every track would: nothing else changes what a tick finds.
    """

    settings: StragglerSettings
    tracks: dict[str, _RankTrack] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # what was reported, by Lease key or job/rank mark
    visits: int = 0  # tracks looked at by tick, in all (the tests count it)
    _seq: int = 0
    _dirty: set[str] = field(default_factory=set)  # tracks written since the last tick
    _by_job: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (namespace, job) -> its tracks' keys
    _uids: dict[str, int] = field(default_factory=dict)  # job UID -> the tracks whose job it was at their last look
    _marks: dict[str, set[str]] = field(default_factory=dict)  # job UID -> its job/rank marks in `rejected`
    _unseen: set[str] = field(default_factory=set)  # job UIDs that lost their last track since the last tick
    _with_active: set[str] = field(default_factory=set)  # tracks with an episode going on

    def _index(self, key: str, track: _RankTrack, add: bool) -> None:
        job = (track.lease.namespace, track.lease.job)
        if add:
            self._by_job.setdefault(job, set()).add(key)
            return
        keys = self._by_job.get(job)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_job[job]

    def _seen(self, track: _RankTrack, uid: str | None) -> None:
        """`track`'s job is now the one with UID `uid` (None: none)."""
        if track.uid == uid:
            return
        if track.uid is not None:
            self._uids[track.uid] -= 1
            if not self._uids[track.uid]:
                del self._uids[track.uid]
                self._unseen.add(track.uid)
        if uid is not None:
            self._uids[uid] = self._uids.get(uid, 0) + 1
        track.uid = uid

    def _mark(self, mark: str, value: str) -> None:
        """A job or rank mark (``label:<uid>``, ``rank:<uid>:<rank>``) put in :attr:`rejected`."""
        self.rejected[mark] = value
        self._marks.setdefault(mark.split(":")[1], set()).add(mark)

    def update(self, lease: LeaseRecord, now: datetime) -> list[Rejection]:
        """A Lease written: a new window when its step moved and it carries readable per-rank step times; an
        unreadable annotation is rejected once per Lease and value kind (``bad-rank-step-times``)."""
        text = lease.annotation(RANK_STEP_TIMES_ANNOTATION)
        if text is None:
            return []
        progress = parse_progress(lease)
        if not isinstance(progress, Progress):
            return []  # the hang detector reports the Lease's unreadable progress
        times = parse_rank_step_times(text)
        mark = f"times:{lease.key}"
        if isinstance(times, str):
            if self.rejected.get(mark) is None:
                self.rejected[mark] = times
                return [Rejection(lease.ref, "bad-rank-step-times", f"{RANK_STEP_TIMES_ANNOTATION}: {times}")]
            return []
        self.rejected.pop(mark, None)
        track = self.tracks.get(lease.key)
        if track is None:
            self._seq += 1
            track = self.tracks[lease.key] = _RankTrack(lease, seq=self._seq)
        else:
            self._index(lease.key, track, add=False)
        track.lease = lease
        self._index(lease.key, track, add=True)
        self._dirty.add(lease.key)
        if track.step is not None and progress.step == track.step:
            return []  # no step since the last window: the same times again, not a new window
        track.step = progress.step
        track.pending.append((progress.step, times))
        del track.pending[:-_PENDING_MAX]
        return []

    def delete(self, key: str, now: datetime) -> list[StragglerEnded]:
        """The Lease at `key` is gone: its episodes end (``lease-gone``)."""
        self.rejected.pop(f"times:{key}", None)
        track = self.tracks.pop(key, None)
        if track is None:
            return []
        self._index(key, track, add=False)
        self._seen(track, None)
        self._dirty.discard(key)
        self._with_active.discard(key)
        return [StragglerEnded(s, "lease-gone", now) for s in track.active.values()]

    def active(self) -> list[Straggler]:
        """The episodes going on now (in track order; bounded by the tracks that have one)."""
        keys = sorted(self._with_active, key=lambda k: self.tracks[k].seq)
        return [s for k in keys for s in self.tracks[k].active.values()]

    def tick(
        self, now: datetime, lookup: StragglerLookup, touched: Iterable[tuple[str, str]] | None = None
    ) -> StragglerNews:
        """Judge the windows that arrived since the last tick (see the module docstring). `touched`: the
        ``(namespace, job name)`` of every job whose record or pods changed since the last tick
        (agent.sources.state.JobTouches); then only the tracks written since and those of the jobs touched are looked
        at (see the class docstring). None: every track is looked at."""
        news = StragglerNews()
        if touched is None:
            keys = list(self.tracks)
            self._unseen |= {m.split(":")[1] for m in self.rejected if not m.startswith("times:")}
        else:
            todo = self._dirty
            for job in touched:
                todo.update(self._by_job.get(job, ()))
            keys = sorted((k for k in todo if k in self.tracks), key=lambda k: self.tracks[k].seq)
        self._dirty = set()
        for key in keys:
            track = self.tracks[key]
            self._look(track, now, lookup, news)
            if track.active:
                self._with_active.add(key)
            else:
                self._with_active.discard(key)
        unseen, self._unseen = self._unseen, set()
        for uid in unseen:  # jobs no Lease names any more: their marks forgotten (bounded by the jobs followed)
            if uid not in self._uids:
                for mark in self._marks.pop(uid, ()):
                    self.rejected.pop(mark, None)
        return news

    def _look(self, track: _RankTrack, now: datetime, lookup: StragglerLookup, news: StragglerNews) -> None:
        """One track at `now`, as :meth:`tick` describes."""
        self.visits += 1
        lease = track.lease
        job, pods = lookup(lease.namespace, lease.job)
        self._seen(track, None if job is None else job.uid)
        if job is None:
            self._end_all(track, "job-gone", now, news)
            return
        mode = job.label(STRAGGLER_LABEL)
        problem = straggler_label_problem(mode)
        if mode is None or problem is not None:
            if problem is not None and self.rejected.get(f"label:{job.uid}") != mode:
                self._mark(f"label:{job.uid}", str(mode))
                ref = ObjectRef(job.kind.api_kind, job.namespace, job.name, job.uid)
                news.rejections.append(
                    Rejection(ref, "bad-straggler-label", f"{STRAGGLER_LABEL}={str(mode)[:40]!r}: {problem}")
                )
            self._end_all(track, "opted-out", now, news)
            return
        if job.version != track.version:
            if track.version is not None:
                self._end_all(track, "restarted", now, news)
            track.version = job.version
            track.pending.clear()  # windows of the pods before the restart (or before the agent knew the job)
            return
        pending, track.pending = track.pending, []
        for step, times in pending:
            self._judge(track, job, pods, mode, step, times, now, news)

    def _judge(
        self,
        track: _RankTrack,
        job: JobRecord,
        pods: list[PodRecord],
        mode: str,
        step: int,
        times: tuple[float, ...],
        now: datetime,
        news: StragglerNews,
    ) -> None:
        s = self.settings
        if track.ranks is not None and len(times) != track.ranks:
            self._end_all(track, "ranks-changed", now, news)
        track.ranks = len(times)
        if len(times) < s.min_ranks:
            track.above.clear()
            track.below.clear()
            return
        median = statistics.median_low(times)
        for rank, t in enumerate(times):
            slow = t > s.multiple * median
            track.above[rank] = track.above.get(rank, 0) + 1 if slow else 0
            track.below[rank] = 0 if slow else track.below.get(rank, 0) + 1
            episode = track.active.get(rank)
            if episode is not None:
                if track.below[rank] >= s.windows:
                    del track.active[rank]
                    news.ended.append(StragglerEnded(episode, "recovered", now, t, median))
                continue
            if track.above[rank] < s.windows:
                continue
            pod = rank_pod(rank, pods)
            if pod is None:
                mark = f"rank:{job.uid}:{rank}"
                if mark not in self.rejected:
                    self._mark(mark, "no-pod")
                    why = f"rank {rank} is slow but no live pod of the job holds it"
                    news.rejections.append(Rejection(track.lease.ref, "unknown-rank", why))
                continue
            found = Straggler(job, pod, rank, t, median, s.multiple, s.windows, step, track.lease.ref, now, mode)
            track.active[rank] = found
            news.found.append(found)

    def _end_all(self, track: _RankTrack, cause: str, now: datetime, news: StragglerNews) -> None:
        news.ended += [StragglerEnded(s, cause, now) for s in track.active.values()]
        track.active.clear()
        track.above.clear()
        track.below.clear()
        track.ranks = None
        track.pending.clear()
