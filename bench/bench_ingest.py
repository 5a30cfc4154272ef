"""Benchmark `ingest`: pod watch events through parse → record → index, on one core.

A synthetic stream of realistic pod watch events (4–6 KB of JSON each: a training pod with its Volcano
labels, chip annotations, containers, env, volumes, status and conditions) is fed through the real engine
(:meth:`Watcher.watch_once`: chunk split, orjson, PodConverter, ClusterState.apply) from memory. In the same
run it measures bare ``orjson.loads`` of the same lines (the in-process ceiling) and kubernetes_asyncio's
model deserialisation into ``V1Pod`` (what an agent using the generated client does), and prints ratios.

Run: ``python bench/bench_ingest.py [--events 200000] [--pods 20000] [--write]``
(``--write`` updates the ``ingest`` row of bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from kubernetes_asyncio.client.exceptions import ApiException

from agent.core.cluster import PodRecord
from agent.kube.watch import CountingObserver, ListPage, Resource, Watcher
from agent.sources.pods import PodConverter, PodLines, pod_signal_time
from agent.sources.state import ClusterState

RESULTS = Path(__file__).parent / "RESULTS.md"
HEADER = "| row | figure | target | baseline in same run | command |\n|---|---|---|---|---|\n"
PODS = Resource("pods", "Pod", "", "v1", "pods")


def update_row(row: str, figure: str, target: str, baseline: str, command: str) -> None:
    """Replace (or append) the line of `row` in bench/RESULTS.md, creating the file with its header."""
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    line = f"| {row} | {figure} | {target} | {baseline} | `{command}` |"
    lines = text.rstrip("\n").split("\n")
    for i, old in enumerate(lines):
        if old.startswith(f"| {row} |"):
            lines[i] = line
            break
    else:
        lines.append(line)
    RESULTS.write_text("\n".join(lines) + "\n")


async def create_pods(core: Any, namespace: str, count: int, *, job: str = "", unscheduled: bool = False) -> None:
    """Create `count` pods like :func:`make_pod`'s (without status and server-set fields) in `namespace` through
    the generated client `core` (a CoreV1Api), 32 at a time, once its default ServiceAccount exists (pods are
    refused before). `job`: every pod's ``volcano.sh/job-name`` label (and no owner). `unscheduled`: no node, a
    scheduler that does not exist: the pods stay Pending (PodGC deletes pods bound to absent nodes after 40 s).

    Raises:
        RuntimeError: a pod was refused. ApiException: the ServiceAccount did not appear within 60 s.
    """
    deadline = time.monotonic() + 60
    while True:
        try:
            await core.read_namespaced_service_account("default", namespace)
            break
        except ApiException:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    sem = asyncio.Semaphore(32)

    async def create(i: int) -> None:
        body: Any = make_pod(i, rv=0, namespace=namespace)
        server_set = ("uid", "resourceVersion", "creationTimestamp", "managedFields")
        body["metadata"] = {k: v for k, v in body["metadata"].items() if k not in server_set}
        body.pop("status")
        if job:
            body["metadata"]["labels"]["volcano.sh/job-name"] = job
            body["metadata"].pop("ownerReferences", None)
        if unscheduled:
            body["spec"].pop("nodeName", None)
            body["spec"]["schedulerName"] = "bench-no-scheduler"
        # the recorded pod mounts the token volume the ServiceAccount admission adds; let it add it again
        vols = {v["name"] for v in body["spec"].get("volumes", [])}
        for c in body["spec"].get("containers", []):
            c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m["name"] in vols]
        async with sem:
            resp = await core.create_namespaced_pod(namespace, body, _preload_content=False)
            try:
                if resp.status >= 300:  # raw responses do not raise: a refused pod must not pass unseen
                    raise RuntimeError(f"creating pod {i}: HTTP {resp.status}: {(await resp.read())[:300]!r}")
            finally:
                resp.release()

    await asyncio.gather(*(create(i) for i in range(count)))


def make_pod(
    i: int, *, rv: int, namespace: str = "train", phase: str = "Running", exit_code: int | None = None
) -> dict[str, Any]:
    """A realistic Volcano training pod as the apiserver serves it (about 4.5 KB of JSON)."""
    job = f"llm-pretrain-{i // 16:05d}"
    rank = i % 16
    node = f"worker-{i // 2:06d}"
    chips = ",".join(f"Ascend910-{c}" for c in range(4 * (i % 2), 4 * (i % 2) + 4))
    job_uid = f"6b1a3f2e-0c1d-4e5f-9a8b-{i // 16:012d}"
    terminated = (
        {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": "2026-01-01T00:00:05Z",
                        "finishedAt": "2026-01-01T06:00:00Z", "containerID": f"containerd://{i:064x}"}}
        if exit_code is not None
        else {"running": {"startedAt": "2026-01-01T00:00:05Z"}}
    )  # fmt: skip
    return {
        "metadata": {
            "name": f"{job}-worker-{rank}",
            "namespace": namespace,
            "uid": f"0a9b8c7d-6e5f-4a3b-2c1d-{i:012d}",
            "resourceVersion": str(rv),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {
                "volcano.sh/job-name": job, "volcano.sh/job-namespace": namespace, "volcano.sh/queue-name": "default",
                "volcano.sh/task-spec": "worker", "app": "mindspore", "ring-controller.atlas": "ascend-910b",
            },
            "annotations": {
                "volcano.sh/job-version": "0", "volcano.sh/task-index": str(rank),
                "scheduling.k8s.io/group-name": f"{job}-{job_uid}",
                "huawei.com/Ascend910": chips, "huawei.com/AscendReal": chips, "hccl/rankIndex": str(rank),
                "predicate-time": "1767225600", "huawei.com/kltDev": chips,
            },
            "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job,
                                 "uid": job_uid, "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [{"manager": "vc-controller-manager", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}],
        },
        "spec": {
            "nodeName": node, "schedulerName": "volcano", "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
            "hostNetwork": True, "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
            "nodeSelector": {"host-arch": "huawei-arm", "accelerator-type": "module-910b-8"},
            "containers": [{
                "name": "mindspore", "image": "registry.local/ms-arm:2.3.0-b120", "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/bash", "-c", "cd /job/code && bash scripts/train_start.sh /job/code/ /job/output/ "
                            "pretrain.py --config=/job/code/configs/llama2_70b.yaml --run_mode=train"],
                "env": [{"name": n, "value": v} for n, v in [
                    ("XDL_IP", "10.0.0.1"), ("POD_IP", f"10.1.{i // 250 % 250}.{i % 250}"),
                    ("ASCEND_VISIBLE_DEVICES", chips), ("RANK_SIZE", "16"), ("RANK_ID", str(rank)),
                    ("MS_SCHED_HOST", "10.0.0.1"), ("MS_SCHED_PORT", "29500"), ("MS_ROLE", "MS_WORKER"),
                    ("HCCL_CONNECT_TIMEOUT", "1800"), ("GLOG_v", "2"), ("ASCEND_GLOBAL_LOG_LEVEL", "3"),
                    ("TTP_PORT", "8000"), ("MINDX_TASK_ID", job_uid), ("HCCL_EXEC_TIMEOUT", "1800"),
                ]],
                "resources": {"limits": {"huawei.com/Ascend910": "4", "cpu": "90", "memory": "500Gi"},
                              "requests": {"huawei.com/Ascend910": "4", "cpu": "90", "memory": "500Gi"}},
                "volumeMounts": [{"name": v, "mountPath": p} for v, p in [
                    ("ascend-910-config", "/user/serverid/devindex/config"), ("code", "/job/code"),
                    ("data", "/job/data"), ("output", "/job/output"), ("ascend-driver", "/usr/local/Ascend/driver"),
                    ("dshm", "/dev/shm"), ("localtime", "/etc/localtime"),
                    ("kube-api-access", "/var/run/secrets/kubernetes.io/serviceaccount"),
                ]],
                "ports": [{"containerPort": 2222, "name": "ascendjob-port", "protocol": "TCP"}],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            }],
            "volumes": [
                {"name": "ascend-910-config", "configMap": {"name": f"rings-config-{job}", "defaultMode": 420}},
                {"name": "code", "hostPath": {"path": "/data/atlas_dls/public/code/", "type": ""}},
                {"name": "data", "hostPath": {"path": "/data/atlas_dls/public/dataset/", "type": ""}},
                {"name": "output", "hostPath": {"path": "/data/atlas_dls/output/", "type": ""}},
                {"name": "ascend-driver", "hostPath": {"path": "/usr/local/Ascend/driver", "type": ""}},
                {"name": "dshm", "emptyDir": {"medium": "Memory"}},
                {"name": "localtime", "hostPath": {"path": "/etc/localtime", "type": ""}},
            ],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
            ],
        },
        "status": {
            "phase": phase, "hostIP": f"192.168.{i // 500 % 250}.{i // 2 % 250}",
            "podIP": f"10.1.{i // 250 % 250}.{i % 250}",
            "startTime": "2026-01-01T00:00:01Z", "qosClass": "Guaranteed",
            "conditions": [
                {"type": t, "status": "True" if phase == "Running" or t == "PodScheduled" else "False",
                 "lastProbeTime": None, "lastTransitionTime": "2026-01-01T00:00:05Z"}
                for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [{
                "name": "mindspore", "ready": phase == "Running", "restartCount": 0, "started": phase == "Running",
                "image": "registry.local/ms-arm:2.3.0-b120", "imageID": f"registry.local/ms-arm@sha256:{i:064x}",
                "containerID": f"containerd://{i:064x}", "state": terminated, "lastState": {},
            }],
        },
    }  # fmt: skip


def event_lines(events: int, pods: int, seed: int = 7) -> Iterator[bytes]:
    """`pods` ADDED events, then MODIFIED events (increasing resourceVersion, some failures) up to `events`."""
    rnd = random.Random(seed)
    rv = 1000
    for i in range(min(pods, events)):
        rv += 1
        yield orjson.dumps({"type": "ADDED", "object": make_pod(i, rv=rv)}) + b"\n"
    for _ in range(events - pods):
        rv += 1
        i = rnd.randrange(pods)
        failed = rnd.random() < 0.05
        obj = make_pod(i, rv=rv, phase="Failed" if failed else "Running", exit_code=1 if failed else None)
        yield orjson.dumps({"type": "MODIFIED", "object": obj}) + b"\n"


class MemoryTransport:
    """A Transport serving one watch stream from memory in 64 KiB chunks (list is empty)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def list_page(self, resource: Resource, *, limit: int, continue_token: str) -> ListPage:
        return ListPage([], "1000", "")

    @asynccontextmanager
    async def watch(self, resource: Resource, *, resource_version: str, timeout_s: int) -> AsyncIterator[Any]:
        data = memoryview(self.data)

        async def chunks() -> AsyncIterator[bytes]:
            for off in range(0, len(data), 65536):
                yield bytes(data[off : off + 65536])

        yield chunks()


async def engine_run(data: bytes) -> tuple[float, ClusterState, CountingObserver]:
    """CPU seconds of this thread (``time.thread_time``: not the time other processes took the core) to push
    `data` through watch_once into a fresh ClusterState; the state and the observer's counts."""
    state = ClusterState()
    obs = CountingObserver()
    convert = PodConverter()
    watcher: Watcher[PodRecord] = Watcher(
        MemoryTransport(data), PODS, convert, state.store("pods"), state.apply,
        observer=obs, signal_time=pod_signal_time, inactivity_s=3600, unchanged=convert.unchanged,
        typed=PodLines(convert),
    )  # fmt: skip
    watcher.resource_version = "1000"
    gc.collect()
    started = time.thread_time()
    await watcher.watch_once()
    return time.thread_time() - started, state, obs


def model_rate(lines: list[bytes]) -> float:
    """Events/s of kubernetes_asyncio's own path: json.loads + ApiClient deserialisation into V1Pod."""
    from kubernetes_asyncio.client import ApiClient

    async def run() -> float:
        async with ApiClient() as api:
            deserialize = api._ApiClient__deserialize
            started = time.thread_time()
            for line in lines:
                event = json.loads(line)
                deserialize(event["object"], "V1Pod")
            return len(lines) / (time.thread_time() - started)

    return asyncio.run(run())


def main() -> int:
    """Run the benchmark; print the figures; with --write update bench/RESULTS.md."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--pods", type=int, default=20_000)
    ap.add_argument("--model-sample", type=int, default=10_000, help="events deserialised by the client models")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of bare loads and the engine, alternated")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    lines = list(event_lines(args.events, args.pods))
    data = b"".join(lines)
    sizes = sorted(len(x) for x in lines)
    print(f"{len(lines)} events, {len(data) / 1e6:.0f} MB, size p5/p50/p95 = "
          f"{sizes[len(sizes) // 20]}/{sizes[len(sizes) // 2]}/{sizes[len(sizes) * 19 // 20]} bytes")  # fmt: skip

    def bare_run() -> float:
        gc.collect()
        started = time.thread_time()
        for line in lines:
            orjson.loads(line)
        return time.thread_time() - started

    # thread CPU seconds, best of --repeat rounds, bare and engine alternated (the machine's load moves both)
    bare_s: list[float] = []
    engine_s: list[float] = []
    for _ in range(args.repeat):
        bare_s.append(bare_run())
        seconds, state, obs = asyncio.run(engine_run(data))
        engine_s.append(seconds)
        assert len(state.pods) == min(args.pods, args.events), "every pod must be in the state"
        assert state.check_indexes() == [], "indexes must be consistent"
    bare = len(lines) / min(bare_s)
    engine = len(lines) / min(engine_s)
    seconds = min(engine_s)
    modeled = model_rate(lines[: args.model_sample])

    load = os.getloadavg()[0]
    print(f"engine (split+orjson+record+index): {engine:,.0f} events per CPU-s ({seconds:.2f} s thread CPU)")
    print(f"bare orjson.loads:                  {bare:,.0f} events per CPU-s (engine = {engine / bare:.2f} x ceiling)")
    print(f"kubernetes_asyncio V1Pod models:    {modeled:,.0f} events per CPU-s "
          f"(engine = {engine / modeled:.1f} x faster)")  # fmt: skip
    print(f"events by type: {obs.events}; best of {args.repeat}; load {load:.1f}")
    if args.write:
        update_row(
            "ingest",
            f"{engine:,.0f} events per CPU-s ({len(lines):,} pod events, p50 {sizes[len(sizes) // 2]} B, one core, "
            f"thread CPU, best of {args.repeat}, load {load:.1f})",
            "≥ 0.8× of bare orjson.loads in the same run (issue 39)",
            f"bare orjson.loads {bare:,.0f} per CPU-s (engine {engine / bare:.2f}×); client V1Pod models "
            f"{modeled:,.0f}/s (engine {engine / modeled:.1f}× faster)",
            f"python bench/bench_ingest.py --events {args.events} --pods {args.pods} --write",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
