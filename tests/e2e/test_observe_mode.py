"""Observe mode (policy.mode=observe) beside another rescheduler, with the whole agent as a subprocess.

The guide's Volcano Job (``fault-scheduling=force``, ``PodEvicted -> RestartJob``) gets a chip fault; the agent
only watches. Standing in for MindCluster's plugin, the test evicts the faulty pod through the Eviction API and
Volcano restarts the job by the job's own policy. The agent writes nothing (no Command, no annotation on the job,
no taint or annotation on a node, no breaker ConfigMap) and publishes the fault and the observed recovery
(``acted_by=observed``), whose time fault_agent_recovery_seconds records. And an agent in act mode on a cluster
where MindCluster's plugin ConfigMap is there warns and raises fault_agent_mindcluster_plugin_active.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import (
    VC,
    eventually,
    get_job,
    guide_vcjob,
    holds,
    job_version,
    record_commands,
    recovery_span_s,
    restart_commands,
    submit,
    taints,
    wait_running,
)
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e

AGENT_PREFIXES = ("fault-agent.io/",)


async def _agent_annotations(sc: Scenario, name: str) -> dict[str, str]:
    job = await get_job(sc.api, sc.namespace, name)
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in annotations.items() if k.startswith(AGENT_PREFIXES)}


async def _node_marks(sc: Scenario, key: str) -> list[str]:
    """Our taint key or annotation on any of the test's nodes."""
    core = k8s.CoreV1Api(sc.api)
    found = []
    for node in sc.nodes:
        if any(t[0] == key for t in await taints(sc.api, node)):
            found.append(f"taint on {node}")
        n = await core.read_node(node)
        if key in (n.metadata.annotations or {}):
            found.append(f"annotation on {node}")
    return found


async def test_observe_mode_records_volcanos_own_restart_and_writes_nothing(scenario: Scenario) -> None:
    sc = scenario
    taint_key = f"e2e.fault-agent.io/{sc.tag}"
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    spec = created["spec"]
    assert created["metadata"]["labels"]["fault-scheduling"] == "force"
    assert {"event": "PodEvicted", "action": "RestartJob"} in spec["policies"]
    pods = await wait_running(sc.api, sc.namespace, name)
    version = job_version(await get_job(sc.api, sc.namespace, name))
    agent = await sc.start_agent(POLICY__MODE="observe", POLICY__TAINT_KEY=taint_key)
    commands = await record_commands(sc.api, sc.namespace)
    try:
        bad = pods[0]
        bad_node = bad.spec.node_name
        chip = int(bad.metadata.annotations["huawei.com/Ascend910"].split(",")[0].rsplit("-", 1)[1])
        sc.injector.chip_fault(bad_node, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])

        (detected,) = await sc.wait_events("fault.detected", for_job(uid))
        assert (detected["data"]["fault"]["kind"], detected["data"]["fault"]["node"]) == ("chip", bad_node)
        observation = detected["data"]["incident_id"]
        assert observation, "the fault names the observation it opened"

        async def untouched() -> bool:
            job = await get_job(sc.api, sc.namespace, name)
            return job_version(job) == version and not restart_commands(commands, name)

        # In act mode the agent restarts within a second or two; here nothing happens until someone else acts.
        await holds(untouched, for_s=4, what="no restart by the agent in observe mode")
        assert sc.events("recovery") == []

        # The other rescheduler evicts the faulty pod; Volcano restarts the whole job (PodEvicted -> RestartJob).
        sc.injector.pod_evicted_by_api(sc.namespace, bad.metadata.name)
        (started,) = await sc.wait_events("recovery.started", for_job(uid), timeout_s=30)
        assert (started["data"]["acted_by"], started["data"]["incident_id"]) == ("observed", observation)
        # the first sign may be the evicted pod going (restart-pods) before Volcano bumps status.version
        assert started["data"]["action"] in ("restart-pods", "restart-job")
        assert started["data"]["dry_run"] is False

        new_pods = await wait_running(sc.api, sc.namespace, name, not_uids={p.metadata.uid for p in pods}, timeout_s=60)
        assert len(new_pods) == 2
        (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
        assert (succeeded["data"]["acted_by"], succeeded["data"]["incident_id"]) == ("observed", observation)
        assert succeeded["data"]["action"] == "restart-job"  # Volcano restarted the whole job
        total = succeeded["data"]["durations"]["total_s"]
        # within the agent's own span from the fault's signal time to its success event (issue 40)
        assert 0 < total <= recovery_span_s(detected["data"]["fault"]["signal_time"], succeeded) + 0.01
        assert job_version(await get_job(sc.api, sc.namespace, name)) == version + 1

        async def sampled() -> bool:
            count = agent.metric(
                "fault_agent_recovery_seconds_count", acted_by="observed", action="restart-job", outcome="recovered"
            )
            return count == 1

        await eventually(sampled, timeout_s=10, what="one observed recovery-time sample")
        assert agent.metric("fault_agent_recovery_seconds_sum", acted_by="observed") > 0
        assert agent.metric("fault_agent_recovery_seconds_count", acted_by="agent") == 0

        # Nothing was written: no Command, no incident annotation, no taint or hold, no breaker ConfigMap, no
        # action counted.
        assert restart_commands(commands, name) == []
        assert await _agent_annotations(sc, name) == {}
        assert await _node_marks(sc, taint_key) == []
        with pytest.raises(ApiException) as missing:
            await k8s.CoreV1Api(sc.api).read_namespaced_config_map(f"fault-agent-breaker-{sc.tag}", sc.namespace)
        assert missing.value.status == 404
        for action in ("restart-job", "restart-pods", "force-delete-pods", "taint"):
            assert agent.metric("fault_agent_actions_total", action=action, result="done") == 0
        assert agent.metric("fault_agent_mindcluster_plugin_active", agent_mode="observe") == 0
    finally:
        await commands.stop()


async def _ensure_namespace(api: k8s.ApiClient, name: str) -> None:
    with contextlib.suppress(ApiException):  # 409: it exists
        await k8s.CoreV1Api(api).create_namespace({"metadata": {"name": name}})


async def test_act_mode_beside_mindclusters_plugin_warns_and_sets_the_gauge(scenario: Scenario) -> None:
    """The plugin's ConfigMap as MindCluster writes it at a session close (keys fault-node and remain-retry-times,
    component/ascend-for-volcano/internal/rescheduling/cache.go); an agent in act mode says how to switch."""
    sc = scenario
    core = k8s.CoreV1Api(sc.api)
    await _ensure_namespace(sc.api, "volcano-system")
    cm: dict[str, Any] = {
        "metadata": {"name": "vcjob-fault-npu-cm", "namespace": "volcano-system"},
        "data": {"fault-node": "", "remain-retry-times": ""},
    }
    with contextlib.suppress(ApiException):  # 404: none; an earlier test's agent may have written its bookkeeping
        await core.delete_namespaced_config_map("vcjob-fault-npu-cm", "volcano-system")
    await core.create_namespaced_config_map("volcano-system", cm)
    try:
        agent = await sc.start_agent()

        async def gauge() -> bool:
            return agent.metric("fault_agent_mindcluster_plugin_active", agent_mode="act") == 1

        await eventually(gauge, timeout_s=10, what="the plugin gauge in act mode")
        assert "FAULT_AGENT_POLICY__MODE=observe" in agent.tail(400)
        observer = await sc.start_agent("observer", standby=True, POLICY__MODE="observe")

        async def observer_gauge() -> bool:
            return observer.metric("fault_agent_mindcluster_plugin_active", agent_mode="observe") == 1

        await eventually(observer_gauge, timeout_s=10, what="the plugin gauge in observe mode")
        assert observer.metric("fault_agent_mindcluster_plugin_active", agent_mode="act") == 0
        assert "FAULT_AGENT_POLICY__MODE=observe" not in observer.tail(400)
    finally:
        await core.delete_namespaced_config_map("vcjob-fault-npu-cm", "volcano-system")
