"""Issue 39: no per-tick work proportional to the jobs followed. The hang and straggler detectors' ticks, the signal
check, the effective-training totals and restore_all look only at what changed (and at the deadlines passed), and
decide exactly what a look at every job decides, at the same ticks.

Two kinds of tests: equivalence (random sequences of Lease writes, job, pod and Lease changes and ticks, each fed to
the bounded part and to the full scan kept beside it as the oracle: HangDetector.tick and StragglerDetector.tick
without `touched`, SignalCheck.check, GoodputKeeper.totals, a scan of every job for restore_all), and work counts
(10,000 idle jobs with a heartbeat Lease: a tick reads no job; spies, not timings).
"""

from __future__ import annotations

import asyncio
import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import change
from support.fakes import CountingWriter

from agent.core.clock import FixedClock
from agent.core.cluster import JobKind, JobRecord, PodRecord
from agent.core.faults import Fault, FaultCleared
from agent.core.goodput import ProgressHistory
from agent.core.incidents import Incident, Phase
from agent.core.progress import (
    CHECKPOINTING_ANNOTATION,
    HANG_TIMEOUT_LABEL,
    PROGRESS_LABEL,
    RANK_STEP_TIMES_ANNOTATION,
    SIGNALS,
    STEP_ANNOTATION,
    STEP_TIME_ANNOTATION,
    HangDetector,
    HangSettings,
    LeaseRecord,
    Progress,
    Resumed,
    SignalCheck,
    lease_name,
)
from agent.core.straggler import STRAGGLER_LABEL, StragglerDetector, StragglerSettings
from agent.engine.detecting import DetectPipeline
from agent.engine.goodput import GoodputKeeper
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import Change, ChangeType
from agent.settings import Settings
from agent.sources.state import ClusterState

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
HANG = HangSettings(floor_s=10, ceiling_s=60, step_time_multiple=3, checkpoint_max_s=40)
SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 100}})


def _lease(job: str, step: int | None, *, step_time: str | None, checkpointing: bool, duration: int | None,
           holder: str = "", rank_times: str | None = None) -> LeaseRecord:  # fmt: skip
    notes: list[tuple[str, str]] = []
    if rank_times is not None:
        notes.append((RANK_STEP_TIMES_ANNOTATION, rank_times))
    if step is not None:
        notes.append((STEP_ANNOTATION, str(step)))
    if step_time is not None:
        notes.append((STEP_TIME_ANNOTATION, step_time))
    if checkpointing:
        notes.append((CHECKPOINTING_ANNOTATION, "true"))
    return LeaseRecord("ns", lease_name(job), f"uid-lease-{job}", "1", job, holder, T0, duration, tuple(notes))


class World:
    """A ClusterState driven at random, with the bounded parts and their oracles fed the same changes."""

    def __init__(self, seed: int, jobs: int = 6) -> None:
        self.rng = random.Random(seed)
        self.now = T0
        self.state = ClusterState()
        self.touched = self.state.follow_jobs(related=True)
        self.bounded, self.full = HangDetector(HANG), HangDetector(HANG)
        self.bounded.lookup = self.full.lookup = self.lookup
        self.signals, self.signals_full = SignalCheck(grace_s=25), SignalCheck(grace_s=25)
        rule = StragglerSettings(multiple=1.5, windows=2, min_ranks=2)
        self.stragglers, self.stragglers_full = StragglerDetector(rule), StragglerDetector(rule)
        self.names = [f"job{i}" for i in range(jobs)]
        self.steps = dict.fromkeys(self.names, 0)
        self.generation = 0
        self.ticks = 0
        self.signals_started = False
        self.straggler_news = 0

    def lookup(self, namespace: str, name: str) -> tuple[JobRecord | None, list[PodRecord]]:
        for kind in JobKind:  # as DetectPipeline._progress_job
            job = self.state.job(kind, namespace, name)
            if job is not None and job.label(PROGRESS_LABEL) in SIGNALS.values():
                return job, self.state.pods_of_job(kind, namespace, name)
        return None, []

    def apply(self, source: str, key: str, new: Any) -> None:
        old = self.state.store(source).get(key)
        if new is None:
            if old is not None:
                self.state.apply(change(source, key, None, old, type=ChangeType.DELETED))
        else:
            self.state.apply(change(source, key, new, old))

    def job(self, name: str) -> None:
        r = self.rng
        labels = {"fault-scheduling": "force"}
        progress = r.choice(["lease", "lease", "lease", None, "bogus", "prometheus"])
        if progress is not None:
            labels[PROGRESS_LABEL] = progress
        timeout = r.choice([None, None, "20", "45", "x"])
        if timeout is not None:
            labels[HANG_TIMEOUT_LABEL] = timeout
        straggler = r.choice([None, "detect", "detect", "avoid", "bogus"])
        if straggler is not None:
            labels[STRAGGLER_LABEL] = straggler
        kind = JobKind.ASCEND if name == "job5" else JobKind.VOLCANO
        old = self.state.job(kind, "ns", name)
        uid = old.uid if old is not None and r.random() < 0.7 else f"uid-{name}-{self.generation}"
        self.generation += 1
        version = str(r.randint(0, 2)) if kind is JobKind.VOLCANO else "0"
        source = "acjobs" if kind is JobKind.ASCEND else "vcjobs"
        self.apply(source, f"ns/{name}", factories.job(name, kind=kind, uid=uid, labels=labels, version=version))

    def pod(self, name: str) -> None:
        r = self.rng
        i = r.randint(0, 1)
        key = f"ns/{name}-{i}"
        if r.random() < 0.2:
            self.apply("pods", key, None)
            return
        kind = JobKind.ASCEND if name == "job5" else JobKind.VOLCANO
        phase = r.choice(["Running", "Running", "Pending", "Succeeded"])
        created = self.now - timedelta(seconds=r.choice([0, 5, 30]))
        self.apply("pods", key, factories.pod(f"{name}-{i}", job=name, job_kind=kind, rank=i, phase=phase,
                                              node=f"n{i}", created_at=created))  # fmt: skip

    def lease(self, name: str) -> None:
        r = self.rng
        key = f"ns/{lease_name(name)}"
        if r.random() < 0.15:
            self.apply("leases", key, None)
            results = [d.delete(key, self.now) for d in (self.bounded, self.full)]
            assert results[0] == results[1]
            assert self.stragglers.delete(key, self.now) == self.stragglers_full.delete(key, self.now)
            return
        if r.random() < 0.5:
            self.steps[name] += 1
        step = None if r.random() < 0.05 else self.steps[name]
        rank_times = r.choice([None, "1.0,1.0", "1.0,2.0", "2.0,1.0", "1.0,1.1,3.0", "x"])
        lease = _lease(name, step, step_time=r.choice([None, "1.0", "5.0"]), checkpointing=r.random() < 0.1,
                       duration=r.choice([None, 3, 15]), holder=r.choice(["", f"{name}-1"]),
                       rank_times=rank_times)  # fmt: skip
        self.apply("leases", key, lease)
        results = [d.update(lease, self.now) for d in (self.bounded, self.full)]
        assert results[0] == results[1]
        assert self.stragglers.update(lease, self.now) == self.stragglers_full.update(lease, self.now)

    def blind(self, name: str) -> None:
        key = f"ns/{lease_name(name)}"
        for d in (self.bounded, self.full):
            d.blind(key, self.now)

    def pods_of(self, job: JobRecord) -> list[PodRecord]:
        return self.state.pods_of_job(job.kind, job.namespace, job.name)

    def tick(self) -> None:
        self.ticks += 1
        touched = self.touched.take()
        got = self.bounded.tick(self.now, self.lookup, touched)
        want = self.full.tick(self.now, self.lookup)
        assert got == want, f"tick {self.ticks} at {self.now}"
        assert self.bounded.resumed == self.full.resumed
        news = self.stragglers.tick(self.now, self.lookup, touched)
        assert news == self.stragglers_full.tick(self.now, self.lookup), f"tick {self.ticks} at {self.now}"
        assert self.stragglers.active() == [e for t in self.stragglers_full.tracks.values() for e in t.active.values()]
        assert self.stragglers.rejected == self.stragglers_full.rejected
        self.straggler_news += len(news.found) + len(news.ended)
        if self.ticks > 2:  # (the pipeline checks once the Leases are listed: the first check reads every job)
            jobs = [j for store in self.state.job_stores() for j in store.values()]
            pods_of = self.pods_of
            want_signals = self.signals_full.check(jobs, pods_of, set(self.state.leases), self.now)
            if not self.signals_started or self.ticks % 50 == 0:  # (now and then every job again: the same)
                self.signals_started = True
                got_signals = self.signals.check(jobs, pods_of, set(self.state.leases), self.now)
            else:
                got_signals = self.signals.check_touched(touched, self.state, self.now)
            assert got_signals == want_signals, f"tick {self.ticks} at {self.now}"
            assert self.signals.reported == self.signals_full.reported

    def run(self, steps: int) -> None:
        r = self.rng
        for name in self.names:
            self.job(name)
        for _ in range(steps):
            self.now += timedelta(seconds=r.choice([0, 0.25, 0.5, 1, 1, 2, 7, 30]))
            what = r.random()
            name = r.choice(self.names)
            if what < 0.35:
                self.lease(name)
            elif what < 0.45:
                self.job(name)
            elif what < 0.6:
                self.pod(name)
            elif what < 0.63:
                self.blind(name)
            else:
                self.tick()


@pytest.mark.parametrize("seed", range(12))
def test_hang_and_signal_checks_decide_as_a_look_at_every_job(seed: int) -> None:
    world = World(seed)
    world.run(1500)
    # the sequences did reach each outcome the tick can have (so the comparisons above compared something)
    assert world.ticks > 100


def test_the_random_sequences_find_hangs_resumes_and_signal_problems() -> None:
    faults = resumes = stragglers = 0
    reasons: set[str] = set()
    for seed in range(12):
        world = World(seed)
        world.names.sort()
        world.run(1500)
        faults += sum(1 for t in world.full.tracks.values() if t.hung is not None)
        resumes += len(world.full.resumed)
        stragglers += world.straggler_news
        reasons |= {r.split(":")[0] for r in world.signals_full.reported.values()}
    assert faults > 0
    assert resumes > 0
    assert stragglers > 0
    assert reasons == {"missing", "label"}


@pytest.mark.parametrize("seed", range(6))
def test_the_detectors_look_at_the_leases_written_without_being_told(seed: int) -> None:
    """The jobs and pods stay as they are; the bounded ticks are told of no job (`touched` empty): the Lease writes
    alone must bring their tracks to the next tick."""
    world = World(seed)
    for name in world.names:
        world.job(name)
        for i in (0, 1):
            world.apply("pods", f"ns/{name}-{i}", factories.pod(f"{name}-{i}", job=name, rank=i, node=f"n{i}"))
    rng = world.rng
    for _ in range(1500):
        world.now += timedelta(seconds=rng.choice([0.5, 1, 1, 3, 30]))
        if rng.random() < 0.5:
            world.lease(rng.choice(world.names))
            continue
        assert world.bounded.tick(world.now, world.lookup, ()) == world.full.tick(world.now, world.lookup)
        news = world.stragglers.tick(world.now, world.lookup, ())
        assert news == world.stragglers_full.tick(world.now, world.lookup)


def test_the_bounded_hang_tick_looks_only_at_what_changed() -> None:
    world = World(0, jobs=1)
    world.run(0)
    world.apply("pods", "ns/job0-0", factories.pod("job0-0", job="job0", rank=0, created_at=T0))
    world.lease("job0")
    world.tick()
    visits = world.bounded.visits
    for _ in range(50):  # idle: no write, no deadline passes within a second... until the timeout
        world.now += timedelta(seconds=0.01)
        world.tick()
    assert world.bounded.visits - visits <= 1  # the restart counter seen at the first tick: the next one goes on


# ---------------------------------------------------------------------------------------------- goodput


def _incident(name: str, first: datetime, restart: datetime) -> Incident:
    steps = ((Phase.ACTING, first + timedelta(seconds=1)), (Phase.RESTARTING, restart))
    return Incident(f"{name}-0", f"uid-{name}", "vcjob", "ns", name, "1", Phase.RESTARTING, first, steps,
                    restart_at=restart)  # fmt: skip


class Present:
    """The jobs in the watch cache, by name (GoodputKeeper's `exists`)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def __call__(self, namespace: str, name: str) -> bool:
        return name in self.names


@pytest.mark.parametrize("seed", range(8))
def test_goodput_totals_from_what_changed_equal_the_sum_over_every_job(seed: int) -> None:
    rng = random.Random(seed)
    history = ProgressHistory()
    keeper = GoodputKeeper(history)
    names = [f"job{i}" for i in range(8)]
    steps = dict.fromkeys(names, 0)
    present = set(names)
    touched: set[tuple[str, str]] = set()
    now = T0
    checked = 0
    for _ in range(800):
        now += timedelta(seconds=rng.choice([0, 0.3, 1, 1, 5, 40]), microseconds=rng.randint(0, 999999))
        name = rng.choice(names)
        what = rng.random()
        if what < 0.4:
            steps[name] += rng.choice([0, 1])
            history.observe("ns", name, Progress(steps[name], None, None, False), now)
        elif what < 0.45:
            history.forget("ns", name)
        elif what < 0.5:
            present ^= {name}
            touched.add(("ns", name))
        elif what < 0.6 and history.first_step_at("ns", name) is not None:
            first = now - timedelta(seconds=rng.uniform(0, 400))
            restart = first + timedelta(seconds=rng.uniform(0, 200))
            first_step = Resumed(
                factories.job(name), steps[name], None, restart + timedelta(seconds=rng.uniform(0, 300))
            )
            keeper.resumed(_incident(name, first, restart), first_step)
        else:
            exists = Present(set(present))
            got = keeper.totals_changed(now, exists, touched)
            touched = set()
            want = keeper.totals(now, exists)
            assert math.isclose(got[0], want[0], rel_tol=1e-12, abs_tol=1e-6), (got, want)
            assert math.isclose(got[1], want[1], rel_tol=1e-12, abs_tol=1e-6), (got, want)
            checked += 1 if want[1] > 0 else 0
    assert checked > 10


def test_goodput_totals_of_idle_jobs_look_at_none() -> None:
    history = ProgressHistory()
    keeper = GoodputKeeper(history)
    for i in range(10_000):
        history.observe("ns", f"job{i}", Progress(1, None, None, False), T0)
        history.observe("ns", f"job{i}", Progress(2, None, None, False), T0 + timedelta(seconds=1))
    calls = 0

    def exists(ns: str, name: str) -> bool:
        nonlocal calls
        calls += 1
        return True

    keeper.totals_changed(T0 + timedelta(seconds=2), exists, ())
    assert calls == 10_000  # the first call sums every job
    for s in range(3, 63):
        wall, productive = keeper.totals_changed(T0 + timedelta(seconds=s), exists, ())
        assert (wall, productive) == (10_000 * (s - 1), 10_000 * (s - 1))
    assert calls == 10_000


# ---------------------------------------------------------------------------------------------- the agent's tick


class Idle:
    """10,000 Volcano Jobs that opted in to progress, one Running pod and one heartbeat Lease each (with per-rank step
    times: the straggler detector follows it too), every Lease written once more (armed), then ticks with no change: a
    pipeline and an engine as the agent wires them."""

    JOBS = 10_000

    def __init__(self) -> None:
        self.clock = FixedClock(T0)
        self.state = ClusterState()
        self.queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
        self.pipeline = DetectPipeline(SETTINGS, self.state, self.queue, clock=self.clock)
        self.state.expect("leases@*")
        self.state.apply(Change(ChangeType.LISTED, "leases", "", None, None, False, 0.0, "leases@*"))
        self.api = k8s.ApiClient()
        self.engine = RecoveryEngine(SETTINGS, self.state, CountingWriter(self.api), clock=self.clock)
        self.engine.ctx.take_resumed = self.pipeline.take_resumed
        self.engine.ctx.goodput.history = self.pipeline.progress
        labels = {"fault-scheduling": "force", PROGRESS_LABEL: "lease"}
        for i in range(self.JOBS):
            name = f"job{i}"
            self.apply("vcjobs", f"ns/{name}", factories.job(name, labels=labels))
            self.apply("pods", f"ns/{name}-0", factories.pod(f"{name}-0", job=name, node=f"n{i % 100}", rank=0))

    async def start(self) -> None:
        for step in (1, 2):
            for i in range(self.JOBS):
                name = f"job{i}"
                lease = _lease(name, step, step_time=None, checkpointing=False, duration=None, rank_times="1.0,1.0")
                self.apply("leases", f"ns/{lease_name(name)}", lease)
            await self.tick(step)

    def apply(self, source: str, key: str, new: Any) -> None:
        c = change(source, key, new, self.state.store(source).get(key))
        self.state.apply(c)
        self.pipeline(c)

    async def tick(self, seconds: float) -> None:
        self.clock.set(T0 + timedelta(seconds=seconds))
        self.pipeline.tick()
        await self.engine.tick(self.clock.now())


class CountingSet(set[str]):
    """A set that counts its membership tests (restore_all's look at a job)."""

    lookups = 0

    def __contains__(self, item: object) -> bool:
        CountingSet.lookups += 1
        return super().__contains__(item)


async def test_idle_ticks_over_10000_jobs_with_leases_read_no_job(monkeypatch: pytest.MonkeyPatch) -> None:
    world = Idle()
    await world.start()
    reads = {"label": 0, "exists": 0}
    label = JobRecord.label

    def counted_label(self: JobRecord, key: str) -> str | None:
        reads["label"] += 1
        return label(self, key)

    real_exists = world.engine._job_exists

    def counted_exists(namespace: str, name: str) -> bool:
        reads["exists"] += 1
        return real_exists(namespace, name)

    monkeypatch.setattr(JobRecord, "label", counted_label)
    monkeypatch.setattr(world.engine, "_job_exists", counted_exists)
    world.engine.ctx.restored = CountingSet(world.engine.ctx.restored)
    CountingSet.lookups = 0
    for s in range(3, 13):  # ten idle ticks, within every job's hang timeout (the ceiling: no step time)
        await world.tick(s)
    # the hang and straggler ticks and the signal check read a job's labels, the goodput totals ask whether it exists,
    # restore_all whether it was adopted: a look at every job is 10,000 of each per tick
    assert reads == {"label": 0, "exists": 0}
    assert CountingSet.lookups == 0
    assert len(world.pipeline.straggler.tracks) == Idle.JOBS
    await world.api.close()


class RecordingSet(set[str]):
    """ctx.restored, recording the order jobs are adopted in."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[str] = []

    def add(self, item: str) -> None:
        self.added.append(item)
        super().add(item)


@pytest.mark.parametrize("seed", range(6))
async def test_restore_all_adopts_the_jobs_a_scan_of_every_job_would_in_its_order(seed: int) -> None:
    rng = random.Random(seed)
    state = ClusterState()
    api = k8s.ApiClient()
    engine = RecoveryEngine(SETTINGS, state, CountingWriter(api), clock=FixedClock(T0))
    restored = engine.ctx.restored = RecordingSet()
    assert engine.check_term()  # a new term: every job is looked at once
    oracle: set[str] = set()
    sources = {JobKind.VOLCANO: "vcjobs", JobKind.ASCEND: "acjobs", JobKind.JOBSET: "jobsets"}
    for n in range(600):
        what = rng.random()
        kind = rng.choice(list(JobKind))
        name = f"job{rng.randint(0, 9)}"
        key = f"ns/{name}"
        old = state.job(kind, "ns", name)
        if what < 0.35:  # a job added, changed, or created again under a new UID
            uid = old.uid if old is not None and rng.random() < 0.5 else f"uid-{kind}-{name}-{n}"
            state.apply(change(sources[kind], key, factories.job(name, kind=kind, uid=uid), old))
        elif what < 0.5 and old is not None:
            state.apply(change(sources[kind], key, None, old, type=ChangeType.DELETED))
        elif what < 0.6 and old is not None and old.uid in oracle:  # another actor's record: adopted again
            engine.claiming.adopt_other(old)
            oracle.discard(old.uid)
        elif what < 0.62:
            engine.ctx.new_term()
            oracle.clear()
        else:
            want = [j.uid for store in state.job_stores() for j in store.values() if j.uid not in oracle]
            restored.added.clear()
            engine.restore_all(T0)
            assert restored.added == want
            oracle.update(want)
    await api.close()
