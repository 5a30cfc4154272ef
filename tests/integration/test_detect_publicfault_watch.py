"""Public-fault ConfigMaps on the testbed: the real label-selected watch and the detect pipeline.

A monitor writes a ConfigMap labelled ``mc-consumer-publicfault=true`` with key ``PublicFault`` (MindCluster
ClusterD public-fault interface); its faults come off the pipeline's queue, only a ``recover`` clears them
(deleting the ConfigMap does not, as in ClusterD), and a malformed document is rejected and counted while the watch
keeps running. Node names are unique per test.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from test_detect_pipeline import put_configmap, running_pipeline  # same directory: pytest puts it on sys.path

from agent.core.faults import Fault, FaultKind, FaultLevel
from testbed.cluster import Testbed

pytestmark = pytest.mark.integration


def public_fault(namespace: str, name: str, faults: list[dict[str, Any]] | str) -> dict[str, Any]:
    """A public-fault ConfigMap; `faults` as a list, or the whole ``PublicFault`` text when a string."""
    now_ms = int(time.time() * 1000)
    doc = {"id": f"it-{uuid.uuid4().hex}", "timestamp": now_ms, "version": "1.0", "resource": "pingmesh"}
    text = faults if isinstance(faults, str) else json.dumps({**doc, "faults": faults})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"mc-consumer-publicfault": "true"}},
        "data": {"PublicFault": text},
    }


def fault(fault_id: str, node: str, assertion: str = "occur", **kw: Any) -> dict[str, Any]:
    f = {
        "faultId": fault_id,
        "faultType": "NPU",
        "faultCode": "PM0000001",
        "faultTime": int(time.time() * 1000),
        "assertion": assertion,
        "influence": [{"nodeName": node, "deviceIds": [2, 5]}],
    }
    f.update(kw)
    return f


async def test_public_fault_occur_recover_and_malformed(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    npu_node, net_node, later_node = f"pf-{tag}-0", f"pf-{tag}-1", f"pf-{tag}-2"
    name = f"pingmesh-{tag}"
    async with running_pipeline(testbed, namespace) as p:
        started = datetime.now(UTC)
        faults = [fault(f"npu-{tag}-01", npu_node), fault(f"net-{tag}-01", net_node, faultType="Network")]
        await put_configmap(kube_client, public_fault(namespace, name, faults))

        (npu,) = await p.wait(lambda: p.faults(npu_node), what="the NPU public fault")
        (net,) = await p.wait(lambda: p.faults(net_node), what="the network public fault")
        assert isinstance(npu, Fault)
        assert (npu.kind, npu.chips, npu.codes, npu.level) == (
            FaultKind.CHIP,
            ("Ascend910-2", "Ascend910-5"),
            ("PM0000001",),
            FaultLevel.SUB_HEALTH,
        )
        assert npu.reason == "PublicFault:pingmesh:unknown-code"  # not in ClusterD's table: reported, marked
        assert npu.source.name == name
        assert npu.observed_at >= started
        assert net.kind is FaultKind.NETWORK

        # recover the NPU fault; the network one stays
        faults[0] = fault(f"npu-{tag}-01", npu_node, "recover")
        await put_configmap(kube_client, public_fault(namespace, name, faults))
        (cleared,) = await p.wait(lambda: p.cleared(npu_node), what="the NPU public fault cleared")
        assert cleared.fault == npu
        assert p.cleared(net_node) == []

        # a malformed rewrite: rejected and counted, the previous faults kept, the watch still running
        before = p.rejected_total("json-invalid")
        rv = await put_configmap(kube_client, public_fault(namespace, name, "{not json"))
        await p.seen("publicfault", f"{namespace}/{name}", rv)
        await p.wait(lambda: p.rejected_total("json-invalid") > before, what="the rejection counted")
        assert p.rejections(name)
        assert p.cleared(net_node) == []
        other = f"pingmesh-{tag}-b"
        await put_configmap(kube_client, public_fault(namespace, other, [fault(f"npu-{tag}-02", later_node)]))
        await p.wait(lambda: p.faults(later_node), what="a later public fault after the malformed one")

        # deleting the ConfigMap keeps its faults (ClusterD ignores the deletion); a recover written by another
        # ConfigMap of the same resource clears it (the watch delivers the deletion first)
        await k8s.CoreV1Api(kube_client).delete_namespaced_config_map(name, namespace)
        third = f"pingmesh-{tag}-c"
        recover = fault(f"net-{tag}-01", net_node, "recover", faultType="Network")
        await put_configmap(kube_client, public_fault(namespace, third, [recover]))
        (gone,) = await p.wait(lambda: p.cleared(net_node), what="the network fault cleared by the recover")
        assert gone.fault == net
        assert gone.source.name == third
