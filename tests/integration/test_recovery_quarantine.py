"""Node quarantine on the testbed: a NodeD SeparateFault taints the node ``fault-agent.io/fault=SeparateNPU``; the
taint goes when NodeD deletes its ConfigMap, also when that happened while no agent was running; other taints
are never touched."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from actions_support import delete_device_info, delete_node, make_node, put_device_info
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from support.polling import eventually
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


async def test_flapping_chips_are_isolated_and_their_node_only_past_the_limit(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    """Issue 14 item 3: a chip that trips MindCluster's frequency rule (80E18008: twice in 24 h) is isolated
    (ManuallySeparateNPU), not its node; the node is tainted once detect.isolated_chips_taint of its chips are
    isolated, and stays so, with the chips' faults active, until they have been healthy isolation_release_s."""
    node = await make_node(kube_client)
    try:
        settings = _settings(testbed, namespace)
        settings.detect.flap_threshold = 0  # only MindCluster's per-code rules
        settings.detect.isolated_chips_taint = 2
        settings.detect.isolation_release_s = 60
        async with running_agent(settings, "flap-1") as (engine, _):
            # fault, heal, fault, heal: the watch delivers each write in order
            for _ in range(2):
                await put_device_info(kube_client, node, {"Ascend910-2": ("RestartNPU", "80E18008")})
                await put_device_info(kube_client, node, {})
            await eventually(
                lambda: _value(dict(engine.quarantining.isolated_chips.get(node, {}))),
                lambda chips: list(chips.values()) == [("Ascend910-2",)],
                what="the flapping chip isolated",
            )
            assert await _taints(kube_client, node) == []  # one chip: the node stays in service
            for _ in range(2):
                await put_device_info(kube_client, node, {"Ascend910-5": ("RestartNPU", "80E18008")})
                await put_device_info(kube_client, node, {})
            await eventually(
                lambda: _taints(kube_client, node),
                lambda t: t == [(KEY, "ManuallySeparateNPU", "NoSchedule")],
                what="the node tainted at two isolated chips",
            )
            # healthy for isolation_release_s (60 s): the chips are released (each 60 s after its own healing) and
            # the taint goes with the first of them (one isolated chip is under the limit)
            await eventually(
                lambda: _taints(kube_client, node), lambda t: t == [], what="released after 60 s", timeout_s=120
            )
            await eventually(
                lambda: _value(node in engine.quarantining.isolated_chips),
                lambda held: not held,
                what="both chips released",
            )
    finally:
        await delete_device_info(kube_client, node)
        await delete_node(kube_client, node)


async def _value(x: Any) -> Any:
    return x
