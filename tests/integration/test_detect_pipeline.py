"""Detection on the testbed: the agent's real watch sources and detectors, in-process, against the real apiserver.

What MindCluster's components and the kubelet write (the fixture ConfigMaps of tests/fixtures/, node conditions,
failing pods) goes to the testbed; the pipeline `fault-agent run` uses (agent.sources.watchers.build_watchers
feeding agent.engine.detecting.DetectPipeline, plus its once-a-second tick) turns it into Fault / FaultCleared
items, which the tests read off the pipeline's queue. Kafka, correlation and actions are not involved.

Isolation: every test uses node names of its own (device ConfigMaps are cluster-wide in kube-system, NodeD's in
mindx-dl), watches pods only in its namespace, and reads the fault-level overrides from its namespace, so a
concurrently running agent never sees this test's fault config.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from agent.core.detect.checkcode import check_code, go_map
from agent.core.faults import Fault, FaultCleared, FaultKind, FaultLevel
from agent.core.progress import LEASE_JOB_LABEL, PROGRESS_LABEL, STEP_ANNOTATION, lease_name
from agent.engine.detecting import DetectPipeline
from agent.kube.client import ApiTransport, new_api_client
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sinks.metrics import AgentMetrics
from agent.sources.state import ClusterState
from agent.sources.watchers import build_watchers
from testbed.cluster import Testbed
from testbed.inject import DEVICE_NS, NODED_NS, PREFIX, Injector, kwok_node

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GRACE_S = 2.0
DOWN_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def fixture(name: str) -> dict[str, Any]:
    """A fixture ConfigMap as a dict (a fresh copy)."""
    doc: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return doc


def for_node(doc: dict[str, Any], node: str, *, namespace: str | None = None) -> dict[str, Any]:
    """`doc` (a device-plugin or NodeD fixture) renamed for `node`, keeping its data (and so its CheckCode,
    which covers the content, not the name) as it is."""
    out = copy.deepcopy(doc)
    prefix = out["metadata"]["name"].rsplit("-", 1)[0]
    for known in ("mindx-dl-deviceinfo", "mindx-dl-nodeinfo"):
        if out["metadata"]["name"].startswith(known + "-"):
            prefix = known
    out["metadata"]["name"] = f"{prefix}-{node}"
    out["metadata"]["namespace"] = namespace or (DEVICE_NS if prefix == "mindx-dl-deviceinfo" else NODED_NS)
    out["metadata"].pop("resourceVersion", None)
    return out


def unique_nodes(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:6]
    return [f"det-{tag}-{i}" for i in range(n)]


def make_nodes(inj: Injector, names: list[str], *, resource: str = PREFIX) -> None:
    """Create kwok Nodes `names` with 8 chips of `resource` (a device ConfigMap counts only for a Node that
    exists, and its chips are checked against that Node's NPU resource and capacity)."""
    for name in names:
        node = kwok_node(name)
        for key in ("allocatable", "capacity"):
            node["status"][key][resource] = node["status"][key].pop(PREFIX)
        inj.rest.apply(node)


@dataclass
class Pipeline:
    """The running watch + detect pipeline; `items` is everything it queued so far, in order."""

    detect: DetectPipeline
    state: ClusterState
    registry: CollectorRegistry
    tasks: list[asyncio.Task[Any]]
    logs: list[MutableMapping[str, Any]]
    items: list[Fault | FaultCleared] = field(default_factory=list)

    def faults(self, node: str) -> list[Fault]:
        return [i for i in self.items if isinstance(i, Fault) and i.node == node]

    def cleared(self, node: str) -> list[FaultCleared]:
        return [i for i in self.items if isinstance(i, FaultCleared) and i.fault.node == node]

    def rejections(self, name: str) -> list[MutableMapping[str, Any]]:
        """The pipeline's "input rejected" log lines about objects named `name`."""
        return [e for e in self.logs if e.get("event") == "input rejected" and name in str(e.get("source"))]

    def rejected_total(self, reason: str) -> float:
        """fault_agent_input_rejected_total{source="ConfigMap",reason=`reason`} of this pipeline's metrics."""
        labels = {"source": "ConfigMap", "reason": reason}
        return self.registry.get_sample_value("fault_agent_input_rejected_total", labels) or 0.0

    def alive(self) -> None:
        for t in self.tasks:
            assert not t.done(), f"task {t.get_name()} ended: {t.exception() if not t.cancelled() else 'cancelled'}"

    async def wait(self, check: Callable[[], Any], *, what: str, timeout_s: float = 20.0) -> Any:
        """Poll until `check()` returns something truthy (returned); fails naming `what` after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.alive()
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                tail = [
                    f"{type(i).__name__}({i.node if isinstance(i, Fault) else i.fault.node})" for i in self.items[-10:]
                ]
                pytest.fail(f"timed out after {timeout_s} s waiting for {what}; last items: {tail}")
            await asyncio.sleep(0.1)

    async def seen(self, source: str, key: str, resource_version: str) -> None:
        """Wait until the state holds `key` of `source` at `resource_version` (the detectors ran on it: the
        pipeline is called synchronously right after the state applied the change)."""
        store = self.state.store(source)
        await self.wait(
            lambda: (rec := store.get(key)) is not None and rec.resource_version == resource_version,
            what=f"{source} {key} at resourceVersion {resource_version}",
        )


@contextlib.asynccontextmanager
async def running_pipeline(
    testbed: Testbed, namespace: str, kube: dict[str, Any] | None = None, **detect: Any
) -> AsyncIterator[Pipeline]:
    """Start the watchers and detectors the agent runs, watching pods only in `namespace` and the fault config in
    `namespace` (plus the `kube` settings given); yields once every source has listed."""
    settings = Settings.model_validate(
        {
            "kube": {
                "kubeconfig": str(testbed.kubeconfig),
                "namespaces": [namespace],
                "fault_config_namespace": namespace,
                **(kube or {}),
            },
            "kafka": {"enabled": False},
            "detect": {"node_not_ready_grace_s": GRACE_S, **detect},
        }
    )
    api = await new_api_client(settings.kube.kubeconfig)
    state = ClusterState()
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    registry = CollectorRegistry()
    metrics = AgentMetrics(registry, cluster="it")
    detect_pipeline = DetectPipeline(settings, state, queue, metrics=metrics, clock=SystemClock())
    watchers = build_watchers(settings.kube, ApiTransport(api), state, observer=metrics, sink=detect_pipeline)
    stop = asyncio.Event()
    with capture_logs() as logs:
        p = Pipeline(detect_pipeline, state, registry, [], logs)

        async def drain() -> None:
            while True:
                p.items.append(await queue.get())

        async def tick() -> None:  # as agent.runtime.app's tick loop: time-based detections once the state is ready
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=0.5)
                if state.ready:
                    detect_pipeline.tick()

        p.tasks = [asyncio.create_task(w.run(stop), name=f"watch:{w.resource.watcher_id}") for w in watchers]
        p.tasks += [asyncio.create_task(drain(), name="drain"), asyncio.create_task(tick(), name="tick")]
        try:
            await p.wait(lambda: state.ready, what="every source listed")
            yield p
        finally:
            stop.set()
            for t in p.tasks:
                t.cancel()
            await asyncio.gather(*p.tasks, return_exceptions=True)
            await api.close()


@pytest.fixture
def injector(testbed: Testbed) -> Iterator[tuple[Injector, list[str]]]:
    """The testbed's fault injector and a list of node names whose Node and ConfigMaps are deleted afterwards."""
    inj = Injector(testbed.rest())
    names: list[str] = []
    yield inj, names
    inj.delete_nodes(names)


async def put_configmap(api: k8s.ApiClient, doc: dict[str, Any]) -> str:
    """Create or replace the ConfigMap `doc`; returns its new resourceVersion."""
    core = k8s.CoreV1Api(api)
    ns, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
    try:
        current = await core.read_namespaced_config_map(name, ns)
    except ApiException as e:
        if e.status != 404:
            raise
        created = await core.create_namespaced_config_map(ns, doc)  # type: ignore[arg-type]
        return str(created.metadata.resource_version)
    body = copy.deepcopy(doc)
    body["metadata"]["resourceVersion"] = current.metadata.resource_version
    replaced = await core.replace_namespaced_config_map(name, ns, body)  # type: ignore[arg-type]
    return str(replaced.metadata.resource_version)


def ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, tz=UTC)


# ---------------------------------------------------------------------------------------------- device plugin

# fixture -> (kind, level, chips, codes, signal time from the fixture's fault_time in ms)
DEVICE_CASES = {
    "deviceinfo-chip-restartbusiness.json": (
        FaultKind.CHIP,
        FaultLevel.RESTART_BUSINESS,
        ("Ascend910-3",),
        ("80E01801",),
        ms(1767225601123),
    ),
    "deviceinfo-chip-separate-multi-code.json": (
        FaultKind.CHIP,
        FaultLevel.SEPARATE,
        ("Ascend910-5",),
        ("80E21007", "80E3A201"),
        ms(1767229200456),
    ),
    "deviceinfo-network-preseparate.json": (
        FaultKind.NETWORK,
        FaultLevel.PRE_SEPARATE,
        ("Ascend910-1",),
        ("81078603",),
        ms(1767232800789),
    ),
    "deviceinfo-npu-prefix-restartnpu.json": (
        FaultKind.CHIP,
        FaultLevel.RESTART_NPU,
        ("npu-6",),
        ("80E18005",),
        ms(1767236400000),
    ),
}


async def test_device_configmaps_yield_their_faults_and_clear_on_a_healthy_rewrite(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, injector: tuple[Injector, list[str]]
) -> None:
    inj, names = injector
    nodes = dict(zip(DEVICE_CASES, unique_nodes(len(DEVICE_CASES)), strict=True))
    names += nodes.values()
    for fx, node in nodes.items():
        make_nodes(inj, [node], resource="huawei.com/npu" if "npu-prefix" in fx else PREFIX)
    async with running_pipeline(testbed, namespace) as p:
        started = datetime.now(UTC)
        docs = {fx: for_node(fixture(fx), node) for fx, node in nodes.items()}
        for doc in docs.values():
            await put_configmap(kube_client, doc)

        for fx, node in nodes.items():
            kind, level, chips, codes, signal_time = DEVICE_CASES[fx]
            (fault,) = await p.wait(partial(p.faults, node), what=f"the fault of {fx} on {node}")
            assert (fault.kind, fault.level, fault.node, fault.chips, fault.codes) == (kind, level, node, chips, codes)
            assert fault.check_code_ok is True, fx
            assert fault.signal_time == signal_time, fx
            assert fault.observed_at >= started
            assert (fault.source.kind, fault.source.namespace, fault.source.name) == (
                "ConfigMap",
                DEVICE_NS,
                f"mindx-dl-deviceinfo-{node}",
            )
            assert not p.rejections(node)

        # the plugin rewrites the same content (a new resourceVersion, same faults): nothing new comes out
        node = nodes["deviceinfo-chip-separate-multi-code.json"]
        doc = docs["deviceinfo-chip-separate-multi-code.json"]
        doc["metadata"].setdefault("annotations", {})["rewritten"] = "1"
        rv = await put_configmap(kube_client, doc)
        await p.seen("deviceinfo", f"{DEVICE_NS}/mindx-dl-deviceinfo-{node}", rv)
        assert len(p.faults(node)) == 1
        assert not p.cleared(node)

        # every chip healthy again: each fault is cleared, and nothing new is raised
        healthy = fixture("deviceinfo-healthy.json")
        for node in nodes.values():
            await put_configmap(kube_client, for_node(healthy, node))
        for fx, node in nodes.items():
            (cleared,) = await p.wait(partial(p.cleared, node), what=f"the clear of {fx} on {node}")
            assert cleared.fault == p.faults(node)[0]
            assert cleared.source.name == f"mindx-dl-deviceinfo-{node}"
            assert len(p.faults(node)) == 1


async def test_bad_check_code_is_flagged_on_the_fault_and_counted(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, injector: tuple[Injector, list[str]]
) -> None:
    inj, names = injector
    (node,) = unique_nodes(1)
    names.append(node)
    make_nodes(inj, [node])
    async with running_pipeline(testbed, namespace) as p:
        before = p.detect.rejected, p.rejected_total("bad-check-code")
        await put_configmap(kube_client, for_node(fixture("deviceinfo-bad-checkcode.json"), node))
        (fault,) = await p.wait(lambda: p.faults(node), what="the fault of the torn ConfigMap")
        assert (fault.kind, fault.level, fault.chips, fault.codes) == (
            FaultKind.CHIP,
            FaultLevel.SEPARATE,
            ("Ascend910-2",),
            ("A8028801",),
        )
        assert fault.check_code_ok is False  # default check_code_mismatch=use: the data is used, and flagged
        (rejection,) = await p.wait(lambda: p.rejections(node), what="the bad-check-code rejection logged")
        assert rejection["reason"] == "bad-check-code"
        assert rejection["log_level"] == "warning"
        assert p.detect.rejected >= before[0] + 1
        assert p.rejected_total("bad-check-code") >= before[1] + 1


async def test_malformed_device_configmaps_are_rejected_and_the_watch_keeps_running(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, injector: tuple[Injector, list[str]]
) -> None:
    inj, names = injector
    truncated_node, broken_fault_node, later_node = unique_nodes(3)
    names += [truncated_node, broken_fault_node, later_node]
    make_nodes(inj, names[-3:])
    async with running_pipeline(testbed, namespace) as p:
        before = p.detect.rejected, p.rejected_total("json-truncated")
        # 1. DeviceInfoCfg cut in the middle (a torn write): rejected, no fault
        truncated = for_node(fixture("deviceinfo-chip-restartbusiness.json"), truncated_node)
        text = truncated["data"]["DeviceInfoCfg"]
        truncated["data"]["DeviceInfoCfg"] = text[: len(text) // 2]
        rv = await put_configmap(kube_client, truncated)
        await p.seen("deviceinfo", f"{DEVICE_NS}/mindx-dl-deviceinfo-{truncated_node}", rv)
        (rejection,) = p.rejections(truncated_node)
        assert rejection["reason"] == "json-truncated"
        assert p.faults(truncated_node) == []

        # 2. a -Fault string that is not JSON: rejected, but the -Unhealthy list still reports the chip
        broken = for_node(fixture("deviceinfo-chip-restartbusiness.json"), broken_fault_node)
        cfg = json.loads(broken["data"]["DeviceInfoCfg"])
        cfg["DeviceInfo"]["DeviceList"]["huawei.com/Ascend910-Fault"] = "[{not json"
        broken["data"]["DeviceInfoCfg"] = json.dumps(cfg, separators=(",", ":"))
        await put_configmap(kube_client, broken)
        (fault,) = await p.wait(lambda: p.faults(broken_fault_node), what="the chip from the -Unhealthy list")
        assert (fault.kind, fault.chips) == (FaultKind.CHIP, ("Ascend910-3",))
        reasons = {r["reason"] for r in p.rejections(broken_fault_node)}
        assert "json-invalid" in reasons or "json-truncated" in reasons, reasons

        # 3. the watch is still running: a good ConfigMap written afterwards comes through
        await put_configmap(kube_client, for_node(fixture("deviceinfo-chip-restartbusiness.json"), later_node))
        (fault,) = await p.wait(lambda: p.faults(later_node), what="a fault written after the bad input")
        assert (fault.level, fault.codes) == (FaultLevel.RESTART_BUSINESS, ("80E01801",))
        assert p.detect.rejected >= before[0] + 2
        assert p.rejected_total("json-truncated") >= before[1] + 1
        p.alive()


# ---------------------------------------------------------------------------------------------- NodeD

NODED_CASES = {
    "nodeinfo-unhealthy-cpu.json": (FaultLevel.SEPARATE, ("00000011",), datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)),
    "nodeinfo-preseparate-memory.json": (
        FaultLevel.PRE_SEPARATE,
        ("02000007",),
        datetime(2026, 1, 1, 1, 10, tzinfo=UTC),
    ),
}


async def test_noded_configmaps_yield_node_faults_and_their_deletion_clears_them(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, injector: tuple[Injector, list[str]]
) -> None:
    inj, names = injector
    nodes = dict(zip(NODED_CASES, unique_nodes(len(NODED_CASES)), strict=True))
    names += nodes.values()
    make_nodes(inj, list(nodes.values()))  # a NodeD ConfigMap counts only for a Node that exists
    core = k8s.CoreV1Api(kube_client)
    async with running_pipeline(testbed, namespace) as p:
        for fx, node in nodes.items():
            await put_configmap(kube_client, for_node(fixture(fx), node))
        for fx, node in nodes.items():
            level, codes, signal_time = NODED_CASES[fx]
            (fault,) = await p.wait(partial(p.faults, node), what=f"the NodeD fault of {fx}")
            assert (fault.kind, fault.level, fault.node, fault.chips, fault.codes) == (
                FaultKind.NODE,
                level,
                node,
                (),
                codes,
            )
            assert fault.check_code_ok is True
            assert fault.signal_time == signal_time
            assert (fault.source.namespace, fault.source.name) == (NODED_NS, f"mindx-dl-nodeinfo-{node}")

        # NodeD deletes its ConfigMap when the node is healthy again: that is the recovery signal
        for node in nodes.values():
            await core.delete_namespaced_config_map(f"mindx-dl-nodeinfo-{node}", NODED_NS)
        for fx, node in nodes.items():
            (cleared,) = await p.wait(partial(p.cleared, node), what=f"the clear of {fx} after deletion")
            assert cleared.fault == p.faults(node)[0]


# ---------------------------------------------------------------------------------------------- nodes


def _ready(node: Any) -> str:
    return next((c.status for c in node.status.conditions or [] if c.type == "Ready"), "")


async def _ready_node(api: k8s.ApiClient, inj: Injector, name: str, p: Pipeline) -> None:
    """Create kwok node `name` and wait until the pipeline has seen it Ready and without the node lifecycle
    controller's start-up taints; then forget what the pipeline queued so far (a new node carries the not-ready
    taint until the controller sees it Ready, which is a fault and its clear)."""
    inj.add_nodes([name])

    def settled() -> bool:
        rec = p.state.nodes.get(name)
        if rec is None:
            return False
        ready = rec.condition("Ready")
        return ready is not None and ready.status == "True" and not any(t.key in DOWN_TAINTS for t in rec.taints)

    await p.wait(settled, what=f"node {name} Ready without not-ready taints", timeout_s=60)
    p.items.clear()


async def test_node_not_ready_past_the_grace_is_a_fault_and_ready_again_clears_it(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, injector: tuple[Injector, list[str]]
) -> None:
    inj, names = injector
    (node,) = unique_nodes(1)
    names.append(node)
    async with running_pipeline(testbed, namespace) as p:
        await _ready_node(kube_client, inj, node, p)
        assert p.faults(node) == []
        went_down = datetime.now(UTC).replace(microsecond=0)
        inj.node_not_ready(node, "Unknown")
        # a new node may still be shedding the lifecycle controller's start-up taint: count from here on
        p.items[:] = [i for i in p.items if (i.observed_at if isinstance(i, Fault) else i.cleared_at) >= went_down]
        (fault,) = await p.wait(lambda: p.faults(node), what="the node down", timeout_s=GRACE_S + 15)
        assert (fault.kind, fault.level, fault.node, fault.chips) == (FaultKind.NODE, FaultLevel.SEPARATE, node, ())
        # The node lifecycle controller adds its unreachable taint within about a second; the grace holds for it
        # as for the condition (issue 13 B5), so the fault is the condition's, past the grace.
        assert fault.reason == "NodeUnknown", fault.reason
        assert fault.source.kind == "Node"
        # signal time is the condition's lastTransitionTime, not when we noticed
        assert abs((fault.signal_time - went_down).total_seconds()) <= 2
        assert fault.observed_at - fault.signal_time >= timedelta(seconds=GRACE_S)
        # far sooner than Kubernetes' own 40 s + 300 s, counted from the condition's own transition time
        assert fault.observed_at - fault.signal_time < timedelta(seconds=GRACE_S + 5)
        # stay down past the grace: from then on the condition alone keeps the node down
        await p.wait(
            lambda: (
                datetime.now(UTC) > went_down + timedelta(seconds=GRACE_S + 1.5) and node in p.detect.nodes.down_nodes()
            ),
            what="the grace to run out with the node still down",
        )
        assert p.cleared(node) == []

        inj.node_ready(node)
        # Ready again and no down taint left: every fault raised for this node since it went down is cleared.
        # (On the way back the lifecycle controller swaps and lifts its taints in separate writes, so a stale
        # not-ready taint may show up as a short extra fault and clear: the net must be zero.)
        core = k8s.CoreV1Api(kube_client)

        def healed() -> bool:
            rec = p.state.nodes.get(node)
            return (
                rec is not None
                and (ready := rec.condition("Ready")) is not None
                and ready.status == "True"
                and not any(t.key in DOWN_TAINTS for t in rec.taints)
                and node not in p.detect.nodes.down_nodes()
            )

        await p.wait(healed, what="the node Ready without down taints", timeout_s=60)
        assert p.cleared(node)[0].fault == fault
        assert sorted(id(c.fault) for c in p.cleared(node)) == sorted(id(f) for f in p.faults(node))
        assert _ready(await core.read_node(node)) == "True"


async def test_a_short_not_ready_blip_with_the_controllers_taint_is_no_fault(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, injector: tuple[Injector, list[str]]
) -> None:
    """Issue 13 B5: a 1.7 s NotReady blip restarted a job 0.3 s after it began, because the controller manager's
    not-ready taint (added the moment Ready leaves True) counted as "down" without the grace. With the default
    5 s grace, a blip that carries the real controller's taint and ends well within the grace is no fault."""
    inj, names = injector
    (node,) = unique_nodes(1)
    names.append(node)
    grace_s = 5.0
    async with running_pipeline(testbed, namespace, node_not_ready_grace_s=grace_s) as p:
        await _ready_node(kube_client, inj, node, p)
        began = time.monotonic()
        inj.node_not_ready(node, "False")

        def tainted() -> bool:
            rec = p.state.nodes.get(node)
            return rec is not None and any(t.key in DOWN_TAINTS for t in rec.taints)

        # the real lifecycle controller taints the node at once: the blip is the issue's, taint included
        await p.wait(tainted, what="the controller's not-ready taint on the blipping node", timeout_s=1.5)
        down = p.state.nodes[node].condition("Ready")
        assert down is not None
        assert down.status == "False", down
        down_at = down.last_transition
        await asyncio.sleep(max(0.0, 1.7 - (time.monotonic() - began)))
        inj.node_ready(node)

        def back() -> bool:
            rec = p.state.nodes.get(node)
            return rec is not None and (ready := rec.condition("Ready")) is not None and ready.status == "True"

        await p.wait(back, what="the node Ready again", timeout_s=grace_s)
        # the blip as the agent's grace measures it: from the Ready condition's transition to not-ready to its
        # transition back, both read from the Node object the agent holds (not from when this test saw them)
        went = p.state.nodes[node].condition("Ready")
        assert went is not None
        assert went.last_transition is not None
        assert down_at is not None
        blip_s = (went.last_transition - down_at).total_seconds()
        assert blip_s < grace_s - 0.5, f"the blip itself ({blip_s:.0f} s) outlasted the grace; the test proves nothing"
        # no fault during the blip, nor once the grace would have run out
        await asyncio.sleep(max(0.0, grace_s + 1.5 - (time.monotonic() - began)))
        assert p.faults(node) == [], [f.reason for f in p.faults(node)]
        assert node not in p.detect.nodes.down_nodes()


async def test_node_problem_detector_condition_is_a_fault_until_it_turns_false(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, injector: tuple[Injector, list[str]]
) -> None:
    inj, names = injector
    (node,) = unique_nodes(1)
    names.append(node)
    core = k8s.CoreV1Api(kube_client)

    async def set_condition(status: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        cond = {
            "type": "NPUProblem",
            "status": status,
            "reason": "NPUHbmUce" if status == "True" else "NPUIsOK",
            "message": "written as node-problem-detector would",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        await core.patch_node_status(node, {"status": {"conditions": [cond]}})

    async with running_pipeline(testbed, namespace) as p:
        await _ready_node(kube_client, inj, node, p)
        # kwok's heartbeat rewrites conditions; switch it off (the node stays Ready) so only NPD writes this one
        await core.patch_node(node, {"metadata": {"labels": {"testbed.fault-agent.io/heartbeat": "off"}}})
        await set_condition("True")
        (fault,) = await p.wait(lambda: p.faults(node), what="the NPUProblem fault")
        assert (fault.kind, fault.level, fault.node, fault.reason) == (
            FaultKind.NODE,
            FaultLevel.SEPARATE,
            node,
            "NPUProblem",
        )
        await set_condition("False")
        (cleared,) = await p.wait(lambda: p.cleared(node), what="the clear once NPUProblem is False")
        assert cleared.fault == fault
        assert _ready(await core.read_node(node)) == "True"  # the node itself was never down
        assert len(p.faults(node)) == 1


# ---------------------------------------------------------------------------------------------- pods


async def test_failing_pods_business_failures_oom_and_eviction(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, injector: tuple[Injector, list[str]]
) -> None:
    inj, names = injector
    (node,) = unique_nodes(1)
    names.append(node)
    core = k8s.CoreV1Api(kube_client)
    async with running_pipeline(testbed, namespace) as p:
        await _ready_node(kube_client, inj, node, p)
        pods = ["exit-1", "oom", "evicted"]
        for name in pods:
            pod = k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(name=name, annotations={"huawei.com/Ascend910": "Ascend910-0,Ascend910-1"}),
                spec=k8s.V1PodSpec(
                    node_name=node,
                    restart_policy="Never",
                    termination_grace_period_seconds=0,
                    containers=[k8s.V1Container(name="train", image="ms-arm:b120")],
                ),
            )
            await core.create_namespaced_pod(namespace, pod)
        await p.wait(
            lambda: all((r := p.state.pods.get(f"{namespace}/{n}")) and r.phase == "Running" for n in pods),
            what="kwok to run the pods",
        )
        assert [i for i in p.items if isinstance(i, Fault) and i.pod and i.pod.namespace == namespace] == []

        inj.pod_failed(namespace, "exit-1", exit_code=1, reason="Error")
        inj.pod_failed(namespace, "oom", exit_code=137, reason="OOMKilled")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await core.patch_namespaced_pod_status(
            "evicted",
            namespace,
            {
                "status": {
                    "phase": "Failed",
                    "reason": "Evicted",
                    "message": "The node was low on resource: memory.",
                    "conditions": [
                        {
                            "type": "DisruptionTarget",
                            "status": "True",
                            "reason": "TerminationByKubelet",
                            "lastTransitionTime": now,
                        }
                    ],
                }
            },
        )

        def of(pod: str) -> list[Fault]:
            return [f for f in p.faults(node) if f.pod is not None and f.pod.name == pod]

        (failed,) = await p.wait(lambda: of("exit-1"), what="the exit-code failure")
        (oom,) = await p.wait(lambda: of("oom"), what="the OOMKilled failure")
        (evicted,) = await p.wait(lambda: of("evicted"), what="the eviction")
        assert (failed.kind, failed.level, failed.codes, failed.reason) == (
            FaultKind.BUSINESS,
            FaultLevel.RESTART_BUSINESS,
            ("1",),
            "Error",
        )
        assert failed.chips == ("Ascend910-0", "Ascend910-1")
        assert (oom.kind, oom.codes, oom.reason) == (FaultKind.BUSINESS, ("137",), "OOMKilled")
        # an eviction is a disruption, kept apart from business failures (it must not eat the retry budget)
        assert evicted.kind is FaultKind.DISRUPTION
        assert evicted.reason == "TerminationByKubelet"
        assert evicted.source.kind == "Pod"
        assert abs((failed.signal_time - failed.observed_at).total_seconds()) < 5  # container finishedAt

        def cleared_pod(name: str) -> list[FaultCleared]:
            return [c for c in p.cleared(node) if c.fault.pod is not None and c.fault.pod.name == name]

        for name in pods:
            await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        for name in pods:
            await p.wait(
                partial(cleared_pod, name),
                what=f"the clear of pod {name} once deleted",
            )


# ---------------------------------------------------------------------------------------------- fault levels


def without_levels(doc: dict[str, Any]) -> dict[str, Any]:
    """A device-plugin ConfigMap whose -Fault elements carry no level (an older plugin's shape), CheckCode made
    again over the changed DeviceInfo."""
    cfg = json.loads(doc["data"]["DeviceInfoCfg"])
    dl = cfg["DeviceInfo"]["DeviceList"]
    for key in [k for k in dl if k.endswith("-Fault")]:
        els = json.loads(dl[key])
        for el in els:
            for fld in ("large_model_fault_level", "fault_level", "fault_handling"):
                el.pop(fld, None)
            tl = el.get("fault_time_and_level_map") or {}
            el["fault_time_and_level_map"] = {c: {"fault_time": v["fault_time"]} for c, v in tl.items()}
        dl[key] = json.dumps(els, separators=(",", ":"))
    info = cfg["DeviceInfo"]
    cfg["CheckCode"] = check_code({"DeviceList": go_map(info["DeviceList"]), "UpdateTime": info["UpdateTime"]})
    doc["data"]["DeviceInfoCfg"] = json.dumps(cfg, separators=(",", ":"))
    return doc


def fault_config(namespace: str, **moves: str) -> dict[str, Any]:
    """The fixture mindx-dl-fault-config in `namespace`, with each code of `moves` moved to the named list."""
    doc = fixture("fault-config-cm.json")
    doc["metadata"]["namespace"] = namespace
    lists: dict[str, list[str]] = json.loads(doc["data"]["faultCode.json"])
    for code, target in moves.items():
        for codes in lists.values():
            if code in codes:
                codes.remove(code)
        lists[target].append(code)
    doc["data"]["faultCode.json"] = json.dumps(lists, separators=(",", ":"))
    return doc


async def test_fault_level_override_is_hot_reloaded(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, injector: tuple[Injector, list[str]]
) -> None:
    inj, names = injector
    (node,) = unique_nodes(1)
    names.append(node)
    make_nodes(inj, [node])
    async with running_pipeline(testbed, namespace) as p:
        # an older plugin's element without a level: the table decides it (a level the plugin wrote is final)
        await put_configmap(
            kube_client, for_node(without_levels(fixture("deviceinfo-chip-restartbusiness.json")), node)
        )
        (first,) = await p.wait(lambda: p.faults(node), what="the RestartBusiness fault")
        assert first.level is FaultLevel.RESTART_BUSINESS

        # the operator lists 80E01801 as SeparateNPU: the same chip's fault is re-classified, no restart needed
        await put_configmap(kube_client, fault_config(namespace, **{"80E01801": "SeparateNPUCodes"}))
        (cleared,) = await p.wait(lambda: p.cleared(node), what="the old level cleared", timeout_s=10)
        assert cleared.fault.level is FaultLevel.RESTART_BUSINESS
        second = await p.wait(lambda: p.faults(node)[1:], what="the fault at the override's level", timeout_s=10)
        assert [(f.level, f.chips, f.codes) for f in second] == [(FaultLevel.SEPARATE, ("Ascend910-3",), ("80E01801",))]

        # and back: the override is edited again
        await put_configmap(kube_client, fault_config(namespace, **{"80E01801": "RestartBusinessCodes"}))
        third = await p.wait(lambda: p.faults(node)[2:], what="the fault back at RestartBusiness", timeout_s=10)
        assert [f.level for f in third] == [FaultLevel.RESTART_BUSINESS]


# ---------------------------------------------------------------------------------------------- progress Leases


def _lease(namespace: str, job: str | None, annotations: dict[str, str], *, name: str) -> dict[str, Any]:
    labels = {PROGRESS_LABEL: "lease", **({LEASE_JOB_LABEL: job} if job else {})}
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {"holderIdentity": f"{job}-0", "leaseDurationSeconds": 3},
    }


async def test_heartbeat_leases_are_read_and_bad_ones_rejected_once(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str
) -> None:
    """The label-selected Lease watch against the real apiserver: a good heartbeat is in the state, bad ones are
    rejected once each under source Lease (never a fault), and a Lease without the label is never listed."""
    coord = k8s.CoordinationV1Api(kube_client)
    async with running_pipeline(testbed, namespace) as p:
        good = await coord.create_namespaced_lease(
            namespace, _lease(namespace, "train", {STEP_ANNOTATION: "7"}, name=lease_name("train"))
        )
        await p.seen("leases", f"{namespace}/{lease_name('train')}", good.metadata.resource_version)
        bad_step = _lease(namespace, "bad", {STEP_ANNOTATION: "seven"}, name=lease_name("bad"))
        created = await coord.create_namespaced_lease(namespace, bad_step)
        await p.seen("leases", f"{namespace}/{lease_name('bad')}", created.metadata.resource_version)
        # the same problem again: not reported again
        patch = {"metadata": {"annotations": {STEP_ANNOTATION: "eight"}}}
        again = await coord.patch_namespaced_lease(lease_name("bad"), namespace, patch)
        await p.seen("leases", f"{namespace}/{lease_name('bad')}", again.metadata.resource_version)
        orphan = await coord.create_namespaced_lease(
            namespace, _lease(namespace, None, {STEP_ANNOTATION: "1"}, name="x")
        )
        await p.seen("leases", f"{namespace}/x", orphan.metadata.resource_version)
        unlabelled = _lease(namespace, "train", {STEP_ANNOTATION: "1"}, name="not-a-heartbeat")
        unlabelled["metadata"]["labels"] = {}
        await coord.create_namespaced_lease(namespace, unlabelled)
        await asyncio.sleep(1.0)
        assert f"{namespace}/not-a-heartbeat" not in p.state.leases
        assert [r["reason"] for r in p.rejections(lease_name("bad"))] == ["bad-step"]
        assert [r["reason"] for r in p.rejections(f"{namespace}/x")] == ["no-job-label"]
        assert (
            p.registry.get_sample_value("fault_agent_input_rejected_total", {"source": "Lease", "reason": "bad-step"})
            == 1.0
        )
        assert [i for i in p.items if isinstance(i, Fault) and i.source.kind == "Lease"] == []
        p.alive()
