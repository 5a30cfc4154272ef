"""A synthetic cluster's history as replay records, streamed: the input of the simulation benchmark
(bench/bench_sim.py) and of ``fault-agent replay``'s API (agent.replay ``run_replay``).

The cluster: `nodes` kwok-style nodes of 8 chips (``huawei.com/Ascend910``), most of them running Volcano Jobs
opted in to fault rescheduling (``fault-scheduling=force``), one pod per node holding all its chips (the pod
annotations the device plugin and Volcano write, as tests/scenarios/make_scenarios.py and the e2e tests have),
the rest spare. Each node's device plugin writes its ``mindx-dl-deviceinfo-<node>`` ConfigMap:

- on change at its next ``listWatchPeriod`` tick, default 5 s (component/ascend-device-plugin/main.go
  ``defaultListWatchPeriod``; the loop in pkg/server/manager.go ``ListenDevice`` ticks every period);
- unchanged, again once 5 minutes have passed since its last write (pkg/device/ascendcommon.go
  ``UpdateNodeDeviceInfo``: ``dataSame && time.Since(lastUpdateTimeStamp) < defaultUpdateTimeInterval*time.Minute``
  skips the write, ``defaultUpdateTimeInterval = 5``), with a new ``UpdateTime`` and so a new CheckCode.

Each node's kubelet reports its status every `node_status_s` (kubelet's ``nodeStatusReportFrequency``, 5 min by
default, when nothing changed): a Node MODIFIED with a new heartbeat time.

Faults arrive as a Poisson process at :data:`FAULTS_PER_CHIP_HOUR` per chip (Meta, "The Llama 3 Herd of
Models", 2024, section 3.3.4: 419 unexpected interruptions in a 54-day snapshot of pre-training on 16,384 GPUs),
spread over the chips of every node. The mix (:data:`FAULT_MIX`) is this generator's assumption, not a published
figure: mostly chip faults the device plugin reports (SeparateNPU: the node is replaced; RestartBusiness: the chip
comes back after `transient_s`), some nodes going NotReady. What the rest of the cluster did is written as a
recording would show it (the agent's writes themselves are the replay's output, not input): `restart_delay_s`
after a fault on a running job's node, Volcano deletes the job's pods, bumps its version and creates new ones, the
faulty node's pod on a spare node (none spare: the job waits for the repair); the node is healthy again
`repair_s` after the fault and becomes spare.

**The ConfigMaps are encoded by Go** (testbed/mcencode, through testbed/encoder.py): Python says which chips,
codes, levels and times; the bytes, the health lists and the CheckCode (SHA-256 over Go's ``json.Marshal``) are
Go's, in batches of every write of a `batch_s` window, one encoder round trip each. The agent's parser
(agent/core/detect) re-derives the CheckCode from the payload with its own Go-marshal reimplementation and
rejects a mismatch, so a template varied in Python would need Python's hash, the parser's own assumption; Go's
encoding shares nothing with it.

Streamed: :meth:`SimCluster.records` is a generator; what it keeps is per node and per job (a few hundred bytes
each), never per record. Deterministic: the same :class:`SimConfig` (its seed) gives the same records.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agent.replay import Record

LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
FAULTS_PER_CHIP_HOUR = LLAMA3_INTERRUPTIONS / (LLAMA3_DAYS * 24 * LLAMA3_GPUS)
"""Unexpected interruptions per accelerator-hour in Meta's Llama 3 pre-training (about 1.97e-5)."""

LIST_WATCH_PERIOD_S = 5
"""The device plugin's loop period (main.go ``defaultListWatchPeriod``): a change is written at the next tick."""
NOT_READY_GRACE_S = 5
"""The agent's default NotReady grace (``detect.node_not_ready_grace_s``): the restart of a NotReady node's job
comes after it."""
DEVICE_HEARTBEAT_S = 300
"""The device plugin rewrites an unchanged ConfigMap after 5 minutes (ascendcommon.go ``defaultUpdateTimeInterval``)."""

FAULT_MIX: tuple[tuple[str, float], ...] = (("separate", 0.5), ("restart-business", 0.3), ("not-ready", 0.2))
"""Share of each fault kind (an assumption of this generator; only the total rate is published)."""

CODES = {"separate": ("80E3A201", "SeparateNPU"), "restart-business": ("80E01801", "RestartBusiness")}
"""The chip code and device-plugin level of each chip-fault kind (those of tests/scenarios)."""

NPU = "huawei.com/Ascend910"
LISTED_LAST = (
    "vcjobs@*", "pods@*", "nodeinfo@mindx-dl", "faultconfig@kube-system", "publicfault@*", "acjobs@*", "podgroups@*",
    "leases@*", "resourceslices@*", "resourceclaims@*",
)  # fmt: skip
"""The agent's default watchers (agent.sources.watchers) listed after the Nodes and device ConfigMaps: each
watcher's list ends with its own LISTED (a LISTED ``*`` would list the Nodes again, with nothing)."""
START_MS = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
Encode = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
"""A batch device-plugin encoder: mcencode ``devices`` requests (encode.go ``deviceReq``) → ConfigMaps."""


@dataclass(frozen=True)
class SimConfig:
    """What to simulate. Times in seconds of simulated time; rates per chip and hour.

    Attributes:
        nodes: cluster size (1 to 100,000 and more); chips: per node.
        hours: the simulated window after the initial list.
        job_nodes: nodes (= pods) per job; spare_fraction: nodes kept without a job (replacements).
        fault_rate: faults per chip-hour (default the Llama 3 figure); mix: kinds and their shares.
        restart_delay_s: the fault seen (a chip's ConfigMap written; a NotReady node's 5 s agent grace over) →
            Volcano deletes the job's pods; pods_delay_s: → their new pods are Running.
        transient_s: a RestartBusiness chip is healthy again after this (before the new pods); repair_s: a
            SeparateNPU chip or a NotReady node after this.
        node_status_s: the kubelet's unchanged status report period (0: none).
        batch_s: the window whose ConfigMaps are encoded in one round trip.
        seed: the random source's seed; start_ms: Unix ms of the first record; namespace: the jobs'.
    """

    nodes: int
    hours: float = 1.0
    chips: int = 8
    job_nodes: int = 64
    spare_fraction: float = 0.02
    fault_rate: float = FAULTS_PER_CHIP_HOUR
    mix: tuple[tuple[str, float], ...] = FAULT_MIX
    restart_delay_s: float = 3.0
    pods_delay_s: float = 15.0
    transient_s: float = 5.0
    repair_s: float = 1800.0
    node_status_s: float = 300.0
    batch_s: float = 10.0
    seed: int = 0
    start_ms: int = START_MS
    namespace: str = "train"


@dataclass
class SimStats:
    """What a generation produced: records by resource and type, faults by kind, restarts, encoder requests."""

    records: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    restarts: int = 0
    encoded: int = 0


@dataclass
class _Job:
    name: str
    uid: str
    nodes: list[int]
    version: int = 0
    restarting: bool = False
    waiting: set[int] = field(default_factory=set)  # ranks without a node (no spare): placed at a repair


# event kinds on the timeline (heap entries (t_ms, seq, kind, a, b))
_DEVICE_TICK, _NODE_STATUS, _FAULT, _REPORT, _CLEAR, _RESTART, _PODS = range(7)


class SimCluster:
    """The generator of :class:`SimConfig`'s history. Use once: :meth:`records`.

    After each record :meth:`records` yields, :attr:`fault_job` names the job (``ns/name``) the record reports a
    fault for (a fault on a running job's node), else None: the benchmark's decision latency starts there.
    """

    def __init__(self, config: SimConfig, encode: Encode) -> None:
        if config.nodes < 1 or config.chips < 1 or config.job_nodes < 1:
            raise ValueError(f"nodes, chips and job_nodes must be at least 1: {config}")
        self.config = config
        self.encode = encode
        self.rng = random.Random(config.seed)
        self.stats = SimStats()
        self.fault_job: str | None = None
        self._rv = 0
        self._seq = 0
        self._heap: list[tuple[int, int, int, int, int]] = []
        n = config.nodes
        self.names = [f"node-{i:06d}" for i in range(n)]
        self.tick_offset_ms = [self.rng.randrange(LIST_WATCH_PERIOD_S * 1000) for _ in range(n)]
        self.last_write_ms = [0] * n
        self.write_due = [False] * n  # a change not yet written (at the next tick)
        self.chip_faults: dict[int, dict[int, tuple[str, int]]] = {}  # node → chip → (kind, fault ms)
        self.not_ready: dict[int, int] = {}  # node → since ms
        self.fault_pending: dict[int, str] = {}  # node → the job of a chip fault its next write reports
        self.node_job: list[int] = [-1] * n  # job index, -1 spare
        self.node_rank: list[int] = [0] * n
        self.spares: list[int] = []
        self.jobs: list[_Job] = []
        self.end_ms = config.start_ms + int(config.hours * 3_600_000)

    # --- helpers -------------------------------------------------------------------------------------------
    def _push(self, t_ms: int, kind: int, a: int = 0, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t_ms, self._seq, kind, a, b))

    def _meta(self, obj: dict[str, Any], uid: str) -> dict[str, Any]:
        self._rv += 1
        meta = obj.setdefault("metadata", {})
        meta["uid"] = uid
        meta["resourceVersion"] = str(self._rv)
        return obj

    def _rec(self, t_ms: int, type_: str, resource: str, obj: dict[str, Any], source: str | None = None) -> Record:
        key = f"{resource} {type_}"
        self.stats.records[key] = self.stats.records.get(key, 0) + 1
        return Record(t_ms, type_, resource, obj, source)

    @staticmethod
    def _iso(t_ms: int) -> str:
        return datetime.fromtimestamp(t_ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _next_tick(self, node: int, t_ms: int) -> int:
        """The device plugin's first tick of `node` at or after `t_ms`."""
        period = LIST_WATCH_PERIOD_S * 1000
        off = self.tick_offset_ms[node]
        return off + period * max(0, math.ceil((t_ms - off) / period))

    # --- objects (the shapes of tests/scenarios/make_scenarios.py, as the apiserver serves them) -------------
    def node_obj(self, node: int, t_ms: int) -> dict[str, Any]:
        """Node `node` at `t_ms`: Ready, or Unknown while NotReady (the lifecycle controller's write)."""
        name = self.names[node]
        since = self.not_ready.get(node)
        cond = (
            {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
             "lastHeartbeatTime": self._iso(since - 40_000), "lastTransitionTime": self._iso(since)}
            if since is not None
            else {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": self._iso(t_ms),
                  "lastTransitionTime": self._iso(self.config.start_ms - 86_400_000)}
        )  # fmt: skip
        chips = str(self.config.chips)
        return self._meta({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "host-arch": "huawei-x86",
                                                  "type": "kwok"}},
            "status": {"allocatable": {NPU: chips}, "capacity": {NPU: chips}, "conditions": [cond]},
        }, f"uid-{name}")  # fmt: skip

    def job_obj(self, j: int) -> dict[str, Any]:
        """Volcano Job `j` (force-mode fault rescheduling, one task of `job_nodes` replicas)."""
        job = self.jobs[j]
        size = len(job.nodes)
        return self._meta({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": job.name, "namespace": self.config.namespace,
                         "labels": {"ring-controller.atlas": "ascend-910b", "fault-scheduling": "force",
                                    "fault-retry-times": "100"}},
            "spec": {"minAvailable": size, "schedulerName": "volcano", "maxRetry": 1000, "queue": "default",
                     "tasks": [{"name": "worker", "replicas": size}]},
            "status": {"state": {"phase": "Restarting" if job.restarting else "Running"}, "version": job.version,
                       "retryCount": job.version, "running": 0 if job.restarting else size},
        }, job.uid)  # fmt: skip

    def pod_obj(self, j: int, rank: int) -> dict[str, Any]:
        """Rank `rank` of job `j` on its node, holding all the node's chips."""
        job = self.jobs[j]
        chips = ",".join(f"Ascend910-{c}" for c in range(self.config.chips))
        node = job.nodes[rank]
        return self._meta({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": f"{job.name}-worker-{rank}", "namespace": self.config.namespace,
                "labels": {"volcano.sh/job-name": job.name, "volcano.sh/job-namespace": self.config.namespace,
                           "volcano.sh/task-spec": "worker", "ring-controller.atlas": "ascend-910b"},
                "annotations": {"volcano.sh/job-version": str(job.version), NPU: chips,
                                "huawei.com/AscendReal": chips, "hccl/rankIndex": str(rank)},
                "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job.name,
                                     "uid": job.uid, "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": {"nodeName": self.names[node], "schedulerName": "volcano", "restartPolicy": "Never",
                     "containers": [{"name": "trainer", "image": "ms-arm:b120",
                                     "resources": {"limits": {NPU: str(self.config.chips)},
                                                   "requests": {NPU: str(self.config.chips)}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }, f"{job.uid}-v{job.version}-{rank}")  # fmt: skip

    def device_request(self, node: int, t_ms: int) -> dict[str, Any]:
        """The mcencode ``deviceReq`` of `node`'s device plugin writing at `t_ms` (its current chip faults)."""
        faults = self.chip_faults.get(node, {})
        return {
            "node": self.names[node],
            "update_time": t_ms // 1000,
            "faults": [
                {"chip": chip, "codes": [CODES[kind][0]], "level": CODES[kind][1], "fault_type": "CardUnhealthy",
                 "time_ms": at}
                for chip, (kind, at) in sorted(faults.items())
            ],
        }  # fmt: skip

    # --- the history -----------------------------------------------------------------------------------------
    def _place(self) -> None:
        cfg = self.config
        working = int(cfg.nodes * (1 - cfg.spare_fraction))
        count = max(1, working // cfg.job_nodes) if working >= 1 else 0
        for j in range(count):
            nodes = list(range(j * cfg.job_nodes, min((j + 1) * cfg.job_nodes, cfg.nodes)))
            self.jobs.append(_Job(f"train-{j:05d}", f"6b1a3f2e-0c1d-4e5f-9a8b-{cfg.seed % 10_000:04d}{j:08d}", nodes))
            for rank, node in enumerate(nodes):
                self.node_job[node], self.node_rank[node] = j, rank
        self.spares = [i for i in range(cfg.nodes) if self.node_job[i] < 0]

    def _fault_times(self) -> None:
        """Every fault onset of the window (Poisson at fault_rate per chip-hour), as timeline entries."""
        cfg = self.config
        rate_per_ms = cfg.fault_rate * cfg.nodes * cfg.chips / 3_600_000
        if rate_per_ms <= 0:
            return
        kinds = [k for k, _ in cfg.mix]
        weights = [w for _, w in cfg.mix]
        t = float(cfg.start_ms)
        while True:
            t += self.rng.expovariate(rate_per_ms)
            if t >= self.end_ms:
                return
            kind = self.rng.choices(range(len(kinds)), weights)[0]
            node = self.rng.randrange(cfg.nodes)
            self._push(int(t), _FAULT, node, kind * 1000 + self.rng.randrange(cfg.chips))

    def records(self) -> Iterator[Record]:
        """The history: the initial list at `start_ms` (the Nodes, their LISTED, the device ConfigMaps, their
        LISTED, jobs and pods, then the LISTED of every other default watcher: :data:`LISTED_LAST`), then the
        window's changes in time order, ending at ``start_ms + hours``."""
        cfg = self.config
        t0 = cfg.start_ms
        self._place()
        for i in range(cfg.nodes):
            self.fault_job = None
            yield self._rec(t0, "ADDED", "nodes", self.node_obj(i, t0))
        yield self._rec(t0, "LISTED", "*", {}, source="nodes@*")  # the Nodes first: device ConfigMaps name them
        for chunk in range(0, cfg.nodes, 2000):
            nodes = range(chunk, min(chunk + 2000, cfg.nodes))
            for i, cm in zip(nodes, self._encode([self.device_request(i, t0) for i in nodes]), strict=True):
                yield self._rec(t0, "ADDED", "configmaps", self._meta(cm, f"uid-cm-{self.names[i]}"))
        yield self._rec(t0, "LISTED", "*", {}, source="deviceinfo@kube-system")
        for j, job in enumerate(self.jobs):
            yield self._rec(t0, "ADDED", "vcjobs", self.job_obj(j))
            for rank in range(len(job.nodes)):
                yield self._rec(t0, "ADDED", "pods", self.pod_obj(j, rank))
        for source in LISTED_LAST:
            yield self._rec(t0, "LISTED", "*", {}, source=source)
        for i in range(cfg.nodes):
            self.last_write_ms[i] = t0
            self._push(self._next_tick(i, t0 + DEVICE_HEARTBEAT_S * 1000), _DEVICE_TICK, i, t0)
            if cfg.node_status_s > 0:
                self._push(t0 + self.rng.randrange(int(cfg.node_status_s * 1000)), _NODE_STATUS, i)
        self._fault_times()
        yield from self._timeline()

    def _encode(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.stats.encoded += len(requests)
        return self.encode(requests) if requests else []

    def _timeline(self) -> Iterator[Record]:
        """Pop the timeline window by window (`batch_s`), encode the window's ConfigMaps in one round trip."""
        cfg = self.config
        batch_ms = int(cfg.batch_s * 1000)
        heap = self._heap
        while heap and heap[0][0] < self.end_ms:
            until = min(heap[0][0] + batch_ms, self.end_ms)
            out: list[tuple[int, str, str, Any, str | None]] = []  # (t, type, resource, obj or request, fault job)
            requests: list[dict[str, Any]] = []
            while heap and heap[0][0] < until:
                t, _, kind, a, b = heapq.heappop(heap)
                self._step(t, kind, a, b, out, requests)
            encoded = iter(self._encode(requests))
            for t, type_, resource, obj, job in out:
                if obj is None:  # a device ConfigMap write: its encoding, in request order
                    cm = next(encoded)
                    obj = self._meta(cm, f"uid-cm-{cm['metadata']['name'].removeprefix('mindx-dl-deviceinfo-')}")
                self.fault_job = job
                yield self._rec(t, type_, resource, obj)
        self.fault_job = None

    def _job_ref(self, node: int) -> str | None:
        j = self.node_job[node]
        if j < 0 or self.jobs[j].restarting:
            return None
        return f"{self.config.namespace}/{self.jobs[j].name}"

    def _step(
        self, t: int, kind: int, a: int, b: int, out: list[tuple[int, str, str, Any, str | None]],
        requests: list[dict[str, Any]],
    ) -> None:  # fmt: skip
        cfg = self.config
        if kind == _DEVICE_TICK:  # a's device plugin tick: write if changed or 5 min old
            node = a
            if b != self.last_write_ms[node] and not self.write_due[node]:
                return  # a stale heartbeat entry (a change was written since)
            fault_job = self.fault_pending.pop(node, None) if self.write_due[node] else None
            self.write_due[node] = False
            self.last_write_ms[node] = t
            requests.append(self.device_request(node, t))
            out.append((t, "MODIFIED", "configmaps", None, fault_job))
            self._push(self._next_tick(node, t + DEVICE_HEARTBEAT_S * 1000), _DEVICE_TICK, node, t)
        elif kind == _NODE_STATUS:
            if a not in self.not_ready:
                out.append((t, "MODIFIED", "nodes", self.node_obj(a, t), None))
            self._push(t + int(cfg.node_status_s * 1000), _NODE_STATUS, a)
        elif kind == _FAULT:
            name, chip = cfg.mix[b // 1000][0], b % 1000
            node = a
            if node in self.not_ready or chip in self.chip_faults.get(node, {}):
                return  # already down: the same interruption
            self.stats.faults[name] = self.stats.faults.get(name, 0) + 1
            ref = self._job_ref(node)
            if name == "not-ready":
                self.not_ready[node] = t
                out.append((t, "MODIFIED", "nodes", self.node_obj(node, t), ref))
                self._push(t + int(cfg.repair_s * 1000), _CLEAR, node, -1)
            else:
                self.chip_faults.setdefault(node, {})[chip] = (name, t)
                if ref is not None:
                    self.fault_pending[node] = ref
                self._changed(node, t)
                heal = cfg.transient_s if name == "restart-business" else cfg.repair_s
                self._push(t + int(heal * 1000), _CLEAR, node, chip)
            if ref is not None:  # reported at the next tick (a chip) or once the agent's NotReady grace is over
                j = self.node_job[node]
                self.jobs[j].restarting = True
                seen = t + NOT_READY_GRACE_S * 1000 if name == "not-ready" else self._next_tick(node, t)
                bad = node if name != "restart-business" else -1
                self._push(seen + int(cfg.restart_delay_s * 1000), _RESTART, j, bad)
        elif kind == _CLEAR:
            node, chip = a, b
            if chip < 0:
                self.not_ready.pop(node, None)
                out.append((t, "MODIFIED", "nodes", self.node_obj(node, t), None))
            else:
                faults = self.chip_faults.get(node, {})
                faults.pop(chip, None)
                if not faults:
                    self.chip_faults.pop(node, None)
                self._changed(node, t)
            if node not in self.not_ready and node not in self.chip_faults and self.node_job[node] < 0:
                self._give_spare(node, t)
        elif kind == _RESTART:  # Volcano: the job's pods deleted, its version bumped; the bad node replaced
            j, bad = a, b
            job = self.jobs[j]
            self.stats.restarts += 1
            for rank in range(len(job.nodes)):
                if rank not in job.waiting:
                    out.append((t, "DELETED", "pods", self.pod_obj(j, rank), None))
            job.version += 1
            out.append((t, "MODIFIED", "vcjobs", self.job_obj(j), None))
            if bad >= 0:
                rank = self.node_rank[bad]
                self.node_job[bad] = -1
                if self.spares:
                    self._assign(j, rank, self.spares.pop())
                else:
                    job.waiting.add(rank)
            self._push(t + int(cfg.pods_delay_s * 1000), _PODS, j)
        elif kind == _PODS:
            job = self.jobs[a]
            if job.waiting:
                return  # placed when a node is repaired
            job.restarting = False
            out.append((t, "MODIFIED", "vcjobs", self.job_obj(a), None))
            for rank in range(len(job.nodes)):
                out.append((t, "ADDED", "pods", self.pod_obj(a, rank), None))

    def _assign(self, j: int, rank: int, node: int) -> None:
        self.jobs[j].nodes[rank] = node
        self.node_job[node], self.node_rank[node] = j, rank

    def _give_spare(self, node: int, t: int) -> None:
        """A repaired node: to a job waiting for one, else to the spares."""
        for j, job in enumerate(self.jobs):
            if job.waiting:
                rank = job.waiting.pop()
                self._assign(j, rank, node)
                if not job.waiting:
                    self._push(t + 1000, _PODS, j)
                return
        self.spares.append(node)

    def _changed(self, node: int, t: int) -> None:
        """The device plugin sees a change of `node`: written at its next tick."""
        if not self.write_due[node]:
            self.write_due[node] = True
            self._push(self._next_tick(node, t), _DEVICE_TICK, node, -1)


def simulate(config: SimConfig, encode: Encode) -> tuple[SimCluster, Iterator[Record]]:
    """A :class:`SimCluster` of `config` and its records (a generator)."""
    sim = SimCluster(config, encode)
    return sim, sim.records()


def go_encoder() -> Encode:
    """The batch encoder of this process's shared mcencode (testbed.encoder ``shared().device_cms``)."""
    from testbed.encoder import shared

    enc = shared()
    return enc.device_cms


def expected_faults(config: SimConfig) -> float:
    """The mean number of fault onsets of `config`'s window (rate × chips × hours; some fall on a chip or node
    already down and are not counted as new faults)."""
    return config.fault_rate * config.nodes * config.chips * config.hours
