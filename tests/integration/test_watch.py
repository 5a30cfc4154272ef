"""The watch engine and cluster state against the testbed's real kube-apiserver (no mocks)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from support.polling import eventually

from agent.core.cluster import JobKind, PodRecord
from agent.kube.client import ApiTransport
from agent.kube.watch import Change, CountingObserver, Resource, Watcher
from agent.settings import KubeSettings
from agent.sources.jobs import JobConverter
from agent.sources.pods import PodConverter, PodLines
from agent.sources.state import ClusterState
from agent.sources.watchers import build_watchers

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def running(watchers: list[Watcher[Any]]) -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(w.run(stop), name=w.resource.watcher_id) for w in watchers]
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)


def pod_body(name: str, **annotations: str) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"volcano.sh/job-name": "train"},
            "annotations": {"huawei.com/Ascend910": "Ascend910-0,Ascend910-1", **annotations},
        },
        "spec": {"nodeName": "no-such-node", "containers": [{"name": "c", "image": "busybox"}]},
    }


def cm_body(name: str, data: dict[str, str]) -> Any:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


class Recorder:
    def __init__(self) -> None:
        self.state = ClusterState()
        self.changes: list[Change[Any]] = []

    def __call__(self, change: Change[Any]) -> None:
        self.state.apply(change)
        self.changes.append(change)

    def of(self, key: str) -> list[tuple[str, str]]:
        out = []
        for c in self.changes:
            if c.key == key:
                rec = c.new or c.old
                out.append((c.type.value, rec.resource_version if rec else ""))
        return out


def pod_watcher(api: Any, namespace: str, rec: Recorder, obs: CountingObserver, **kw: Any) -> Watcher[PodRecord]:
    return Watcher(
        ApiTransport(api),
        Resource("pods", "Pod", "", "v1", "pods", namespace),
        PodConverter(),
        rec.state.store("pods"),
        rec,
        observer=obs,
        **kw,
    )


async def test_all_sources_crud(kube_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    settings = KubeSettings.model_validate(
        {
            "namespaces": [namespace],
            "device_info_namespace": namespace,
            "node_info_namespace": namespace,
            "fault_config_namespace": namespace,
        }
    )
    state = ClusterState()
    obs = CountingObserver()
    node_name = f"t-node-{uuid.uuid4().hex[:8]}"
    watchers = build_watchers(settings, ApiTransport(kube_client), state, observer=obs)
    async with running(watchers):
        await eventually(lambda: state.ready, what="every source listed")
        await core.create_namespaced_pod(namespace, pod_body("p1", **{"hccl/rankIndex": "3"}))
        for name in ("mindx-dl-deviceinfo-w1", "mindx-dl-nodeinfo-w1", "mindx-dl-fault-config", "cluster-info-node-cm"):
            await core.create_namespaced_config_map(namespace, cm_body(name, {"k": "v1"}))
        await core.patch_namespaced_config_map(
            "cluster-info-node-cm", namespace, {"metadata": {"labels": {"mx-consumer-volcano": "true"}}}
        )
        await core.create_namespaced_config_map(namespace, cm_body("unrelated", {"k": "v"}))
        node: Any = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}}
        await core.create_node(node)
        vc = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "vj", "labels": {"fault-scheduling": "grace", "fault-retry-times": "2"}},
            "spec": {"minAvailable": 1, "maxRetry": 5, "tasks": []},
        }
        await custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", vc)
        ac = {
            "apiVersion": "mindxdl.gitee.com/v1",
            "kind": "AscendJob",
            "metadata": {"name": "aj", "labels": {"fault-scheduling": "force", "version": "0"}},
            "spec": {"runPolicy": {"backoffLimit": 4}, "replicaSpecs": {}},
        }
        await custom.create_namespaced_custom_object("mindxdl.gitee.com", "v1", namespace, "ascendjobs", ac)

        def all_there() -> bool:
            return (
                f"{namespace}/p1" in state.pods
                and "w1" in state.device_info_by_node
                and f"{namespace}/mindx-dl-nodeinfo-w1" in state.node_info
                and f"{namespace}/mindx-dl-fault-config" in state.fault_config
                and node_name in state.nodes
                and state.job(JobKind.VOLCANO, namespace, "vj") is not None
                and state.job(JobKind.ASCEND, namespace, "aj") is not None
            )

        await eventually(all_there, what="every created object in the state")
        p = state.pods[f"{namespace}/p1"]
        assert (p.rank, p.chips, p.node) == (3, ("Ascend910-0", "Ascend910-1"), "no-such-node")
        assert [x.name for x in state.pods_on_node("no-such-node")] == ["p1"]
        assert [x.name for x in state.pods_of_job(JobKind.VOLCANO, namespace, "train")] == ["p1"]
        assert f"{namespace}/unrelated" not in state.device_info
        assert state.cluster_info == {}  # one fault source: the per-node ConfigMaps (kube.fault_source)
        vj = state.job(JobKind.VOLCANO, namespace, "vj")
        aj = state.job(JobKind.ASCEND, namespace, "aj")
        assert vj is not None
        assert aj is not None
        assert (vj.max_retry, vj.fault_retry_times, vj.fault_scheduling.value) == (5, 2, "grace")
        # an AscendJob's generation is its pods' version label (the Ascend Operator never labels the job): none yet,
        # whatever the job itself carries
        assert (aj.max_retry, aj.version, aj.fault_scheduling.value) == (4, "", "force")

        # modify
        await core.patch_namespaced_config_map("mindx-dl-deviceinfo-w1", namespace, {"data": {"k": "v2"}})
        await core.patch_namespaced_pod("p1", namespace, {"metadata": {"annotations": {"hccl/rankIndex": "4"}}})
        await eventually(
            lambda: state.device_info_by_node["w1"].data == {"k": "v2"} and state.pods[f"{namespace}/p1"].rank == 4,
            what="modifications in the state",
        )
        # delete (NodeD deletion is the recovery signal)
        await core.delete_namespaced_config_map("mindx-dl-nodeinfo-w1", namespace)
        await core.delete_namespaced_pod("p1", namespace, grace_period_seconds=0)
        await core.delete_node(node_name)
        await custom.delete_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", "vj")
        await eventually(
            lambda: (
                f"{namespace}/mindx-dl-nodeinfo-w1" not in state.node_info
                and f"{namespace}/p1" not in state.pods
                and node_name not in state.nodes
                and state.job(JobKind.VOLCANO, namespace, "vj") is None
            ),
            what="deletions in the state",
        )
        assert state.check_indexes() == []
        assert "no-such-node" not in state.pods_by_node


async def test_list_items_and_typed_watch_lines_skip_each_others_unchanged_writes(
    kube_client: client.ApiClient, namespace: str
) -> None:
    """The list reads a pod whole, the watch reads its lines typed (issue 39): on the apiserver's own JSON the two
    same-write hashes agree, so a write of a part no record holds (finalizers) is skipped after the list and after
    a watch line alike, and a write of a part it holds (an annotation) is converted, the typed way."""
    core = client.CoreV1Api(kube_client)
    await core.create_namespaced_pod(namespace, pod_body("p", **{"hccl/rankIndex": "1"}))
    rec, obs = Recorder(), CountingObserver()
    convert = PodConverter()
    whole: list[str] = []
    typed_converted: list[str] = []

    def count_whole(obj: dict[str, Any]) -> Any:
        whole.append(obj["metadata"]["resourceVersion"])
        return convert(obj)

    class CountingLines(PodLines):
        def convert(self, line: Any) -> Any:
            typed_converted.append(line.resource_version)
            return super().convert(line)

    w = pod_watcher(kube_client, namespace, rec, obs, unchanged=convert.unchanged, typed=CountingLines(convert))
    w.convert = count_whole
    key = f"{namespace}/p"
    hold = {"metadata": {"finalizers": ["fault-agent.test/hold"]}}
    async with running([w]):
        await eventually(lambda: key in rec.state.pods, what="the first list")
        listed = rec.state.pods[key].resource_version
        await core.patch_namespaced_pod("p", namespace, hold)
        await eventually(lambda: obs.events.get(("pods", "MODIFIED"), 0) >= 1, what="the finalizer's write")
        assert rec.state.pods[key].resource_version == listed  # skipped: the list's record kept
        await core.patch_namespaced_pod("p", namespace, {"metadata": {"annotations": {"hccl/rankIndex": "2"}}})
        await eventually(lambda: rec.state.pods[key].rank == 2, what="the annotation's write")
        await core.patch_namespaced_pod("p", namespace, {"metadata": {"finalizers": None}})
        await eventually(lambda: obs.events.get(("pods", "MODIFIED"), 0) >= 3, what="the finalizer's removal")
        await asyncio.sleep(0.5)
    assert whole == [listed]  # the list item; no watch line was parsed whole
    assert len(typed_converted) == 1  # the annotation's write only
    assert [t for t, _ in rec.of(key)] == ["ADDED", "MODIFIED"]
    assert rec.state.check_indexes() == []


async def test_apiserver_killed_mid_watch_converges(
    testbed: Any, kube_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    for n in ("a", "b", "c"):
        await core.create_namespaced_pod(namespace, pod_body(n))
    rec, obs = Recorder(), CountingObserver()
    w = pod_watcher(kube_client, namespace, rec, obs, backoff_initial_s=4.0, backoff_max_s=8.0)
    async with running([w]):
        await eventually(lambda: len(rec.state.pods) == 3 and w.listed_once, what="first list")
        await asyncio.to_thread(testbed.kill, "kube-apiserver")
        await asyncio.sleep(0.5)
        await asyncio.to_thread(testbed.start, "kube-apiserver")
        # the watcher is backing off: these happen while it is away
        await core.delete_namespaced_pod("a", namespace, grace_period_seconds=0)
        await core.create_namespaced_pod(namespace, pod_body("d"))
        await eventually(
            lambda: sorted(k.split("/")[1] for k in rec.state.pods) == ["b", "c", "d"], what="convergence", timeout_s=60
        )
        await asyncio.sleep(1.0)  # any late duplicate would show up now
    assert obs.restarts.get(("pods", "error"), 0) >= 1
    # "a" may get a real MODIFIED (deletionTimestamp set) before its DELETED; never a repeated version
    seen_a = rec.of(f"{namespace}/a")
    assert (seen_a[0][0], seen_a[-1][0]) == ("ADDED", "DELETED")
    assert [t for t, _ in seen_a].count("ADDED") == 1
    versions = [int(rv) for t, rv in seen_a if t != "DELETED"]
    assert versions == sorted(set(versions))
    assert [t for t, _ in rec.of(f"{namespace}/b")] == ["ADDED"]  # no phantom change
    assert [t for t, _ in rec.of(f"{namespace}/d")] == ["ADDED"]
    assert rec.state.check_indexes() == []


async def test_gone_relist_emits_exactly_what_changed(
    testbed: Any, kube_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    for n in ("a", "b", "c"):
        await core.create_namespaced_pod(namespace, pod_body(n))
    rec, obs = Recorder(), CountingObserver()
    w = pod_watcher(kube_client, namespace, rec, obs)
    async with running([w]):
        await eventually(lambda: len(rec.state.pods) == 3, what="first list")
    before = len(rec.changes)
    # while nobody watches: a deleted, b modified, d added, c untouched; then etcd compacted and the
    # apiserver restarted, so its watch cache cannot serve our old resourceVersion either
    await core.delete_namespaced_pod("a", namespace, grace_period_seconds=0)
    await core.patch_namespaced_pod("b", namespace, {"metadata": {"labels": {"x": "y"}}})
    await core.create_namespaced_pod(namespace, pod_body("d"))
    for _ in range(200):  # wait until "a" is really gone, so the relist sees one clean deletion
        listed = await core.list_namespaced_pod(namespace)
        if "a" not in [p.metadata.name for p in listed.items]:
            break
        await asyncio.sleep(0.1)
    await asyncio.to_thread(testbed.compact_etcd)
    await asyncio.to_thread(testbed.kill, "kube-apiserver")
    await asyncio.to_thread(testbed.start, "kube-apiserver")
    async with running([w]):
        await eventually(
            lambda: sorted(k.split("/")[1] for k in rec.state.pods) == ["b", "c", "d"], what="relist", timeout_s=60
        )
        await asyncio.sleep(1.0)
    after = [(c.type.value, c.key.split("/")[-1]) for c in rec.changes[before:] if c.type.value != "LISTED"]
    assert sorted(after) == [("ADDED", "d"), ("DELETED", "a"), ("MODIFIED", "b")]
    assert obs.relists["pods"] == 2
    assert obs.restarts.get(("pods", "gone"), 0) == 1


async def test_silent_apiserver_stream_is_replaced(testbed: Any, kube_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_client)
    rec, obs = Recorder(), CountingObserver()
    w = pod_watcher(kube_client, namespace, rec, obs, inactivity_s=2.0, backoff_initial_s=0.2, backoff_max_s=1.0)
    async with running([w]):
        await eventually(lambda: w.listed_once, what="first list")
        await asyncio.to_thread(testbed.pause, "kube-apiserver")
        try:
            await eventually(
                lambda: obs.restarts.get(("pods", "inactivity"), 0) >= 1, what="inactivity restart", timeout_s=15
            )
        finally:
            await asyncio.to_thread(testbed.resume, "kube-apiserver")
        await core.create_namespaced_pod(namespace, pod_body("after"))
        await eventually(
            lambda: f"{namespace}/after" in rec.state.pods, what="events after the silent stream", timeout_s=60
        )


async def test_malformed_objects_are_skipped_and_the_watch_keeps_running(
    kube_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    await core.create_namespaced_pod(namespace, pod_body("bad-listed", **{"hccl/rankIndex": "zero"}))
    rec, obs = Recorder(), CountingObserver()
    w = pod_watcher(kube_client, namespace, rec, obs)
    vc_rec = Recorder()
    vcw = _vcjob_watcher(kube_client, namespace, vc_rec, obs)
    async with running([w, vcw]):
        await eventually(lambda: w.listed_once and vcw.listed_once, what="first list")
        await core.create_namespaced_pod(namespace, pod_body("bad-watched", **{"hccl/rankIndex": "1.5"}))
        bad_job = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "bad"},
            "spec": {"minAvailable": 1, "maxRetry": -1, "tasks": []},
        }
        await custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", bad_job)
        await core.create_namespaced_pod(namespace, pod_body("good"))
        await eventually(lambda: f"{namespace}/good" in rec.state.pods, what="the good pod after the bad ones")
        await eventually(lambda: obs.rejected.get(("Job", "bad-max-retry"), 0) >= 1, what="the job rejection")
    assert obs.rejected.get(("Pod", "bad-rank"), 0) >= 2
    assert sorted(rec.state.pods) == [f"{namespace}/good"]
    assert vc_rec.state.vcjobs == {}


async def test_volcano_job_policies_are_read_as_the_apiserver_stores_them(
    kube_client: client.ApiClient, namespace: str
) -> None:
    """Which Volcano Jobs a pod deletion restarts whole (policy.volcano_restart: auto), read from jobs the
    testbed's Volcano CRD stored: the job-level ``event`` and ``events`` forms, and a task's own policy first."""
    custom = client.CustomObjectsApi(kube_client)

    def job(name: str, policies: list[dict[str, Any]], task_policies: list[dict[str, Any]] | None = None) -> Any:
        task: dict[str, Any] = {
            "name": "worker",
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        }
        if task_policies is not None:
            task["policies"] = task_policies
        return {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {"minAvailable": 1, "schedulerName": "volcano", "policies": policies, "tasks": [task]},
        }

    wanted = {
        "event-form": (job("event-form", [{"event": "PodEvicted", "action": "RestartJob"}]), True),
        "events-form": (job("events-form", [{"events": ["PodFailed", "PodEvicted"], "action": "RestartJob"}]), True),
        "any-event": (job("any-event", [{"event": "*", "action": "RestartJob"}]), True),
        "task-first": (
            job(
                "task-first",
                [{"event": "PodEvicted", "action": "RestartJob"}],
                [{"event": "PodEvicted", "action": "RestartTask"}],
            ),
            False,
        ),
        "failed-only": (job("failed-only", [{"event": "PodFailed", "action": "RestartJob"}]), False),
    }
    rec = Recorder()
    vcw = _vcjob_watcher(kube_client, namespace, rec)
    async with running([vcw]):
        await eventually(lambda: vcw.listed_once, what="first list")
        for body, _ in wanted.values():
            await custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", body)
        await eventually(lambda: len(rec.state.vcjobs) == len(wanted), what="every job in the cache")
    got = {name: rec.state.vcjobs[f"{namespace}/{name}"].restarts_on_eviction for name in wanted}
    assert got == {name: want for name, (_, want) in wanted.items()}


def _vcjob_watcher(
    kube_client: client.ApiClient, namespace: str, rec: Recorder, observer: CountingObserver | None = None
) -> Watcher[Any]:
    """A Volcano Job watcher in `namespace` feeding `rec`'s state, as the agent builds it."""
    return Watcher(
        ApiTransport(kube_client),
        Resource("vcjobs", "Job", "batch.volcano.sh", "v1alpha1", "jobs", namespace),
        JobConverter(JobKind.VOLCANO),
        rec.state.store("vcjobs"),
        rec,
        observer=observer,
    )
