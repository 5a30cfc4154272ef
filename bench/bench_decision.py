"""Benchmark: decision latency, from a signal entering the agent to the action's API request being sent.

The measured path is the agent's own: a device-plugin ConfigMap change enters
:class:`agent.engine.detecting.DetectPipeline` (the watchers' sink), the fault is queued, the recovery loop takes
it, correlates it against the cluster state, decides, opens the incident and calls the writer. The clock stops
when the writer is asked to send the ``RestartJob`` Command. Meanwhile 2,000 background pod events/s (healthy
pods changing resourceVersion) go through the same pipeline on the same event loop.

The writer is an in-process recorder (no apiserver), so the figure is the agent's own processing time and
excludes network round trips: in production the Command goes out together with the job's claim and the
rings-config reset, one apiserver round trip after the decision (a few ms on a LAN). Each fault hits a
different job so each opens an incident and restarts (a fault joining an open incident would cost less).

    python bench/bench_decision.py --jobs 400 --rate 2000 [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client as k8s

from agent.actions import ActionResult, ClusterWriter, Outcome, PodRef
from agent.core.cluster import (
    ConfigMapRecord,
    FaultScheduling,
    JobKind,
    JobRecord,
    JobRef,
    NodeCondition,
    NodeRecord,
    PodRecord,
)
from agent.core.detect import check_code
from agent.core.faults import Fault, FaultCleared
from agent.core.resetconfig import ResetConfigUpdate
from agent.engine.detecting import DetectPipeline
from agent.engine.loops import recovery_loop
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import Change, ChangeType
from agent.runtime.app import freeze_gc_when_ready
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sources.state import ClusterState

ROW = "decision latency p99"


class RecordingWriter(ClusterWriter):
    """Answers every request of the restart path at once (the job's record, rings-config reset, the job's
    version read and GET, the pod list) and records when the restart request would have been sent. Every method the
    restart path awaits must be answered here: one left to the base class waits for an apiserver that is not
    there, and the fault never reaches the writer."""

    def __init__(self, api: k8s.ApiClient) -> None:
        super().__init__(api)
        self.sent: dict[str, float] = {}

    async def write_record(self, job: JobRef, data: Any, *, incident: str) -> ActionResult:
        return ActionResult("write-record", str(job), Outcome.DONE)

    async def claim_record(self, job: JobRef, data: Any, *, resource_version: str, incident: str) -> ActionResult:
        return ActionResult("claim-record", str(job), Outcome.DONE)

    async def read_record(self, job: JobRef) -> Any:
        return None

    async def job_meta(self, job: JobRef) -> tuple[str, dict[str, str]] | None:
        return None  # unproven: the force follow-up reads the version (job_version, answered above)

    async def reset_rings_config(self, namespace: str, job_name: str, *, incident: str) -> ActionResult:
        return ActionResult("reset-rings", job_name, Outcome.ALREADY_DONE)

    async def job_version(self, job: JobRef) -> str | None:
        return "0"

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        return []

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        self.sent[job.name] = time.perf_counter()
        return ActionResult("restart-command", str(job), Outcome.DONE)

    async def update_configmap_keys(self, namespace: str, name: str, update: Any, **_: Any) -> ActionResult:
        return ActionResult("update-configmap", f"ConfigMap/{namespace}/{name}", Outcome.DONE)  # the bookkeeping

    async def update_reset_config(self, update: ResetConfigUpdate, *, incident: str) -> ActionResult:
        return ActionResult(f"reset-config-{update.change}", update.name, Outcome.ALREADY_DONE)


def _change(source: str, key: str, new: Any) -> Change[Any]:
    return Change(ChangeType.MODIFIED, source, key, new, None, False, time.time())


def _device_info(node: str, chip: str, rv: int) -> ConfigMapRecord:
    now_ms = int(time.time() * 1000)
    prefix = "huawei.com/Ascend910"
    element = {
        "fault_type": "CardUnhealthy",
        "npu_name": chip,
        "large_model_fault_level": "SeparateNPU",
        "fault_level": "SeparateNPU",
        "fault_handling": "SeparateNPU",
        "fault_code": "80E01801",
        "fault_time_and_level_map": {"80E01801": {"fault_time": now_ms, "fault_level": "SeparateNPU"}},
    }
    device_list = {
        prefix: ",".join(f"Ascend910-{i}" for i in range(8) if f"Ascend910-{i}" != chip),
        f"{prefix}-Fault": json.dumps([element], separators=(",", ":")),
        f"{prefix}-Unhealthy": chip,
    }
    info = {"DeviceList": device_list, "UpdateTime": now_ms // 1000}
    cfg = {"DeviceInfo": info, "SuperPodID": -2, "ServerIndex": -2, "CheckCode": check_code(info)}
    return ConfigMapRecord(
        "kube-system",
        f"mindx-dl-deviceinfo-{node}",
        f"cm-{node}",
        str(rv),
        (("mx-consumer-cim", "true"),),
        {"DeviceInfoCfg": json.dumps(cfg, separators=(",", ":"))},
    )


def _build_state(jobs: int) -> tuple[ClusterState, list[PodRecord]]:
    state = ClusterState()
    now = datetime.now(UTC)
    pods: list[PodRecord] = []
    for j in range(jobs):
        node = f"node-{j}"
        state.apply(
            _change(
                "nodes",
                node,
                NodeRecord(node, f"uid-{node}", "1", (NodeCondition("Ready", "True", "", now),), (), (), False, 8),
            )
        )
        job = JobRecord(
            JobKind.VOLCANO, "bench", f"job-{j}", f"uid-job-{j}", "1", 1, (("fault-scheduling", "force"),),
            FaultScheduling.FORCE, None, False, "ignore", 3, 2, "Running", "0", 0, (), now,
        )  # fmt: skip
        state.apply(_change("vcjobs", f"bench/job-{j}", job))
        for i in range(2):
            pod = PodRecord(
                "bench", f"job-{j}-w{i}", f"uid-{j}-{i}", "1", node, "Running", True,
                JobRef(JobKind.VOLCANO, "bench", f"job-{j}"), (f"Ascend910-{2 * i}", f"Ascend910-{2 * i + 1}"), i,
                (), None, "", "", now,
            )  # fmt: skip
            state.apply(_change("pods", f"bench/{pod.name}", pod))
            pods.append(pod)
    state.expect("bench@*")
    state.apply(Change(ChangeType.LISTED, "pods", "", None, None, False, time.time(), "bench@*"))
    return state, pods


def build_world(
    jobs: int,
) -> tuple[Settings, ClusterState, list[PodRecord], asyncio.Queue[Fault | FaultCleared], DetectPipeline]:
    """The settings (no Kafka, no rate limit, a breaker that never trips), the state of `jobs` jobs and their pods,
    the fault queue and the detectors, which have seen every pod once."""
    settings = Settings.model_validate(
        {
            "kafka": {"enabled": False},
            "policy": {"restart_burst": 10000, "restart_rate_per_min": 10000, "breaker_node_share": 1.0},
        }
    )
    state, pods = _build_state(jobs)
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    pipeline = DetectPipeline(settings, state, queue, clock=SystemClock())
    for pod in pods:  # the detectors' first view of every pod
        pipeline(_change("pods", f"bench/{pod.name}", pod))
    return settings, state, pods, queue, pipeline


async def measure(jobs: int, rate: float, interval_s: float, *, gc_freeze: bool = True) -> list[float]:
    """Latencies in ms of `jobs` faults (one per job), with `rate` background pod events/s. `gc_freeze`: as the
    agent does once its sources have listed (agent.runtime.app.freeze_gc_when_ready), undone at the end."""
    settings, state, pods, queue, pipeline = build_world(jobs)
    api = k8s.ApiClient()
    writer = RecordingWriter(api)
    engine = RecoveryEngine(settings, state, writer, clock=SystemClock())
    stop = asyncio.Event()
    if gc_freeze:
        await freeze_gc_when_ready(state, stop)
    loop_task = asyncio.create_task(recovery_loop(engine, state, queue, stop), name="recovery")
    started: dict[str, float] = {}

    async def background() -> None:
        n = 0
        tick = 0.005
        per_tick = max(1, round(rate * tick)) if rate > 0 else 0
        next_t = time.perf_counter()
        while not stop.is_set() and per_tick:
            for _ in range(per_tick):
                pod = pods[n % len(pods)]
                n += 1
                newer = replace(pod, resource_version=str(n + 1))
                key = f"bench/{pod.name}"
                change = Change(ChangeType.MODIFIED, "pods", key, newer, state.pods.get(key), False, time.time())
                state.apply(change)
                pipeline(change)
            next_t += tick
            await asyncio.sleep(max(0.0, next_t - time.perf_counter()))
        background.sent = n  # type: ignore[attr-defined]

    bg = asyncio.create_task(background(), name="background")
    await asyncio.sleep(0.5)
    bg_start = time.perf_counter()
    for j in range(jobs):
        cm = _device_info(f"node-{j}", "Ascend910-1", 2)
        change = _change("deviceinfo", f"kube-system/{cm.name}", cm)
        started[f"job-{j}"] = time.perf_counter()
        state.apply(change)
        pipeline(change)
        await asyncio.sleep(interval_s)
    deadline = time.perf_counter() + 10
    while len(writer.sent) < jobs and time.perf_counter() < deadline:  # noqa: ASYNC110 (polls a dict)
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - bg_start
    stop.set()
    await asyncio.gather(loop_task, bg)
    await api.close()
    gc.unfreeze()
    sent = getattr(background, "sent", 0)
    if rate > 0:
        print(f"  background: {sent} pod events in {elapsed:.1f} s = {sent / elapsed:,.0f}/s", file=sys.stderr)
    missing = jobs - len(writer.sent)
    if missing:
        raise SystemExit(f"{missing} of {jobs} faults never reached the writer")
    return [(writer.sent[name] - t0) * 1000 for name, t0 in started.items()]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=400, help="faults, one per job (default 400)")
    parser.add_argument("--rate", type=float, default=2000.0, help="background pod events per second")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between faults")
    parser.add_argument("--write", action="store_true", help="update the row in bench/RESULTS.md")
    args = parser.parse_args()
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # errors only: logs are not measured
    base = asyncio.run(measure(args.jobs, 0.0, args.interval))
    unfrozen = asyncio.run(measure(args.jobs, args.rate, args.interval, gc_freeze=False))
    loaded = asyncio.run(measure(args.jobs, args.rate, args.interval))
    p50, p99 = _pct(loaded, 0.50), _pct(loaded, 0.99)
    b50, b99 = _pct(base, 0.50), _pct(base, 0.99)
    u50, u99 = _pct(unfrozen, 0.50), _pct(unfrozen, 0.99)
    print(f"with {args.rate:,.0f} background events/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {max(loaded):.2f} ms")
    print(f"no background load: p50 {b50:.2f} ms, p99 {b99:.2f} ms; mean loaded {statistics.mean(loaded):.2f} ms")
    print(f"loaded, without the agent's gc freeze: p50 {u50:.2f} ms, p99 {u99:.2f} ms, max {max(unfrozen):.2f} ms")
    if args.write:
        row = (
            f"| {ROW} | p99 {p99:.2f} ms, p50 {p50:.2f} ms ({args.jobs} faults, {args.rate:,.0f} background pod "
            f"events/s, in-process writer: apiserver round trips excluded, one core, "
            f"load average {os.getloadavg()[0]:.1f}) "
            f"| p99 ≤ 5 ms at 2,000 background events/s (issue 19) "
            f"| no background: p99 {b99:.2f} ms, p50 {b50:.2f} ms; "
            f"loaded without the gc freeze (agent.runtime.app.freeze_gc_when_ready): "
            f"p99 {u99:.2f} ms, p50 {u50:.2f} ms, "
            f"max {max(unfrozen):.2f} ms "
            f"| `python bench/bench_decision.py --jobs {args.jobs} --rate {args.rate:.0f} --write` |"
        )
        from e2e_common import put_row

        put_row(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
