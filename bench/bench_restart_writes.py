"""Benchmark `restart writes`: the event loop's CPU for one restart by pod deletion of a large job.

A restart by pod deletion (an AscendJob, ``policy.volcano_restart=delete-pods``, a pod-level restart, and the
force follow-up after a RestartJob Command) lists the job's pods and deletes each with grace 0 and a UID
precondition. Everything the client does with the answers runs on the agent's one event loop, where it holds up
every other fault's detection and publishing (issue 19: event-loop stalls).

Needs a running testbed (``python -m testbed up --dir D``; pass ``--kubeconfig D/kubeconfig``). Per repeat it
creates ``--pods`` realistic pods of one Volcano job (bench_ingest.make_pod, ~4.5 KB of JSON each; unscheduled:
their scheduler does not exist, so nothing else touches them) in a fresh namespace, then restarts them:
- the agent's writer: :meth:`ClusterWriter.list_job_pods` and :meth:`ClusterWriter.delete_pods` (grace 0);
- baseline, same run, alternating with it: the same writer with the list and the deletions read through the
  generated client's models (``list_namespaced_pod``, ``delete_namespaced_pod`` answers built into V1PodList
  and V1Pod), as the writer did before.
Both log as the agent does in a container (one JSON line per write, here to a file).
Each is timed as this thread's CPU (the event loop's: nothing else runs on it) and as wall time, median of
``--repeat``.

Run: ``python bench/bench_restart_writes.py --kubeconfig D/kubeconfig [--pods 256] [--repeat 5] [--write]``
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from bench_ingest import create_pods
from e2e_common import write_row
from kubernetes_asyncio import client

from agent.actions.results import ActionResult
from agent.actions.writer import ClusterWriter, PodRef
from agent.core.cluster import JobKind, JobRef
from agent.kube.client import new_api_client
from agent.runtime.logs import configure_logging
from agent.settings import LogSettings

JOB = "bench-restart"


async def _wait_gone(core: Any, ns: str) -> None:
    deadline = time.monotonic() + 60
    while (await core.list_namespaced_pod(ns, label_selector=f"volcano.sh/job-name={JOB}", limit=1)).items:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the pods of {ns}/{JOB} were not deleted within 60 s")
        await asyncio.sleep(0.2)


async def restart(writer: ClusterWriter, ns: str) -> int:
    """The agent's path: list the job's pods, delete each with grace 0 and its UID. Returns the pods deleted."""
    pods = await writer.list_job_pods(JobRef(JobKind.VOLCANO, ns, JOB))
    result = await writer.delete_pods(pods, incident="bench", grace_seconds=0, target=JOB)
    if result.outcome.value != "done":
        raise RuntimeError(f"writer deletions: {result.outcome.value} {result.detail}")
    return len(pods)


class ModelsWriter(ClusterWriter):
    """The baseline: the writer as it was before it read these answers as raw JSON (the generated client builds
    a V1PodList and a V1Pod per deletion on the event loop); everything else, logging included, is the writer's."""

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        pods = await self.core.list_namespaced_pod(job.namespace, label_selector=f"volcano.sh/job-name={job.name}")
        return sorted(
            (
                PodRef(job.namespace, p.metadata.name, p.metadata.uid)
                for p in pods.items
                if not p.metadata.deletion_timestamp
            ),
            key=lambda p: p.name,
        )

    async def delete_pod(self, pod: PodRef, *, incident: str, grace_seconds: int | None) -> ActionResult:
        options = client.V1DeleteOptions(
            grace_period_seconds=grace_seconds, preconditions=client.V1Preconditions(uid=pod.uid)
        )

        async def call() -> Any:
            return await self.core.delete_namespaced_pod(pod.name, pod.namespace, body=options)

        result, _ = await self._write("delete-pod", str(pod), incident, call, done=f"delete {pod} at once")
        return result


async def _timed(step: Callable[[], Awaitable[int]], want: int) -> tuple[float, float]:
    """(thread CPU ms, wall ms) of `step`, which must restart `want` pods."""
    cpu, wall = time.thread_time(), time.perf_counter()
    n = await step()
    cpu, wall = (time.thread_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000
    if n != want:
        raise RuntimeError(f"restarted {n} pods, expected {want}")
    return cpu, wall


async def run(kubeconfig: str, pods: int, repeat: int) -> dict[str, list[tuple[float, float]]]:
    api = await new_api_client(kubeconfig)
    core = client.CoreV1Api(api)
    writers = {"writer": ClusterWriter(api), "models": ModelsWriter(api)}
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    await core.create_namespace({"metadata": {"name": ns}})
    out: dict[str, list[tuple[float, float]]] = {"writer": [], "models": []}
    try:
        for r in range(repeat):
            order = ("writer", "models") if r % 2 == 0 else ("models", "writer")
            for name in order:
                await create_pods(core, ns, pods, job=JOB, unscheduled=True)
                out[name].append(await _timed(functools.partial(restart, writers[name], ns), pods))
                await _wait_gone(core, ns)
    finally:
        await core.delete_namespace(ns)
        await api.close()
    return out


def main() -> int:
    """Run; print; with --write update the `restart writes` row of bench/RESULTS.md."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--pods", type=int, default=256, help="pods of the restarted job (default 256)")
    ap.add_argument("--repeat", type=int, default=5, help="restarts per path, alternating (default 5)")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.pods < 1 or args.repeat < 1:
        ap.error("--pods and --repeat must be at least 1")
    load = os.getloadavg()[0]
    with tempfile.NamedTemporaryFile("w", prefix="bench-restart-writes-", suffix=".log", delete=False) as logs:
        configure_logging(LogSettings(level="info", format="json"), logs)  # as the agent logs in a container
        got = asyncio.run(run(args.kubeconfig, args.pods, args.repeat))
    print(f"writer logs: {logs.name}")
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in got.items()}
    (wc, ww), (mc, mw) = med["writer"], med["models"]
    print(f"writer: loop CPU {wc:.1f} ms, wall {ww:.1f} ms per restart of {args.pods} pods (median of {args.repeat})")
    print(
        f"before (answers built into models): loop CPU {mc:.1f} ms, wall {mw:.1f} ms ({mc / wc:.1f}x the writer's CPU)"
    )
    if args.write:
        write_row(
            "restart writes",
            f"{wc:.1f} ms of event-loop CPU (wall {ww:.1f} ms) to list and delete (grace 0, UID precondition) the "
            f"{args.pods} pods of one job, median of {args.repeat}; testbed apiserver, load average "
            f"{load:.1f} → {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d', time.gmtime())}",
            "no answer built into models on the loop",
            f"the writer before (answers built into the generated client's models), alternating in the same run: "
            f"{mc:.1f} ms CPU (wall {mw:.1f} ms), "
            f"{mc / wc:.1f}x",
            f"python bench/bench_restart_writes.py --kubeconfig D/kubeconfig --pods {args.pods} "
            f"--repeat {args.repeat} --write",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
