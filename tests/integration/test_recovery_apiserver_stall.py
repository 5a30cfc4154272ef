"""No phantom restarts after the agent lost the apiserver (issue 16 item 5).

After a 90 s apiserver stop, kube-controller-manager marked healthy nodes Ready=Unknown with a transition time from
inside the stop, and the agent, counting its 5 s grace from that time, tainted them and restarted their jobs
within 2 s of the apiserver's return. Here the kube-apiserver is killed for longer than the grace and started
again; once the agent's node watch is back (it sees the node as it was, Ready True from before the stop), the
node is marked as the controller marks it (Ready=Unknown since a moment inside the stop, the
kubelet's last heartbeat kept) and left so, kwok's heartbeat switched off, until the agent has seen it and well
past the grace; then its kubelet comes back and reports Ready. The node was healthy all along: no decision,
no RestartJob Command, no quarantine taint.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from actions_support import CommandRecorder, delete_node, make_job, make_job_pod, make_node
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from support.polling import eventually
from test_recovery import _settings, running_agent

from agent.core.cluster import JobKind
from testbed.inject import HEARTBEAT_LABEL

pytestmark = pytest.mark.integration
STRATEGIC = "application/strategic-merge-patch+json"


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _retrying(call: Callable[[], Awaitable[Any]]) -> Any:
    """`call` until the apiserver just restarted stops answering 429/503 ("storage is (re)initializing")."""
    for _ in range(100):
        try:
            return await call()
        except ApiException as e:
            if e.status not in (429, 503):
                raise
        await asyncio.sleep(0.2)
    return await call()


async def _ready(core: k8s.CoreV1Api, node: str) -> Any:
    obj = await core.read_node(node)
    return next((c for c in obj.status.conditions or [] if c.type == "Ready"), None)


async def test_a_node_marked_unknown_during_an_apiserver_stop_does_not_restart_its_healthy_job(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(kube_client)
    node = await make_node(kube_client)
    try:
        await eventually(lambda: _ready(core, node), lambda c: c is not None and c.status == "True", what="Ready")
        job = await make_job(kube_client, namespace, "stall", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
        for i in range(2):
            await make_job_pod(kube_client, job, i, node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}")
        settings = _settings(testbed, namespace, breaker_min_faulty_nodes=1000)
        async with running_agent(settings, "agent-stall") as (engine, _):
            await eventually(lambda: asyncio.sleep(0, node in engine.state.nodes), bool, what="the agent sees the node")
            await core.patch_node(node, {"metadata": {"labels": {HEARTBEAT_LABEL: "off"}}})  # kwok leaves Ready be

            stopped = datetime.now(UTC)
            await asyncio.to_thread(testbed.kill, "kube-apiserver")
            await asyncio.sleep(8)  # longer than the 5 s not-ready grace
            await asyncio.to_thread(testbed.start, "kube-apiserver")

            await _retrying(lambda: core.read_node(node))
            await _retrying(
                lambda: k8s.CustomObjectsApi(kube_client).list_namespaced_custom_object(
                    "bus.volcano.sh", "v1alpha1", namespace, "commands"
                )
            )
            # the agent's node watch is back (it has seen a write made after the restart, whose status still says
            # Ready True from before the stop) before the controller's Unknown arrives; its backoff after the
            # restart (up to kube.backoff_max_s, 30 s, per failed try) is what the long deadline is for
            touched = await _retrying(
                lambda: core.patch_node(node, {"metadata": {"annotations": {"test.fault-agent.io/touch": "1"}}})
            )
            rv = touched.metadata.resource_version

            def agent_node_rv() -> Any:
                seen = engine.state.nodes.get(node)
                return asyncio.sleep(0, seen.resource_version if seen is not None else None)

            await eventually(agent_node_rv, lambda v: v == rv, what="the agent's node watch is back", timeout_s=120)
            async with CommandRecorder(kube_client, namespace) as rec:
                # what kube-controller-manager writes: Unknown since inside the stop, the kubelet's heartbeat kept
                # (a strategic merge by condition type leaves lastHeartbeatTime as it is)
                unknown = {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastTransitionTime": _rfc3339(stopped + timedelta(seconds=2)),
                }
                await _retrying(
                    lambda: core.patch_node_status(node, {"status": {"conditions": [unknown]}}, _content_type=STRATEGIC)
                )
                assert (await _ready(core, node)).status == "Unknown"

                def agent_ready_status() -> Any:
                    seen = engine.state.nodes.get(node)
                    ready = seen.condition("Ready") if seen is not None else None
                    return asyncio.sleep(0, ready.status if ready is not None else None)

                await eventually(
                    agent_ready_status, lambda s: s == "Unknown", what="the agent sees Unknown", timeout_s=60
                )
                await asyncio.sleep(8)  # past the grace, the node still Unknown: before the fix it was "down" at once
                assert [(f.kind.value, f.node, d.action.value) for f, _, d in engine.decisions] == []
                assert await rec.count() == []

                # the kubelet is back: it reports the node Ready with a fresh heartbeat (written here as a kubelet
                # would: the kwok restarted with the apiserver waits out its predecessor's node Leases, 40 s)
                now = _rfc3339(datetime.now(UTC))
                ready = {**unknown, "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready"}
                ready |= {"lastHeartbeatTime": now, "lastTransitionTime": now}
                await _retrying(
                    lambda: core.patch_node_status(node, {"status": {"conditions": [ready]}}, _content_type=STRATEGIC)
                )
                await eventually(agent_ready_status, lambda s: s == "True", what="the agent sees Ready", timeout_s=30)
                await asyncio.sleep(3)
                assert [(f.kind.value, f.node, d.action.value) for f, _, d in engine.decisions] == []
                assert await rec.count() == []
                obj = await core.read_node(node)
                assert [t.key for t in obj.spec.taints or [] if t.key == settings.policy.taint_key] == []
    finally:
        await delete_node(kube_client, node)
