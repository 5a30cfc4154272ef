"""Node quarantine on the testbed: a NodeD SeparateFault taints the node ``fault-agent.io/fault=SeparateNPU``; the
taint goes when NodeD deletes its ConfigMap, also when that happened while no agent was running; other taints
are never touched."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from actions_support import delete_device_info, delete_node, eventually, make_node, put_device_info
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from test_recovery import _settings, running_agent

from agent.core.detect import check_code

pytestmark = pytest.mark.integration
KEY = "fault-agent.io/fault"
OTHER = ("example.com/maintenance", "planned", "NoSchedule")


async def _put_node_info(api: k8s.ApiClient, node: str) -> None:
    inner = {
        "FaultDevList": [
            {"DeviceType": "CPU", "DeviceId": 1, "FaultCode": ["00000011"], "FaultLevel": "SeparateFault"}
        ],
        "NodeStatus": "UnHealthy",
    }
    value = json.dumps({"NodeInfo": inner, "CheckCode": check_code(inner)}, separators=(",", ":"))
    cm = k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name=f"mindx-dl-nodeinfo-{node}", labels={"mx-consumer-cim": "true"}),
        data={"NodeInfo": value, "updateTime": datetime.now(UTC).isoformat(timespec="seconds")},
    )
    await k8s.CoreV1Api(api).create_namespaced_config_map("mindx-dl", cm)


async def _delete_node_info(api: k8s.ApiClient, node: str) -> None:
    try:
        await k8s.CoreV1Api(api).delete_namespaced_config_map(f"mindx-dl-nodeinfo-{node}", "mindx-dl")
    except ApiException as e:
        if e.status != 404:
            raise


async def _taints(api: k8s.ApiClient, node: str) -> list[tuple[str, str, str]]:
    """The agent's own taints on `node` (the lifecycle controller's node.kubernetes.io/* taints come and go with
    kwok's readiness and are not the agent's business)."""
    n = await k8s.CoreV1Api(api).read_node(node)
    return sorted(
        (t.key, t.value or "", t.effect) for t in n.spec.taints or [] if not t.key.startswith("node.kubernetes.io/")
    )


async def test_quarantine_follows_noded_and_survives_agent_restart(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    node = await make_node(kube_client)
    try:
        await k8s.CoreV1Api(kube_client).patch_node(
            node, {"spec": {"taints": [{"key": OTHER[0], "value": OTHER[1], "effect": OTHER[2]}]}}
        )
        settings = _settings(testbed, namespace)
        async with running_agent(settings, "q-1"):
            await _put_node_info(kube_client, node)
            await eventually(
                lambda: _taints(kube_client, node),
                lambda t: t == sorted([OTHER, (KEY, "SeparateNPU", "NoSchedule")]),
                what="quarantine taint set",
            )
            await _delete_node_info(kube_client, node)  # NodeD: the node is healthy again
            await eventually(lambda: _taints(kube_client, node), lambda t: t == [OTHER], what="our taint removed")
            await _put_node_info(kube_client, node)
            await eventually(lambda: _taints(kube_client, node), lambda t: len(t) == 2, what="quarantined again")
        # the node heals while no agent runs; the next agent removes the taint it finds, and only that one
        await _delete_node_info(kube_client, node)
        async with running_agent(settings, "q-2"):
            await eventually(
                lambda: _taints(kube_client, node), lambda t: t == [OTHER], what="stale taint removed", timeout_s=20
            )
    finally:
        await _delete_node_info(kube_client, node)
        await delete_node(kube_client, node)


async def test_flapping_chip_keeps_its_node_quarantined_for_the_flap_window(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    """A chip that faults flap_threshold times is quarantined; when it looks healthy again that is the flapping
    itself, so the taint stays until the flap window has passed since it cleared."""
    node = await make_node(kube_client)
    try:
        settings = _settings(testbed, namespace)
        settings.detect.flap_threshold = 2
        async with running_agent(settings, "flap-1") as (engine, _):
            # fault, heal, fault, heal: the watch delivers each write in order
            for _ in range(2):
                await put_device_info(kube_client, node, {"Ascend910-2": ("RestartNPU", "80E18404")})
                await put_device_info(kube_client, node, {})
            await eventually(
                lambda: _value(dict(engine.quarantining.flap_holds)), bool, what="the healed flapping chip held"
            )
            assert await _taints(kube_client, node) == [QUARANTINE]
            later = datetime.now(UTC) + timedelta(seconds=settings.detect.flap_window_s + 1)
            await engine.tick(later)
            await eventually(lambda: _taints(kube_client, node), lambda t: t == [], what="lifted after the window")
    finally:
        await delete_device_info(kube_client, node)
        await delete_node(kube_client, node)


QUARANTINE = (KEY, "SeparateNPU", "NoSchedule")


async def _value(x: Any) -> Any:
    return x
