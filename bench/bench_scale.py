"""Benchmark: the agent at scale — RSS, CPU share, fault → action latency and time to ready.

Cluster (full size, issue 39's): 5,000 kwok nodes (8 chips each, a device-plugin ConfigMap each), 1,000 Volcano
Jobs labelled ``fault-scheduling=force`` and 50,000 pods, created already bound to nodes that exist
(``spec.nodeName``: no scheduler needed; PodGC deletes pods bound to absent nodes) with their chips annotated (8
one-chip NPU pods and 2 CPU pods per node; 50 pods per job over 5 nodes), and the jobs as plain objects with a
Running status. The testbed's Volcano controller, Volcano scheduler, kube-scheduler and npu-plugin are stopped for
this benchmark (nothing must create pods for the jobs or bind them); Commands the agent creates therefore stay
unconsumed. kwok is restarted with more workers (``--kwok-parallelism``): with its default 4 it marks about 22
pods a second Running on this machine under load, and renews 5,000 nodes' leases no faster.

Then ``fault-agent run`` starts (time to ready: process start → /readyz 200, i.e. every source listed), and for
``--duration`` seconds a background writer sends ``--rate`` changes/s through the apiserver — half device-plugin
ConfigMap rewrites (a new UpdateTime, no fault: the plugin's periodic report) and half pod annotation changes —
while ``--faults`` SeparateNPU chip faults hit nodes of distinct jobs. Measured: the agent's RSS (/proc VmRSS)
after ready and at the end, its CPU time over the load window as a share of one core, the watch events it
counted (fault_agent_watch_events_total), the background rate the apiserver actually took, and fault → action
(the RestartJob Command's ADDED event on a watch in this process, as in bench_e2e) with p50/p99.

``--source clusterd``: the faults reach the agent as ClusterD's aggregated ``mindx-dl/cluster-info-device-<n>``
ConfigMaps (about ``--nodes-per-chunk`` nodes each; ClusterD's own split is by size, 800 KB, about 1,900 healthy
nodes), encoded by Go (testbed/mcencode: ClusterD's structs) from every device-plugin ConfigMap the benchmark
writes. The chunks exist before the agent starts, so its ``kube.fault_source: auto`` picks them (checked on its
fault_agent_fault_source gauge). Under load ClusterD rewrites every chunk that changed, whole, at most 5 times a
second (report.go ``maxTimePerSecond``); a chip fault rewrites its chunk at once, and fault → action is timed from
that chunk write's send. ``--source both``: a per-node agent's windows, then a ClusterD agent's, on one cluster.

Baseline in the same run: the same measurements with no background writer (idle cluster), before the load.

``--apf``: a fresh testbed whose kube-apiserver runs API Priority and Fairness (``--apf-seats`` read-only seats,
half as many mutating, so the priority levels can fill on a 2-core machine). The agent runs as deploy/'s
ServiceAccount (deploy/'s RBAC, a TokenRequest token) and the background writer as a ServiceAccount of its own
(bound to cluster-admin; not the testbed admin, whose ``system:masters`` group APF exempts), so both land in the
built-in ``service-accounts`` FlowSchema and share ``workload-low``. A third window then repeats the load with
deploy/flowschema.yaml applied (the agent in its own priority level): fault → action with and without the
FlowSchema in the same run, and the apiserver's APF rejections and queue waits per priority level in each window.

    python bench/bench_scale.py --nodes 5000 --pods 50000 --jobs 1000 --rate 2000 [--source both] [--apf] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import ssl
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from e2e_common import STORM_SETTINGS, open_testbed, say, start_agent, write_row

from testbed.agent_runner import AgentProcess
from testbed.cluster import Testbed
from testbed.encoder import Encoder
from testbed.inject import PREFIX, ChipFault, Injector, device_info_cm, device_info_cms, kwok_node, wall_clock
from testbed.observe import TimedRest, WatchRecorder, pct
from testbed.rest import Rest
from testbed.service_account import service_account_token, write_token_kubeconfig

ROW = "scale"
APF_ROW = "scale-apf"
DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
# deploy/'s RBAC files, in creation order (what tests/integration/test_deploy_agent_rbac.py proves is enough)
DEPLOY_RBAC = (
    "namespace.yaml", "serviceaccount.yaml", "clusterrole.yaml", "clusterrolebinding.yaml", "role.yaml",
    "rolebinding.yaml", "bookkeeping-rbac.yaml",
)  # fmt: skip
WRITER_SA = "bench-writer"
NAMESPACE = "bench-scale"
PODS_PER_NODE = 10
NPU_PODS_PER_NODE = 8
STOPPED = ("vc-controller-manager", "vc-scheduler", "kube-scheduler", "npu-plugin")
CLUSTERD_ROW = "scale, ClusterD source"
CLUSTERD_NS = "mindx-dl"  # ClusterD's namespace, the agent's kube.node_info_namespace default
NODES_PER_CHUNK = 1000
TARGET = (5000, 50000, 1000, 2000.0)
"""The row's full size (issue 39): nodes, pods, jobs, background changes/s asked."""
CLUSTERD_PERIOD_S = 0.2
"""ClusterD writes its ConfigMaps at most 5 times a second (component/clusterd/pkg/application/resource/report.go
``maxTimePerSecond``)."""


def chunk_limit(one_chunk_bytes: int, entries: int, per_chunk: int) -> int:
    """The byte limit (mcencode's ``max_chunk_bytes``) under which its greedy split (testbed/mcencode/clusterd.go
    ``chunks``: entries in sorted key order, a new chunk when the next entry would pass the limit) puts about
    `per_chunk` entries in each chunk, given the length in bytes of the same `entries` entries as one JSON object.
    Entries differ in length (node names, faults), so a chunk holds `per_chunk` give or take a few.

    Raises:
        ValueError: `entries` or `per_chunk` is not positive, or `one_chunk_bytes` too small for `entries`.
    """
    if entries <= 0 or per_chunk <= 0 or one_chunk_bytes < 2 + 2 * entries:
        raise ValueError(f"no chunk limit for {entries} entries in {one_chunk_bytes} bytes, {per_chunk} per chunk")
    # the object is "{" + entries joined by "," + "}": each entry costs its bytes and one separator; half an entry
    # more, so that chunks of slightly longer entries than the mean still take `per_chunk` and leave no chunk of a
    # few stragglers at the end
    per_entry = (one_chunk_bytes - 1) / entries
    return int(per_entry * (per_chunk + 0.5)) + 1


def chunk_holding(chunks: dict[str, str], key: str) -> str | None:
    """The name of the chunk (ConfigMap name → its one data value, a JSON object) with an entry `key` (a per-node
    ConfigMap's name, e.g. ``mindx-dl-deviceinfo-node-1``), or None. Go writes compact JSON (``"key":value``), and
    a key followed by ``:`` is never an entry's value (values are objects)."""
    needle = json.dumps(key) + ":"
    for name, text in chunks.items():
        if needle in text:
            return name
    return None


def changed_configmaps(report: list[dict[str, Any]], written: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """The ConfigMaps of `report` (ClusterD's, as mcencode's ``clusterd-report`` answers) whose data differs from
    what `written` (name → data) holds: what ClusterD writes after a change (it skips a ConfigMap it would write
    unchanged except on its 5 s resync, which this benchmark leaves out)."""
    return [cm for cm in report if written.get(cm["metadata"]["name"]) != cm["data"]]


class ClusterDReport:
    """ClusterD's ``cluster-info-*`` ConfigMaps written by the benchmark, about :data:`NODES_PER_CHUNK` nodes per
    device chunk: a dedicated mcencode aggregator (testbed/mcencode/clusterd.go: ClusterD's structs and encoding)
    holds every per-node device ConfigMap the benchmark wrote; :meth:`flush` writes the ConfigMaps whose content
    changed, whole, as ClusterD does. One flush at a time (a later report never lands before an earlier one).

    Not the testbed's ClusterD stand-in (testbed/clusterd.py): that one lists every pod once a second (for the
    PreSeparate rules), which at 50,000 pods is itself the load; no fault here is PreSeparate.
    """

    def __init__(self, per_chunk: int = NODES_PER_CHUNK) -> None:
        self.encoder = Encoder()
        self.per_chunk = per_chunk
        self.written: dict[str, dict[str, str]] = {}
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}  # the benchmark runs several loops
        self.writes = 0
        self.bytes_written = 0

    def put(self, cm: dict[str, Any]) -> None:
        """ClusterD reads one per-node ConfigMap (as written to the apiserver)."""
        slim = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": cm["metadata"]["name"], "namespace": cm["metadata"]["namespace"]},
            "data": cm["data"],
        }
        if not self.encoder.request("clusterd-put", configmap=slim):
            raise RuntimeError(f"the ClusterD aggregator ignored {slim['metadata']['name']}")

    def size_chunks(self, nodes: int) -> None:
        """Set the chunk limit from one report of everything put so far as a single chunk (`nodes` entries)."""
        one = self.encoder.request("clusterd-report", namespace=CLUSTERD_NS, max_chunk_bytes=1 << 30)
        text = next(
            v for cm in one if cm["metadata"]["name"].startswith("cluster-info-device-") for v in cm["data"].values()
        )
        limit = chunk_limit(len(text), nodes, self.per_chunk)
        self.encoder.request("clusterd-report", namespace=CLUSTERD_NS, max_chunk_bytes=limit)

    def device_chunks(self) -> dict[str, str]:
        """Device chunk name → its JSON text, as last written."""
        return {n: v for n, d in self.written.items() if n.startswith("cluster-info-device-") for v in d.values()}

    async def flush(self, api: Api, sent: dict[str, float] | None = None, put: dict[str, Any] | None = None) -> int:
        """Write (PUT, POST if absent) the ConfigMaps whose content changed since the last flush, after reading
        the per-node ConfigMap `put` if given (under the same lock: no other flush carries it first); with `sent`,
        the wall-clock time (``time.time()``, the clock testbed.observe's recorders use) each write was sent, by
        name. Returns how many were written."""
        lock = self._locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            if put is not None:
                await asyncio.to_thread(self.put, put)
            report = await asyncio.to_thread(self.encoder.request, "clusterd-report", namespace=CLUSTERD_NS)
            todo = changed_configmaps(report, self.written)

            async def one(cm: dict[str, Any]) -> None:
                name = cm["metadata"]["name"]
                if sent is not None:
                    sent[name] = time.time()
                path = f"/api/v1/namespaces/{CLUSTERD_NS}/configmaps"
                if name in self.written or await api.send("POST", path, cm, ok=(409,)) is None:
                    await api.send("PUT", f"{path}/{name}", cm)  # (409: a leftover of an earlier run on this testbed)
                self.written[name] = cm["data"]
                self.writes += 1
                self.bytes_written += sum(len(v) for v in cm["data"].values())

            await asyncio.gather(*(one(cm) for cm in todo))
            return len(todo)

    def close(self) -> None:
        self.encoder.close()


class Api:
    """A small aiohttp client with keep-alive connections for bulk writes (the stdlib client opens a TLS
    connection per request, which caps it far below the rates needed here)."""

    def __init__(self, tb: Testbed, connections: int = 32, token: str | None = None) -> None:
        rest = tb.rest()
        self.base = rest.base
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token or rest.token}"},
            connector=aiohttp.TCPConnector(ssl=rest.ctx or ssl.create_default_context(), limit=connections),
        )
        self.errors = 0

    async def send(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json", ok: tuple[int, ...] = ()
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        async with self.session.request(
            method, self.base + path, data=data, headers={"Content-Type": content_type}
        ) as resp:
            text = await resp.read()
            if resp.status >= 400 and resp.status not in ok:
                self.errors += 1
                raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {text[:300]!r}")
            return json.loads(text) if text and resp.status < 400 else None

    async def close(self) -> None:
        await self.session.close()


async def bounded(n: int, coros: Any) -> None:
    """Run the coroutines of the iterable `coros` with at most `n` in flight."""
    sem = asyncio.Semaphore(n)

    async def one(c: Any) -> None:
        async with sem:
            await c

    await asyncio.gather(*(one(c) for c in coros))


def _pod(i: int, per_job: int, node: str, job: str, job_uid: str) -> dict[str, Any]:
    slot = i % PODS_PER_NODE
    npu = slot < NPU_PODS_PER_NODE
    resources = {"requests": {PREFIX: "1"}, "limits": {PREFIX: "1"}} if npu else {}
    annotations = {"volcano.sh/job-version": "0", "volcano.sh/task-index": str(i % per_job)}
    if npu:
        annotations[PREFIX] = f"Ascend910-{slot}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-worker-{i % per_job}",
            "namespace": NAMESPACE,
            "labels": {
                "volcano.sh/job-name": job,
                "volcano.sh/job-namespace": NAMESPACE,
                "volcano.sh/task-spec": "worker",
                "app": "bench",
            },
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "name": job,
                    "uid": job_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "volcano",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "ms-arm:b120", "resources": resources}],
        },
    }


def _job(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"fault-scheduling": "force"}},
        "spec": {
            "minAvailable": replicas,
            "schedulerName": "volcano",
            "maxRetry": 1000,
            "queue": "default",
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "ms-arm:b120"}]}
                    },
                }
            ],
        },
    }


async def build_cluster(
    tb: Testbed, nodes: int, pods: int, jobs: int, clusterd: ClusterDReport | None = None, inflight: int = 32
) -> dict[str, str]:
    """Create the nodes, ConfigMaps, jobs (status Running) and pods, at most `inflight` requests at a time (pods
    bound to nodes created before them: PodGC deletes a pod bound to an absent node); with `clusterd`, every
    device-plugin ConfigMap is put into it too. Returns job name → uid."""
    api = Api(tb, connections=inflight)
    try:
        await api.send("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}, ok=(409,))
        names = [f"scale-node-{i}" for i in range(nodes)]
        t = time.monotonic()
        await bounded(inflight, (api.send("POST", "/api/v1/nodes", kwok_node(n), ok=(409,)) for n in names))
        cms = device_info_cms(names, now=wall_clock())  # one round trip to the Go encoder
        path = "/api/v1/namespaces/kube-system/configmaps"
        await bounded(inflight, (api.send("POST", path, cm, ok=(409,)) for cm in cms))
        if clusterd is not None:
            for cm in cms:
                clusterd.put(cm)
        say(f"{nodes} nodes and device-plugin ConfigMaps in {time.monotonic() - t:.0f} s")
        t = time.monotonic()
        uids: dict[str, str] = {}
        pods_per_job = pods // jobs
        job_names = [f"scale-job-{j}" for j in range(jobs)]

        async def make_job(name: str) -> None:
            path = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs"
            await api.send("POST", path, _job(name, pods_per_job), ok=(409,))
            obj = await api.send("GET", f"{path}/{name}")
            uids[name] = str(obj["metadata"]["uid"])
            status = {
                "status": {
                    "state": {"phase": "Running"},
                    "version": 0,
                    "running": pods_per_job,
                    "minAvailable": pods_per_job,
                }
            }
            await api.send("PATCH", f"{path}/{name}/status", status, "application/merge-patch+json")

        await bounded(inflight, (make_job(n) for n in job_names))
        say(f"{jobs} jobs in {time.monotonic() - t:.0f} s")
        t = time.monotonic()
        created = 0

        async def make_pod(i: int) -> None:
            nonlocal created
            job = job_names[(i // pods_per_job) % jobs]
            pod = _pod(i, pods_per_job, names[(i // PODS_PER_NODE) % nodes], job, uids[job])
            await api.send("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod, ok=(409,))
            created += 1
            if created % 5000 == 0 and created < pods:
                say(f"{created} pods in {time.monotonic() - t:.0f} s")

        await bounded(inflight, (make_pod(i) for i in range(pods)))
        say(f"{pods} pods in {time.monotonic() - t:.0f} s")
        return uids
    finally:
        await api.close()


def _check_sizes(nodes: int, pods: int, jobs: int) -> None:
    if pods % jobs or pods != nodes * PODS_PER_NODE or (pods // jobs) % PODS_PER_NODE:
        raise SystemExit(
            f"sizes must satisfy pods = {PODS_PER_NODE} × nodes and pods = jobs × a multiple of {PODS_PER_NODE} "
            "(each job fills whole nodes)"
        )


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Window:
    """What one measurement window saw."""

    label: str
    seconds: float = 0.0
    cpu_share: float = 0.0
    rss_end: int = 0
    events_seen: float = 0.0
    writes_sent: int = 0
    action_ms: list[float] = field(default_factory=list)
    missing: int = 0
    # of `missing`: jobs a Command had already restarted before their injected fault (another fault hit them
    # first, e.g. a node kwok failed to heartbeat under load went NotReady; their open incident absorbed the
    # injected fault, so no second Command is the right outcome)
    restarted_before: int = 0
    decision_p99_le: float = float("nan")  # upper bound of the decision histogram bucket holding p99, seconds
    # APF (``--apf``): per priority level, requests rejected and (count, mean s) waited in its queues
    apf_rejected: dict[str, float] = field(default_factory=dict)
    apf_wait: dict[str, tuple[float, float]] = field(default_factory=dict)
    # ``--source clusterd``: ClusterD ConfigMap writes (whole chunks) and their bytes in the window
    chunk_writes: int = 0
    chunk_bytes: int = 0


async def window(
    tb: Testbed,
    agent: AgentProcess,
    label: str,
    *,
    duration: float,
    rate: float,
    faults: list[tuple[str, str, int]],
    background_nodes: list[str],
    pod_names: list[str],
    max_inflight: int = 16,
    writer_token: str | None = None,
    apf: bool = False,
    clusterd: ClusterDReport | None = None,
) -> Window:
    """One window: optional background writes at `rate`/s (as `writer_token`, default the testbed admin), and
    `faults` (node, job, chip) spread evenly; with `apf`, the apiserver's APF counters over the window too.

    With `clusterd`, ClusterD aggregates the device-plugin ConfigMaps: every per-node ConfigMap written (the
    background's and the faults') is put into it, and it writes the chunks that changed at most every
    :data:`CLUSTERD_PERIOD_S` (a fault's chunk at once); fault → action is timed from the write of the chunk that
    holds the faulty node's entry (the agent reads only ClusterD's ConfigMaps then)."""
    assert agent.proc is not None
    pid = agent.proc.pid
    w = Window(label)
    commands = WatchRecorder(tb, f"/apis/bus.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/commands")
    await commands.start()
    inj = Injector(TimedRest.of(tb))
    timed: TimedRest = inj.rest  # type: ignore[assignment]
    api = Api(tb, connections=64, token=writer_token)
    stop = asyncio.Event()
    sent = 0

    async def quiet(coro: Any) -> None:
        with contextlib.suppress(Exception):  # counted in api.errors
            await coro

    async def device_write(node: str, cm: dict[str, Any]) -> None:
        await api.send("PUT", f"/api/v1/namespaces/kube-system/configmaps/mindx-dl-deviceinfo-{node}", cm)
        if clusterd is not None:
            await asyncio.to_thread(clusterd.put, cm)

    async def clusterd_writer() -> None:
        # ClusterD's report loop: the chunks that changed, at most every CLUSTERD_PERIOD_S
        assert clusterd is not None
        while not stop.is_set():
            with contextlib.suppress(Exception):  # counted in api.errors
                await clusterd.flush(api)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CLUSTERD_PERIOD_S)

    async def background() -> None:
        nonlocal sent
        if rate <= 0:
            return
        tick = 0.05
        per_tick = max(1, round(rate * tick))
        n = 0
        next_t = time.monotonic()
        inflight: set[asyncio.Task[Any]] = set()
        while not stop.is_set():
            # this tick's device-plugin rewrites, encoded by Go in one round trip
            tick_nodes = [
                background_nodes[((n + i) // 2) % len(background_nodes)]
                for i in range(1, per_tick + 1)
                if (n + i) % 2 and background_nodes
            ]
            tick_cms = iter(device_info_cms(tick_nodes, now=wall_clock()) if tick_nodes else [])
            for _ in range(per_tick):
                n += 1
                if n % 2 and background_nodes:
                    node = background_nodes[(n // 2) % len(background_nodes)]
                    coro = device_write(node, next(tick_cms))
                else:
                    pod = pod_names[(n // 2) % len(pod_names)]
                    coro = api.send(
                        "PATCH", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}",
                        {"metadata": {"annotations": {"bench/tick": str(n)}}}, "application/merge-patch+json",
                    )  # fmt: skip
                task = asyncio.create_task(quiet(coro))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
                # at most `max_inflight` requests outstanding: an apiserver that cannot take the asked rate then
                # sets the pace instead of building a deep queue that every client's requests (the agent's
                # restart writes too) would wait behind (the testbed runs without priority and fairness)
                if len(inflight) >= max_inflight:
                    await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            sent = n
            next_t += tick
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))
        await asyncio.gather(*inflight, return_exceptions=True)

    apf_before = await asyncio.to_thread(apf_counters, tb.rest()) if apf else {}
    events_before = agent.metric("fault_agent_watch_events_total")
    buckets_before = decision_buckets(agent)
    cpu_before = cpu_seconds(pid)
    chunks_before = (clusterd.writes, clusterd.bytes_written) if clusterd is not None else (0, 0)
    started = time.monotonic()
    bg = asyncio.create_task(background())
    cd_task = asyncio.create_task(clusterd_writer()) if clusterd is not None and rate > 0 else None
    injected: list[tuple[str, float]] = []
    gap = duration / max(1, len(faults))
    try:
        await asyncio.sleep(min(2.0, gap))
        for node, job, chip in faults:
            await asyncio.to_thread(inj.chip_fault, node, [ChipFault(chip)])
            if clusterd is None:
                injected.append((job, timed.last_write(f"mindx-dl-deviceinfo-{node}", sent=True)))
            else:
                # ClusterD reads what the device plugin wrote and rewrites the chunk that holds the node
                cm = await asyncio.to_thread(device_info_cm, node, [ChipFault(chip)], now=wall_clock())
                chunk_sent: dict[str, float] = {}
                await clusterd.flush(api, chunk_sent, put=cm)
                chunk = chunk_holding(clusterd.device_chunks(), f"mindx-dl-deviceinfo-{node}")
                if chunk is None or chunk not in chunk_sent:
                    raise RuntimeError(f"the fault on {node} changed no ClusterD chunk holding it ({chunk_sent})")
                injected.append((job, chunk_sent[chunk]))
            await asyncio.sleep(gap)
        await asyncio.sleep(max(0.0, duration - (time.monotonic() - started)))
    finally:
        stop.set()
        await bg
        if cd_task is not None:
            await cd_task
        if clusterd is not None:
            w.chunk_writes = clusterd.writes - chunks_before[0]
            w.chunk_bytes = clusterd.bytes_written - chunks_before[1]
        w.seconds = time.monotonic() - started
        w.cpu_share = (cpu_seconds(pid) - cpu_before) / w.seconds
        w.events_seen = agent.metric("fault_agent_watch_events_total") - events_before
        w.decision_p99_le = bucket_quantile(buckets_before, decision_buckets(agent), 0.99)
        w.rss_end = rss_bytes(pid)
        w.writes_sent = sent - api.errors
        await api.close()
        if apf:
            w.apf_rejected, w.apf_wait = apf_delta(apf_before, await asyncio.to_thread(apf_counters, tb.rest()))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = {}
        for job, at in injected:
            for s in commands.events:
                if s.type == "ADDED" and s.at >= at and s.obj.get("target", {}).get("name") == job:
                    found[job] = (s.at - at) * 1000
                    break
        if len(found) == len(injected):
            break
        await asyncio.sleep(0.5)
    await commands.stop()
    w.action_ms = list(found.values())
    w.missing = len(injected) - len(found)
    w.restarted_before = sum(
        1
        for job, at in injected
        if job not in found
        and any(s.type == "ADDED" and s.at < at and s.obj.get("target", {}).get("name") == job for s in commands.events)
    )
    return w


def decision_buckets(agent: AgentProcess) -> dict[float, float]:
    """The agent's fault_agent_decision_seconds histogram: bucket upper bound (s) → cumulative count."""
    out: dict[float, float] = {}
    for line in agent.metrics().splitlines():
        if line.startswith("fault_agent_decision_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """Upper bound of the bucket holding the `q` quantile of the observations made between two scrapes."""
    delta = {le: after.get(le, 0.0) - before.get(le, 0.0) for le in after}
    total = delta.get(float("inf"), 0.0)
    if total <= 0:
        return float("nan")
    for le in sorted(delta):
        if delta[le] >= q * total:
            return le
    return float("inf")


APF_METRICS = (
    "apiserver_flowcontrol_rejected_requests_total",
    "apiserver_flowcontrol_request_wait_duration_seconds_sum",
    "apiserver_flowcontrol_request_wait_duration_seconds_count",
)


def parse_apf_metrics(text: str) -> dict[tuple[str, str], float]:
    """The apiserver's APF counters in a /metrics exposition `text`, summed per (metric, priority_level).

    Metric names: :data:`APF_METRICS` (kube-apiserver's flowcontrol metrics, k8s.io/apiserver
    pkg/util/flowcontrol/metrics); lines of other metrics, or without a ``priority_level`` label, are skipped.
    """
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name not in APF_METRICS or 'priority_level="' not in rest:
            continue
        level = rest.split('priority_level="', 1)[1].split('"', 1)[0]
        try:
            value = float(rest.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        out[(name, level)] = out.get((name, level), 0.0) + value
    return out


def apf_counters(rest: Rest) -> dict[tuple[str, str], float]:
    """:func:`parse_apf_metrics` of the apiserver's /metrics (read as the testbed admin)."""
    return parse_apf_metrics(rest.get_text("/metrics"))


def apf_delta(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]
) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """(priority level → requests rejected, priority level → (requests that waited, mean wait s)) between two
    :func:`apf_counters` scrapes; levels with nothing in the window are left out."""
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    rejected = {lvl: v for (m, lvl), v in d.items() if m == APF_METRICS[0] and v > 0}
    wait = {}
    for (m, lvl), n in d.items():
        if m == APF_METRICS[2] and n > 0:
            wait[lvl] = (n, d.get((APF_METRICS[1], lvl), 0.0) / n)
    return rejected, wait


def _deploy_docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text(encoding="utf-8")) if d]


def flowschema_subject() -> tuple[str, str]:
    """(namespace, name) of the ServiceAccount deploy/flowschema.yaml's FlowSchema matches. Raises SystemExit
    if it is not deploy/serviceaccount.yaml's (the measurement would then compare nothing)."""
    fs = next(d for d in _deploy_docs("flowschema.yaml") if d["kind"] == "FlowSchema")
    subject = fs["spec"]["rules"][0]["subjects"][0]["serviceAccount"]
    sa = _deploy_docs("serviceaccount.yaml")[0]["metadata"]
    if (subject["namespace"], subject["name"]) != (sa["namespace"], sa["name"]):
        raise SystemExit(f"deploy/flowschema.yaml matches {subject}, not deploy/serviceaccount.yaml's {sa}")
    return str(sa["namespace"]), str(sa["name"])


def apf_identities(tb: Testbed, workdir: Path) -> tuple[dict[str, str], str]:
    """deploy/'s RBAC created, and a writer ServiceAccount bound to cluster-admin. Returns (agent settings that
    run it as deploy/'s ServiceAccount, the writer's bearer token)."""
    rest = tb.rest()
    ns, sa = flowschema_subject()
    for name in DEPLOY_RBAC:
        for doc in _deploy_docs(name):
            if doc["kind"] in {"Role", "RoleBinding"}:  # the bookkeeping Roles' namespaces (MindCluster's)
                rest.apply(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": doc["metadata"]["namespace"]}}
                )
            rest.apply(doc)
    rest.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": WRITER_SA, "namespace": NAMESPACE}})
    rest.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": WRITER_SA},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": WRITER_SA, "namespace": NAMESPACE}],
        }
    )
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = write_token_kubeconfig(workdir / "agent-kubeconfig", tb, service_account_token(rest, ns, sa))
    settings = {"KUBE__KUBECONFIG": str(kubeconfig), "LEADER__NAMESPACE": ns}
    return settings, service_account_token(rest, NAMESPACE, WRITER_SA)


def apply_flowschema(tb: Testbed) -> None:
    """deploy/flowschema.yaml's PriorityLevelConfiguration and FlowSchema, then a pause for the apiserver's APF
    config controller to pick them up."""
    rest = tb.rest()
    for doc in _deploy_docs("flowschema.yaml"):
        rest.apply(doc)
    time.sleep(3)


def apf_summary(w: Window) -> str:
    """One line of a window's APF counters: rejections and queue waits per priority level."""
    rejected = ", ".join(f"{lvl} {n:.0f}" for lvl, n in sorted(w.apf_rejected.items())) or "none"
    waits = ", ".join(f"{lvl} {n:.0f} req mean {mean * 1000:.1f} ms" for lvl, (n, mean) in sorted(w.apf_wait.items()))
    return f"rejected: {rejected}; queue wait: {waits or 'none'}"


KWOK_DEFAULT_PARALLELISM = 4
"""kwok's workers per kind of play (pod stages, node stages, node leases) unless configured (kwok v0.8.0
KwokConfigurationOptions podPlayStageParallelism, nodePlayStageParallelism, nodeLeaseParallelism)."""


def kwok_configuration(parallelism: int) -> dict[str, Any]:
    """A kwok ``KwokConfiguration`` (config.kwok.x-k8s.io/v1alpha1) that gives each kind of play `parallelism`
    workers. Raises ValueError if `parallelism` is not positive."""
    if parallelism < 1:
        raise ValueError(f"kwok parallelism must be at least 1, not {parallelism}")
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "podPlayStageParallelism": parallelism,
            "nodePlayStageParallelism": parallelism,
            "nodeLeaseParallelism": parallelism,
        },
    }


def widen_kwok(tb: Testbed, parallelism: int) -> None:
    """Restart the testbed's kwok with `parallelism` workers per kind of play (its configuration file added to
    the ones it reads). With kwok's 4, pods went Running at about 22/s on this machine under load (a 5,000-pod
    build waited 5 min, 50,000 would wait 40), and 5,000 nodes' leases (renewed every 10 s) would outrun 4 lease
    workers; the kubelets kwok stands in for work in parallel."""
    if parallelism == KWOK_DEFAULT_PARALLELISM:
        return
    cfg = tb.workdir / f"kwok-parallelism-{parallelism}.yaml"
    cfg.write_text(yaml.safe_dump(kwok_configuration(parallelism)), encoding="utf-8")
    comp = tb.components["kwok"]
    tb.kill("kwok")
    comp.argv = [a for a in comp.argv if not a.startswith("--config=" + str(tb.workdir / "kwok-parallelism-"))]
    comp.argv.append(f"--config={cfg}")
    tb.start("kwok")


def stop_components(tb: Testbed) -> None:
    for name in STOPPED:
        if name in tb.components:
            tb.kill(name)


async def wait_pods_running(tb: Testbed, pods: int, timeout_s: float) -> int:
    """Wait until kwok has marked `pods` pods of the namespace Running (or the timeout); returns the count."""
    api = Api(tb, connections=2)
    deadline = time.monotonic() + timeout_s
    running = 0
    try:
        while time.monotonic() < deadline:
            running, cont = 0, ""
            while True:
                page = await api.send(
                    "GET",
                    f"/api/v1/namespaces/{NAMESPACE}/pods?limit=5000&fieldSelector=status.phase%3DRunning"
                    + (f"&continue={cont}" if cont else ""),
                )
                running += len(page.get("items", []))
                cont = page.get("metadata", {}).get("continue", "")
                if not cont:
                    break
            if running >= pods:
                return running
            await asyncio.sleep(max(5.0, pods / 5000))  # each look lists every pod: not too often
        return running
    finally:
        await api.close()


async def write_first_report(tb: Testbed, clusterd: ClusterDReport) -> None:
    """ClusterD's first report (its namespace created first): present before the agent starts, so ``auto`` picks it."""
    api = Api(tb, connections=8)
    try:
        await api.send("POST", "/api/v1/namespaces", {"metadata": {"name": CLUSTERD_NS}}, ok=(409,))
        await clusterd.flush(api)
    finally:
        await api.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; sizes and fault counts are checked (SystemExit with the reason)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="a running testbed's folder (default: a fresh one, stopped after)")
    parser.add_argument("--nodes", type=int, default=TARGET[0])
    parser.add_argument("--pods", type=int, default=TARGET[1])
    parser.add_argument("--jobs", type=int, default=TARGET[2])
    parser.add_argument("--rate", type=float, default=TARGET[3], help="background changes per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of each measurement window")
    parser.add_argument("--faults", type=int, default=50, help="chip faults per window (distinct jobs)")
    parser.add_argument("--write", action="store_true", help="update the row in bench/RESULTS.md")
    parser.add_argument(
        "--source",
        choices=("per-node", "clusterd", "both"),
        default="per-node",
        help="where faults come from: the device plugin's per-node ConfigMaps (default), ClusterD's "
        f"cluster-info-device-<n> chunks ({NODES_PER_CHUNK} nodes each) aggregated from them, or both (an agent "
        "for each, one after the other, on the same cluster)",
    )
    parser.add_argument(
        "--running-wait",
        type=float,
        default=300.0,
        help="seconds to wait at most for kwok to mark the pods Running before the agent starts (default 300)",
    )
    parser.add_argument(
        "--nodes-per-chunk",
        type=int,
        default=NODES_PER_CHUNK,
        help=f"with --source clusterd: about this many nodes per device chunk (default {NODES_PER_CHUNK})",
    )
    parser.add_argument(
        "--agent-fault-source",
        choices=("auto", "per-node", "clusterd"),
        default="auto",
        help="the agent's kube.fault_source (default auto: it finds the source itself)",
    )
    parser.add_argument(
        "--kwok-parallelism",
        type=int,
        default=16,
        help=f"kwok's workers per kind of play, pods, nodes, leases (default 16; {KWOK_DEFAULT_PARALLELISM} "
        "keeps the testbed's kwok as it is)",
    )
    parser.add_argument(
        "--create-inflight", type=int, default=32, help="creation requests outstanding at most (default 32)"
    )
    parser.add_argument(
        "--apf",
        action="store_true",
        help="fresh testbed with API Priority and Fairness on; agent and writer as ServiceAccounts; a third "
        "window under load with deploy/flowschema.yaml applied",
    )
    parser.add_argument(
        "--apf-seats", type=int, default=30, help="with --apf: kube-apiserver --max-requests-inflight (default 30)"
    )
    parser.add_argument(
        "--writer-inflight", type=int, default=16, help="background requests outstanding at most (default 16)"
    )
    args = parser.parse_args(argv)
    _check_sizes(args.nodes, args.pods, args.jobs)
    if args.apf and args.source != "per-node":
        raise SystemExit("--apf measures the per-node source: drop --source")
    windows = (3 if args.apf else 2) * len(arm_sources(args.source))
    if args.faults * windows > args.jobs:
        raise SystemExit(f"--faults × {windows} must be at most --jobs ({windows} windows, distinct jobs)")
    if args.apf and args.dir:
        raise SystemExit("--apf starts its own testbed (API Priority and Fairness on): drop --dir")
    if args.apf_seats < 2 or min(args.writer_inflight, args.create_inflight, args.nodes_per_chunk) < 1:
        raise SystemExit(
            "--apf-seats must be at least 2, --writer-inflight, --create-inflight and --nodes-per-chunk at least 1"
        )
    if args.kwok_parallelism < 1:
        raise SystemExit("--kwok-parallelism must be at least 1")
    wanted = "clusterd" if args.source == "both" else args.source  # (both: the per-node arm sets per-node itself)
    if args.agent_fault_source not in ("auto", wanted):
        raise SystemExit(f"--agent-fault-source {args.agent_fault_source} would not read --source {args.source}")
    return args


@dataclass
class Arm:
    """One agent's measurement on the built cluster: the fault source it reads and what its windows saw."""

    source: str
    ready_s: float = 0.0
    rss_ready: int = 0
    windows: list[Window] = field(default_factory=list)


def arm_sources(source: str) -> list[str]:
    """The fault sources measured, in order, for ``--source`` (``both``: per-node first, then ClusterD, each with
    an agent of its own on the same cluster)."""
    return ["per-node", "clusterd"] if source == "both" else [source]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_start = os.getloadavg()[0]
    tb, close = open_testbed(
        args.dir, priority_and_fairness=args.apf, max_requests_inflight=args.apf_seats if args.apf else None
    )
    sources = arm_sources(args.source)
    clusterd: ClusterDReport | None = None
    arms: list[Arm] = []
    try:
        stop_components(tb)
        widen_kwok(tb, args.kwok_parallelism)
        say(
            f"stopped {', '.join(STOPPED)}; kwok with {args.kwok_parallelism} workers per play; "
            f"building {args.nodes} nodes, {args.jobs} jobs, {args.pods} pods"
        )
        clusterd = ClusterDReport(args.nodes_per_chunk) if "clusterd" in sources else None
        t = time.monotonic()
        asyncio.run(build_cluster(tb, args.nodes, args.pods, args.jobs, clusterd, args.create_inflight))
        build_s = time.monotonic() - t
        running = asyncio.run(wait_pods_running(tb, args.pods, args.running_wait))
        say(f"{running}/{args.pods} pods Running (kwok), {time.monotonic() - t:.0f} s after the build started")
        chunk_sizes: list[int] = []
        if clusterd is not None:
            clusterd.size_chunks(args.nodes)
            asyncio.run(write_first_report(tb, clusterd))
            chunk_sizes = [len(json.loads(text)) for _, text in sorted(clusterd.device_chunks().items())]
            say(f"ClusterD's report written: {len(chunk_sizes)} device chunks of {chunk_sizes} nodes")
        identity: dict[str, str] = {}
        writer_token: str | None = None
        if args.apf:
            identity, writer_token = apf_identities(tb, tb.workdir / "bench-scale")
            say("agent runs as deploy/'s ServiceAccount, the writer as ServiceAccount " + WRITER_SA)
        pods_per_job = args.pods // args.jobs
        plan_specs = [("idle", 0.0), ("load", args.rate)] + ([("load+flowschema", args.rate)] if args.apf else [])
        n_windows = len(plan_specs) * len(sources)

        def fault_plan(first_job: int) -> list[tuple[str, str, int]]:
            plan = []
            for k in range(args.faults):
                j = first_job + n_windows * k
                node = f"scale-node-{(j * pods_per_job // PODS_PER_NODE) % args.nodes}"
                plan.append((node, f"scale-job-{j}", 0))
            return plan

        plans = [fault_plan(i) for i in range(n_windows)]
        fault_nodes = {n for plan in plans for n, _, _ in plan}
        background_nodes = [f"scale-node-{i}" for i in range(args.nodes) if f"scale-node-{i}" not in fault_nodes]
        pod_names = [f"scale-job-{j}-worker-{k}" for j in range(args.jobs) for k in range(0, pods_per_job, 7)]
        for a, source in enumerate(sources):
            arm = Arm(source)
            t = time.monotonic()
            # fault → action is timed to the RestartJob Command (the guide job's default restart, auto, deletes
            # its pods instead, which this benchmark does not time: each fault would count as missing)
            settings = {**STORM_SETTINGS, "POLICY__VOLCANO_RESTART": "command", **identity}
            # per-node beside ClusterD's ConfigMaps (there for the other arm) is set: auto would pick them
            fault_source = "per-node" if source == "per-node" and clusterd is not None else args.agent_fault_source
            if fault_source != "auto":
                settings["KUBE__FAULT_SOURCE"] = fault_source
            agent = start_agent(tb, tb.workdir / f"bench-scale-{source}", settings, f"bench-scale-agent-{source}")
            try:
                arm.ready_s = time.monotonic() - t
                assert agent.proc is not None
                reads = agent.metric("fault_agent_fault_source", source=source)
                if reads != 1:
                    raise SystemExit(f"the agent does not read the {source} source (fault_agent_fault_source {reads})")
                arm.rss_ready = rss_bytes(agent.proc.pid)
                say(f"{source} agent ready in {arm.ready_s:.1f} s, RSS {arm.rss_ready / 2**20:.0f} MiB")
                for i, (label, rate) in enumerate(plan_specs):
                    if label == "load+flowschema":
                        apply_flowschema(tb)
                        say("deploy/flowschema.yaml applied")
                    arm.windows.append(
                        asyncio.run(
                            window(
                                tb,
                                agent,
                                label,
                                rate=rate,
                                faults=plans[a * len(plan_specs) + i],
                                duration=args.duration,
                                background_nodes=background_nodes,
                                pod_names=pod_names,
                                max_inflight=args.writer_inflight,
                                writer_token=writer_token,
                                apf=args.apf,
                                clusterd=clusterd if source == "clusterd" else None,
                            )
                        )
                    )
            finally:
                agent.stop()
                kept = Path(tempfile.gettempdir()) / f"bench-scale-agent-{source}.log"
                with contextlib.suppress(OSError):
                    shutil.copy(agent.log, kept)
                    say(f"agent log kept in {kept}")
            arms.append(arm)
    finally:
        if clusterd is not None:
            clusterd.close()
        close()
    load = f"load average {load_start:.1f} → {os.getloadavg()[0]:.1f}"
    print(f"machine: {os.cpu_count()} CPUs, {load}")
    print(
        f"cluster: {args.nodes} nodes, {args.pods} pods ({running} Running), {args.jobs} jobs; built in {build_s:.0f} s"
    )
    if chunk_sizes:
        print(f"ClusterD: {len(chunk_sizes)} device chunks of {chunk_sizes} nodes")
    for arm in arms:
        print(f"{arm.source}: time to ready {arm.ready_s:.1f} s; RSS at ready {arm.rss_ready / 2**20:.0f} MiB")
        for w in arm.windows:
            print(
                f"  {w.label}: {w.writes_sent / w.seconds:,.0f} background writes/s taken, agent saw "
                f"{w.events_seen / w.seconds:,.0f} watch events/s, CPU {w.cpu_share * 100:.0f} % of one core, "
                f"RSS {w.rss_end / 2**20:.0f} MiB, fault → action p50 {pct(w.action_ms, 0.5):.0f} ms, "
                f"p99 {pct(w.action_ms, 0.99):.0f} ms ({len(w.action_ms)} faults, {w.missing} missing, of which "
                f"{w.restarted_before} restarted before their fault by another one), decision "
                f"p99 ≤ {w.decision_p99_le * 1000:.0f} ms (agent histogram)"
                + (
                    f", ClusterD wrote {w.chunk_writes / w.seconds:.1f} ConfigMaps/s "
                    f"({w.chunk_bytes / w.seconds / 2**20:.1f} MiB/s)"
                    if arm.source == "clusterd"
                    else ""
                )
            )
            if args.apf:
                print(f"    APF: {apf_summary(w)}")
    if args.write:
        for arm in arms:
            write_arm_row(args, arm, build_s=build_s, running=running, chunk_sizes=chunk_sizes, load=load)
    timed_nothing = [f"{arm.source} {w.label}" for arm in arms for w in arm.windows if args.faults and not w.action_ms]
    if timed_nothing:  # every fault missing: the benchmark measured no fault → action (it stopped working)
        print(f"no fault → action timed in window(s) {', '.join(timed_nothing)}: every fault missing", file=sys.stderr)
        return 1
    return 0


def write_arm_row(
    args: argparse.Namespace, arm: Arm, *, build_s: float, running: int, chunk_sizes: list[int], load: str
) -> None:
    """The arm's row in bench/RESULTS.md: ``scale-apf (<seats> seats)`` with ``--apf``, else ``scale`` or
    ``scale, ClusterD source``."""
    idle, loaded = arm.windows[:2]
    i50, i99 = pct(idle.action_ms, 0.5), pct(idle.action_ms, 0.99)
    l50, l99 = pct(loaded.action_ms, 0.5), pct(loaded.action_ms, 0.99)
    took = loaded.writes_sent / loaded.seconds
    if args.apf:
        fs = arm.windows[2]
        f50, f99 = pct(fs.action_ms, 0.5), pct(fs.action_ms, 0.99)
        write_row(
            f"{APF_ROW} ({args.apf_seats} seats)",
            f"{args.nodes:,} nodes, {args.pods:,} pods, {args.jobs} jobs, APF on (apiserver "
            f"--max-requests-inflight={args.apf_seats}), agent as deploy/'s ServiceAccount, writer as another "
            f"({args.writer_inflight} in flight): under load fault → action p99 **{f99:.0f} ms with "
            f"deploy/flowschema.yaml** (p50 {f50:.0f} ms, {len(fs.action_ms)} faults, {fs.missing} missing, "
            f"{fs.writes_sent / fs.seconds:,.0f} writes/s taken; APF {apf_summary(fs)}) against **{l99:.0f} ms "
            f"without** (p50 {l50:.0f} ms, {len(loaded.action_ms)} faults, {loaded.missing} missing, "
            f"{took:,.0f} writes/s taken; APF {apf_summary(loaded)}); {load}",
            "the FlowSchema keeps the agent's p99 from queueing behind other clients",
            f"idle, no FlowSchema: p99 {i99:.0f} ms (p50 {i50:.0f} ms)",
            f"python bench/bench_scale.py --apf --nodes {args.nodes} --pods {args.pods} --jobs {args.jobs} "
            f"--rate {args.rate:.0f} --duration {args.duration:.0f} --faults {args.faults} "
            f"--apf-seats {args.apf_seats} --writer-inflight {args.writer_inflight}",
        )
        return
    full = (args.nodes, args.pods, args.jobs, args.rate) == TARGET
    size = f"{args.nodes:,} nodes, {args.pods:,} pods ({running:,} Running), {args.jobs} jobs" + (
        "" if full else " (reduced size)"
    )
    clusterd = arm.source == "clusterd"
    source = (
        f"; faults from ClusterD's cluster-info-device-<n> ({len(chunk_sizes)} chunks of "
        f"{min(chunk_sizes)}-{max(chunk_sizes)} nodes, written whole at most every {CLUSTERD_PERIOD_S:g} s: "
        f"{loaded.chunk_writes / loaded.seconds:.1f} ConfigMaps/s, "
        f"{loaded.chunk_bytes / loaded.seconds / 2**20:.1f} MiB/s under load), agent fault_source "
        f"{args.agent_fault_source}"
        if clusterd
        else ""
    )
    write_row(
        CLUSTERD_ROW if clusterd else ROW,
        f"{size}, {args.rate:,.0f} background changes/s asked, {took:,.0f}/s taken by the apiserver, agent saw "
        f"{loaded.events_seen / loaded.seconds:,.0f} watch events/s: RSS {loaded.rss_end / 2**20:.0f} MiB, "
        f"CPU {loaded.cpu_share * 100:.0f} % of one core, decision p99 ≤ {loaded.decision_p99_le * 1000:.0f} ms "
        f"(agent's histogram bucket), fault → action p99 {l99:.0f} ms (p50 {l50:.0f} ms, "
        f"{len(loaded.action_ms)} faults, {loaded.missing} without a Command within 30 s, of which "
        f"{loaded.restarted_before} had been restarted just before by another fault and joined that incident), "
        f"ready {arm.ready_s:.1f} s after start, cluster built in {build_s:.0f} s{source} (2-core machine shared "
        f"with the apiserver, etcd, kwok and the writer; {load})",
        "{:,} nodes / {:,} pods / {:,} jobs / {:,.0f} events/s".format(*TARGET),
        f"idle (no background): RSS {idle.rss_end / 2**20:.0f} MiB, CPU {idle.cpu_share * 100:.0f} %, decision "
        f"p99 ≤ {idle.decision_p99_le * 1000:.0f} ms, fault → action p99 {i99:.0f} ms "
        f"(p50 {i50:.0f} ms); RSS at ready {arm.rss_ready / 2**20:.0f} MiB",
        f"python bench/bench_scale.py --nodes {args.nodes} --pods {args.pods} --jobs {args.jobs} "
        f"--rate {args.rate:.0f} --duration {args.duration:.0f} --faults {args.faults} "
        f"--kwok-parallelism {args.kwok_parallelism} --running-wait {args.running_wait:.0f} --source {args.source}"
        + (f" --nodes-per-chunk {args.nodes_per_chunk}" if chunk_sizes else ""),
    )


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
