"""Benchmark: the decision path's thread CPU, in process on a quiet CPU (issue 39, "half the distance to the floor").

The decision path is what the recovery loop does between taking a fault off its queue and handing the fault's
events to the sink (``path_cpu_ms`` in the agent's ``fault stages`` lines): correlation, the breaker, the policy's
decision, the incident opened, the ``decision`` log line, ``fault.detected`` and (a restart sent in one round
trip) ``recovery.started`` built and handed over. Nothing else runs on the loop meanwhile: the fault's events are
committed and sent to Kafka only after it (the publisher's commit task gets its turn when the path yields).

Measured here as :func:`time.thread_time` around :meth:`~agent.engine.recovery.RecoveryEngine.handle_fault`, one
fault per job (each opens an incident and restarts its job), the engine wired with the agent's own parts, added in
turn (each configuration a fresh engine; rounds alternate them):

- ``bare``: no event sink, logs off (the same-run baseline: correlation, decision, incident);
- ``logs``: the agent's logging at info, JSON lines to a file (agent.runtime.logs);
- ``events``: plus the CloudEvents built and encoded as the Kafka publisher's ``submit`` does before its commit
  (agent.sinks.events ``encode``; the commit itself, the outbox's write and fsync, runs in the publisher's task);
- ``kube-events``: plus the Kubernetes Events sink over it (agent.sinks.kube_events), as the agent runs.

The writer answers at once in process (bench_decision's ``RecordingWriter``); the act task's writes run after the
path and are not timed. On the bench_e2e testbed the same path reads 1.5-2x these figures (the CPU shared with the
apiserver, etcd, Kafka and Volcano: caches cold, the thread preempted): bench/RESULTS.md, "Issue 39, session 28".

    python bench/decision_path.py [--jobs 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from bench_decision import RecordingWriter, _change, _device_info, build_world
from kubernetes_asyncio import client as k8s

from agent.core.faults import Fault
from agent.engine.loops import recovery_loop
from agent.engine.recovery import RecoveryEngine
from agent.runtime.clock import SystemClock
from agent.runtime.logs import configure_logging
from agent.settings import LogSettings
from agent.sinks.events import encode
from agent.sinks.kube_events import KubeEventRecorder, KubeEventsSink

CONFIGURATIONS = ("bare", "logs", "events", "kube-events")
WARM_UP = 10  # the first faults of each engine (imports, first allocations) are not counted


class EncodingSink:
    """The Kafka publisher's ``submit`` up to its commit: the event encoded, a future returned (done at once here:
    the commit runs after the path)."""

    async def submit(self, event: Any) -> Awaitable[None]:
        encode(event)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def path_cpu(jobs: int, configuration: str) -> list[float]:
    """The decision path's thread CPU in ms of `jobs` faults (one per job, 3 ms apart) with `configuration`'s parts."""
    settings, state, _, queue, pipeline = build_world(jobs)
    api = k8s.ApiClient()
    events: Any = None
    if configuration == "events":
        events = EncodingSink()
    elif configuration == "kube-events":
        events = KubeEventsSink(EncodingSink(), KubeEventRecorder(api, "bench", SystemClock()), lambda name: "uid")
    engine = RecoveryEngine(settings, state, RecordingWriter(api), events=events, clock=SystemClock())
    spent: list[float] = []
    handle = engine.handle_fault

    async def timed(fault: Fault, now: Any, **kwargs: Any) -> Any:
        before = time.thread_time()
        try:
            return await handle(fault, now, **kwargs)
        finally:
            spent.append((time.thread_time() - before) * 1000)

    engine.handle_fault = timed  # type: ignore[method-assign]
    stop = asyncio.Event()
    loop_task = asyncio.create_task(recovery_loop(engine, state, queue, stop))
    await asyncio.sleep(0.1)
    for j in range(jobs):
        cm = _device_info(f"node-{j}", "Ascend910-1", 2)
        change = _change("deviceinfo", f"kube-system/{cm.name}", cm)
        state.apply(change)
        pipeline(change)
        await asyncio.sleep(0.003)
    await asyncio.sleep(0.3)
    stop.set()
    await loop_task
    await api.close()
    if len(spent) < jobs:
        raise SystemExit(f"{configuration}: {jobs - len(spent)} of {jobs} faults never reached the engine")
    return spent[WARM_UP:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300, help="faults per configuration, one per job (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every configuration, alternated (default 3)")
    args = parser.parse_args()
    if args.jobs <= WARM_UP or args.rounds < 1:
        parser.error(f"--jobs must be above {WARM_UP} and --rounds at least 1")
    got: dict[str, list[float]] = {c: [] for c in CONFIGURATIONS}
    with tempfile.TemporaryDirectory() as tmp, (Path(tmp) / "agent.log").open("w") as log_file:
        for _ in range(args.rounds):
            for configuration in CONFIGURATIONS:
                level = "error" if configuration == "bare" else "info"
                configure_logging(LogSettings.model_validate({"level": level, "format": "json"}), log_file)
                got[configuration].append(statistics.median(asyncio.run(path_cpu(args.jobs, configuration))))
        logged = log_file.tell()
    base = min(got["bare"])
    print(
        f"decision path, thread CPU per fault (each run's p50, the best of {args.rounds} runs; "
        f"{args.jobs} faults each, one core, load average {os.getloadavg()[0]:.1f}; {logged:,} bytes logged):"
    )
    for configuration in CONFIGURATIONS:
        best = min(got[configuration])
        runs = " / ".join(f"{v:.3f}" for v in got[configuration])
        print(f"  {configuration:12} {best:.3f} ms  ({best - base:+.3f} over bare; runs {runs})")
    if any(not v for v in got.values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
