"""GPU clusters (issue 42): NVSentinel's signals as the agent's input, observe-don't-fight.

GPU kwok nodes (``nvidia.com/gpu`` capacity, testbed.inject.kwok_gpu_node) carry an opted-in Volcano Job
(config/examples/vcjob-gpu.yaml: 2 pods x 8 GPUs, no rings-config). A GPU fault arrives as NVSentinel's
platform-connectors write it (platform-connectors/pkg/connectors/kubernetes/process_node_events.go): a node condition
whose type is the health check (``SysLogsXIDError``), status True, reason ``<check>IsNotHealthy`` and a message
``ErrorCode:<xid> PCI:<addr> GPU:<uuid> <text> Recommended Action=<action>;``. The agent restarts the job once
(NVSentinel never restarts jobs) and its events keep NVIDIA's identifiers. On a node NVSentinel's fault-quarantine
already cordoned (its state and cordon-by labels, its annotation, spec.unschedulable) the agent adds no taint.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Scenario, for_job
from helpers import (
    HEARTBEAT_OFF,
    NVSENTINEL_UUID,
    TEST_LABEL,
    VC,
    add_gpu_nodes,
    eventually,
    get_job,
    nvsentinel_xid,
    taints,
)
from kubernetes_asyncio import client as k8s

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


KUBELET_END = {"pod-delete.stage.kwok.x-k8s.io/delay": "1s"}
"""Pod annotation: the testbed's kwok ends a deleted pod after 1 s, as a kubelet would, not at once
(testbed/kwok/stages.yaml, testbed-pod-delete). Ended at once, the old pods went while Volcano's killJob for the
RestartJob was still running; its job controller (volcano.sh/volcano v1.14.1) then handled every pod event before it
saw its own deletion of the PodGroup, found the PodGroup Pending (vc-scheduler flips it once the pods are deleted),
so synced without counting the pods (job_controller_actions.go syncJob) and kept killJob's ``status.terminating: 2``;
with no event after that (its PodGroup informer has no delete handler) the job stayed Restarting with no pods and
no PodGroup: this test's flake (3 of ~6 CI runs; 2 of 7 loop runs, one with no deletion of the agent's)."""


def gpu_job(namespace: str, tag: str) -> dict[str, Any]:
    """config/examples/vcjob-gpu.yaml moved to `namespace`, its pods pinned to this test's nodes and ended by kwok
    like a kubelet would (:data:`KUBELET_END`)."""
    (job,) = list(yaml.safe_load_all((ROOT / "config" / "examples" / "vcjob-gpu.yaml").read_text()))
    job = copy.deepcopy(job)
    job["metadata"]["namespace"] = namespace
    template = job["spec"]["tasks"][0]["template"]
    template["spec"]["nodeSelector"][TEST_LABEL] = tag
    template["metadata"].setdefault("annotations", {}).update(KUBELET_END)
    return job


PG = ("scheduling.volcano.sh", "v1beta1", "podgroups")


async def seen(sc: Scenario, name: str, job: dict[str, Any], pods: list[k8s.V1Pod]) -> str:
    """What a wait for Volcano job `name` saw last, for its failure message: the job's phase, version, retryCount
    and pod counts, its pods (every one, deleted or not: uid prefix, phase, node, deletion time, finalizers) and its
    PodGroups' phases with their last condition (the scheduler's reason when a PodGroup stays Pending)."""
    status = job.get("status") or {}
    counts = {k: status[k] for k in ("pending", "running", "terminating", "failed") if status.get(k)}
    said = [
        f"job {(status.get('state') or {}).get('phase')} version {status.get('version')} "
        f"retryCount {status.get('retryCount')} {counts}"
    ]
    for p in pods:
        gone = p.metadata.deletion_timestamp
        said.append(
            f"pod {p.metadata.name} {p.metadata.uid[:8]} {p.status.phase} on {p.spec.node_name}"
            + (f" deleted {gone:%H:%M:%S} finalizers {p.metadata.finalizers}" if gone else "")
        )
    groups = await k8s.CustomObjectsApi(sc.api).list_namespaced_custom_object(*PG[:2], sc.namespace, PG[2])
    for g in groups["items"]:
        gs = g.get("status") or {}
        last = (gs.get("conditions") or [{}])[-1]
        said.append(
            f"podgroup {g['metadata']['name'][-8:]} {gs.get('phase')} "
            f"{last.get('type')}/{last.get('reason')}: {last.get('message')}"
        )
    return "; ".join(said)


async def running(sc: Scenario, name: str, not_uids: frozenset[str] = frozenset()) -> list[k8s.V1Pod]:
    """The job's two pods once it is Running with both Running and Ready (and none of `not_uids`); a timeout's
    message says what the job, its pods and PodGroups looked like last (:func:`seen`)."""

    async def probe() -> tuple[list[k8s.V1Pod] | None, str]:
        job = await get_job(sc.api, sc.namespace, name)
        every = (
            await k8s.CoreV1Api(sc.api).list_namespaced_pod(sc.namespace, label_selector=f"volcano.sh/job-name={name}")
        ).items
        pods = [p for p in every if p.metadata.deletion_timestamp is None]
        good = [
            p
            for p in pods
            if p.status.phase == "Running"
            and p.metadata.uid not in not_uids
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        ]
        if (job.get("status") or {}).get("state", {}).get("phase") == "Running" and len(good) == 2 == len(pods):
            return good, ""
        return None, await seen(sc, name, job, every)

    got, _ = await eventually(
        probe, lambda v: v[0] is not None, timeout_s=120, what=f"GPU job {name} Running with 2 pods"
    )
    assert got is not None
    return got


def for_xid(uid: str, code: str) -> Callable[[dict[str, Any]], bool]:
    """Event filter: `uid`'s event about a fault with vendor code `code` (the job's only fault in these tests; a
    filter, not a count, so a node fault of another kind on the shared testbed cannot break the unpacking)."""
    job = for_job(uid)
    return lambda e: job(e) and code in (((e.get("data") or {}).get("fault") or {}).get("codes") or [])


async def test_an_nvsentinel_xid_condition_restarts_the_gpu_job_once_and_its_events_keep_the_xid(
    scenario: Scenario,
) -> None:
    sc = scenario
    await add_gpu_nodes(sc, 3)  # a spare: the restarted pods need not go back to the faulty node
    created = await k8s.CustomObjectsApi(sc.api).create_namespaced_custom_object(
        *VC[:2], sc.namespace, VC[2], gpu_job(sc.namespace, sc.tag)
    )
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await running(sc, name)
    agent = await sc.start_agent(POLICY__TAINT_KEY=f"e2e.fault-agent.io/{sc.tag}")
    bad_node = pods[0].spec.node_name
    await k8s.CoreV1Api(sc.api).patch_node(bad_node, {"metadata": {"labels": HEARTBEAT_OFF}})
    await nvsentinel_xid(sc, bad_node, 48, "COMPONENT_RESET", "ROBUST_CHANNEL_GPU_ECC_DBE")

    detected = await sc.wait_events("fault.detected", for_xid(uid, "XID-48"), timeout_s=60)
    fault = detected[0]["data"]["fault"]
    assert (fault["kind"], fault["level"], fault["node"]) == ("node", "RestartNPU", bad_node)
    assert fault["codes"] == ["XID-48"]
    assert fault["reason"] == "SysLogsXIDError"
    assert "SysLogsXIDErrorIsNotHealthy" in fault["detail"]
    assert "ROBUST_CHANNEL_GPU_ECC_DBE" in fault["detail"]
    assert f"GPU:{NVSENTINEL_UUID}" in fault["devices"]
    (started,) = await sc.wait_events("recovery.started", for_job(uid), timeout_s=60)
    assert started["data"]["action"] == "restart-job"
    assert "XID-48" in started["data"]["reason"]
    await running(sc, name, not_uids=frozenset(p.metadata.uid for p in pods))
    await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=120)
    await asyncio.sleep(5)  # the condition is still True: no second restart for the same fault
    assert len(sc.events("recovery.started", for_job(uid))) == 1, sc.events("recovery.started", for_job(uid))
    assert agent.metric("fault_agent_faults_total", kind="node", level="RestartNPU", source="node") >= 1
    # RestartNPU resets the GPU, it does not take the node out: no taint of the agent's
    assert not [t for t in await taints(sc.api, bad_node) if t[0] == f"e2e.fault-agent.io/{sc.tag}"]


async def test_a_node_nvsentinel_cordoned_gets_no_taint_of_the_agents_but_the_job_is_restarted(
    scenario: Scenario,
) -> None:
    sc = scenario
    await add_gpu_nodes(sc, 3)
    created = await k8s.CustomObjectsApi(sc.api).create_namespaced_custom_object(
        *VC[:2], sc.namespace, VC[2], gpu_job(sc.namespace, sc.tag)
    )
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await running(sc, name)
    key = f"e2e.fault-agent.io/{sc.tag}"
    agent = await sc.start_agent(POLICY__TAINT_KEY=key)
    bad_node = pods[0].spec.node_name
    core = k8s.CoreV1Api(sc.api)
    # NVSentinel's fault-quarantine holds the node: it cordons it and marks it (commons/pkg/statemanager,
    # fault-quarantine/pkg/common); then its connector's condition: XID 79, the GPU fell off the bus
    await core.patch_node(
        bad_node,
        {
            "metadata": {
                "labels": {
                    **HEARTBEAT_OFF,
                    "dgxc.nvidia.com/nvsentinel-state": "quarantined",
                    "k8saas.nvidia.com/cordon-by": "NVSentinel",
                },
                "annotations": {"quarantineHealthEventIsCordoned": "True"},
            },
            "spec": {"unschedulable": True},
        },
    )
    await nvsentinel_xid(sc, bad_node, 79, "RESTART_BM", "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS")

    (detected, *_) = await sc.wait_events("fault.detected", for_xid(uid, "XID-79"), timeout_s=60)
    assert detected["data"]["fault"]["level"] == "SeparateNPU"
    (started,) = await sc.wait_events("recovery.started", for_job(uid), timeout_s=60)
    assert started["data"]["action"] == "restart-job"
    new_pods = await running(sc, name, not_uids=frozenset(p.metadata.uid for p in pods))
    assert bad_node not in {p.spec.node_name for p in new_pods}  # NVSentinel's cordon keeps them off
    await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=120)

    async def deferred() -> float:
        return agent.metric("fault_agent_actions_total", action="taint", result="deferred")

    await eventually(deferred, lambda n: n >= 1, what="the agent to leave the quarantine to NVSentinel")
    # (not the agent's taint count: it watches every node of the shared testbed, other tests' faults included)
    assert not [t for t in await taints(sc.api, bad_node) if t[0] == key], "the agent tainted NVSentinel's node"
    assert len(sc.events("recovery.started", for_job(uid))) == 1, sc.events("recovery.started", for_job(uid))
