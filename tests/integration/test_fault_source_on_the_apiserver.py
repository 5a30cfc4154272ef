"""The fault source at start, from a real apiserver (issue 36, item 7): ClusterD's ``cluster-info-*`` ConfigMaps
(label ``mx-consumer-volcano=true``) in ``kube.node_info_namespace`` decide ``auto``; a later look reports ones
that appeared while the per-node ConfigMaps are read (agent.sources.fault_source)."""

from __future__ import annotations

import structlog
from kubernetes_asyncio import client as k8s

from agent.core.fault_source import FaultSource, choose_fault_source
from agent.settings import KubeSettings
from agent.sources.fault_source import SourceCheck, list_clusterd_configmaps, resolve_fault_source


def _cm(name: str, labelled: bool = True) -> dict[str, object]:
    labels = {"mx-consumer-volcano": "true"} if labelled else {}
    return {"metadata": {"name": name, "labels": labels}, "data": {name: ""}}


class Gauges:
    def __init__(self) -> None:
        self.source = ""
        self.unread = False

    def fault_source(self, source: str) -> None:
        self.source = source

    def clusterd_unread(self, unread: bool) -> None:
        self.unread = unread


async def test_auto_reads_clusterd_only_where_its_configmaps_exist(kube_client: k8s.ApiClient, namespace: str) -> None:
    core = k8s.CoreV1Api(kube_client)
    kube = KubeSettings(node_info_namespace=namespace)
    await core.create_namespaced_config_map(namespace, _cm("cluster-info-device-0", labelled=False))  # not ClusterD's
    await core.create_namespaced_config_map(namespace, _cm("other", labelled=True))  # labelled, another name
    empty = await resolve_fault_source(kube_client, kube)
    assert (empty.source, empty.clusterd_configmaps, empty.warning) == (FaultSource.PER_NODE, (), "")

    gauges = Gauges()
    check = SourceCheck(empty, gauges, namespace)
    check.report()
    await core.create_namespaced_config_map(namespace, _cm("cluster-info-node-cm"))
    await core.create_namespaced_config_map(namespace, _cm("cluster-info-device-0-x"))
    with structlog.testing.capture_logs() as logs:
        check.seen(await list_clusterd_configmaps(kube_client, namespace, 10.0))  # what the minute's look does
    assert (gauges.source, gauges.unread) == ("per-node", True)
    assert [e["log_level"] for e in logs] == ["warning"]
    assert "cluster-info-device-0-x, cluster-info-node-cm" in logs[0]["event"]

    found = await resolve_fault_source(kube_client, kube)  # the next start
    assert found.source is FaultSource.CLUSTERD
    assert found.clusterd_configmaps == ("cluster-info-device-0-x", "cluster-info-node-cm")
    pinned = await resolve_fault_source(kube_client, kube.model_copy(update={"fault_source": "per-node"}))
    assert pinned.source is FaultSource.PER_NODE
    assert pinned.clusterd_unread
    assert "are not read" in pinned.warning


async def test_an_unanswered_list_falls_back_to_per_node_and_says_so() -> None:
    """An apiserver that does not answer (a closed port) stands for any failed list: auto reads the per-node
    ConfigMaps and warns; no exception stops the start."""
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    config = k8s.Configuration(host="https://127.0.0.1:1")
    async with k8s.ApiClient(config) as api:
        choice = await resolve_fault_source(api, KubeSettings(request_timeout_s=2), sleep=sleep)
    assert choice.source is FaultSource.PER_NODE
    assert choice.clusterd_configmaps is None
    assert "could not be listed" in choice.warning
    assert slept == [1.0, 2.0]
    assert choice == choose_fault_source("auto", None, "mindx-dl")
