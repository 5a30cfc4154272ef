"""The CPU of one engine tick when many jobs follow their training progress (issue 39: no per-tick work proportional
to the cluster unless bounded by what changed).

`--jobs` Volcano Jobs labelled ``fault-agent.io/progress: lease``, one Running pod and one heartbeat Lease each
(written twice, so every job is armed for hang detection), in a :class:`~agent.sources.state.ClusterState` with the
Leases listed, and a :class:`~agent.engine.detecting.DetectPipeline` and a leading
:class:`~agent.engine.recovery.RecoveryEngine` wired as agent.runtime.app wires them (the effective-training history,
the first steps after a restart). Then `--ticks` ticks one virtual second apart, each the agent's
(``DetectPipeline.tick`` and ``RecoveryEngine.tick``), timed in thread CPU: first idle (nothing written between
ticks), then with `--writes` Leases written between ticks (a step each, different jobs each time); with `--ranks`,
each Lease carries that many per-rank step times (all equal: the straggler detector follows it, finds none). No hang
falls due (the ticks stay within every job's timeout). Printed only (the ``issue 39 per-tick work`` row of
bench/RESULTS.md quotes a run); it runs on older trees too (``PYTHONPATH=<tree>``), for a same-session baseline.

Run: ``python bench/tick_probe.py [--jobs 10000] [--ticks 20] [--writes 100] [--ranks 0]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decision import RecordingWriter

from agent.core.clock import FixedClock
from agent.core.cluster import FaultScheduling, JobKind, JobRecord, JobRef, PodRecord
from agent.core.faults import Fault, FaultCleared
from agent.core.progress import (
    PROGRESS_LABEL,
    RANK_STEP_TIMES_ANNOTATION,
    STEP_ANNOTATION,
    LeaseRecord,
    lease_name,
)
from agent.engine.detecting import DetectPipeline
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import Change, ChangeType
from agent.settings import Settings
from agent.sources.state import ClusterState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NS = "bench"


class Writer(RecordingWriter):
    """bench_decision's writer (every write answered at once), with no resubmission left to finish."""

    async def pending_resubmissions(self) -> tuple[list[Any], list[Any]]:
        return [], []


def _change(source: str, key: str, new: object, old: object) -> Change[object]:
    return Change(ChangeType.MODIFIED, source, key, new, old, False, 0.0)


def _lease(job: str, step: int, ranks: int) -> LeaseRecord:
    notes = [(STEP_ANNOTATION, str(step))]
    if ranks:
        notes.append((RANK_STEP_TIMES_ANNOTATION, ",".join(["1.0"] * ranks)))
    return LeaseRecord(NS, lease_name(job), f"uid-lease-{job}", str(step), job, f"{job}-0", T0, None, tuple(notes))


class World:
    """The state, pipeline and engine of the module docstring."""

    def __init__(self, jobs: int, ranks: int) -> None:
        self.jobs = jobs
        self.ranks = ranks
        self.clock = FixedClock(T0)
        self.state = ClusterState()
        self.queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
        settings = Settings.model_validate({"kafka": {"enabled": False}})
        self.pipeline = DetectPipeline(settings, self.state, self.queue, clock=self.clock)
        self.api = k8s.ApiClient()
        self.engine = RecoveryEngine(settings, self.state, Writer(self.api), clock=self.clock)
        self.engine.ctx.take_resumed = self.pipeline.take_resumed
        self.engine.ctx.goodput.history = self.pipeline.progress
        self.state.expect("leases@*")
        self.state.apply(Change(ChangeType.LISTED, "leases", "", None, None, False, 0.0, "leases@*"))
        labels = (("fault-scheduling", "force"), (PROGRESS_LABEL, "lease"))
        for i in range(jobs):
            name = f"job-{i}"
            job = JobRecord(JobKind.VOLCANO, NS, name, f"uid-{name}", "1", 1, labels, FaultScheduling.FORCE, None,
                            False, "ignore", 3, 1, "Running", "0", 0, (), T0)  # fmt: skip
            self.apply("vcjobs", f"{NS}/{name}", job)
            pod = PodRecord(NS, f"{name}-0", f"uid-{name}-0", "1", f"node-{i % 1000}", "Running", True,
                            JobRef(JobKind.VOLCANO, NS, name), ("Ascend910-0",), 0, (), None, "", "", T0)  # fmt: skip
            self.apply("pods", f"{NS}/{pod.name}", pod)
        self.steps = [0] * jobs
        self.written = 0

    def apply(self, source: str, key: str, new: object) -> None:
        change = _change(source, key, new, self.state.store(source).get(key))
        self.state.apply(change)  # type: ignore[arg-type]
        self.pipeline(change)  # type: ignore[arg-type]

    def write(self, count: int) -> None:
        """`count` Leases written, each one step on, the next jobs in turn."""
        for _ in range(count):
            i = self.written % self.jobs
            self.written += 1
            self.steps[i] += 1
            name = f"job-{i}"
            self.apply("leases", f"{NS}/{lease_name(name)}", _lease(name, self.steps[i], self.ranks))

    async def tick(self, seconds: float) -> float:
        """One tick at T0 + `seconds`; its thread CPU in seconds."""
        self.clock.set(T0 + timedelta(seconds=seconds))
        started = time.thread_time()
        self.pipeline.tick()
        await self.engine.tick(self.clock.now())
        return time.thread_time() - started


async def run(jobs: int, ticks: int, writes: int, ranks: int) -> None:
    world = World(jobs, ranks)
    world.write(jobs)
    await world.tick(1)
    world.write(jobs)  # every job armed
    await world.tick(2)
    await world.tick(3)
    gc.collect()
    gc.freeze()  # as the agent does once its sources have listed
    idle = [await world.tick(4 + t) for t in range(ticks)]
    busy: list[float] = []
    for t in range(ticks):
        world.write(writes)
        busy.append(await world.tick(4 + ticks + t))
    for label, samples in (("idle", idle), (f"{writes} Leases written between ticks", busy)):
        ms = sorted(s * 1000 for s in samples)
        with_ranks = f" ({ranks} per-rank step times each)" if ranks else ""
        print(f"{jobs} jobs with a Lease{with_ranks}, {label}: tick median {statistics.median(ms):.3f} ms, "
              f"max {ms[-1]:.3f} ms of thread CPU over {len(ms)} ticks")  # fmt: skip
    await world.api.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--ticks", type=int, default=20)
    ap.add_argument("--writes", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=0, help="per-rank step times in each Lease (the straggler detector)")
    args = ap.parse_args()
    asyncio.run(run(args.jobs, args.ticks, args.writes, args.ranks))


if __name__ == "__main__":
    main()
