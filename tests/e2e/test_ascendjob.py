"""The guide's AscendJob (tests/fixtures/seed-acjob.yaml) recovering from a chip fault.

No ascend-operator runs on the testbed, so this test plays the operator's part itself, in
:func:`play_ascend_operator` and nowhere else: it creates one pod per replica with the operator's labels and
owner reference, marks the job Running, and when one of the job's pods is deleted it bumps the job's ``version``
label and creates the pod again. The pods use the default scheduler (the operator would also create a Volcano
PodGroup; that is not what is under test). Everything else is real: the agent as a subprocess deletes the pods
(``fault-scheduling=force``: grace 0 with a UID precondition), the npu-plugin allocates chips, kwok runs the pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import AC, NPU, TEST_LABEL, eventually, holds, live_pods, seed_docs, submit
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e
JOB_LABEL = "training.kubeflow.org/job-name"
MERGE = "application/merge-patch+json"


@dataclass
class PlayedOperator:
    """What the stand-in operator saw and did: deleted pods as (name, uid, deletionGracePeriodSeconds, whether a
    graceful deletion was seen first), and the pods it created as (name, uid)."""

    deleted: list[tuple[str, str, int | None, bool]] = field(default_factory=list)
    created: list[tuple[str, str]] = field(default_factory=list)
    version: int = 0


def _pod_for(job: dict[str, Any], rtype: str, index: int, version: int, tag: str) -> dict[str, Any]:
    """The pod the ascend-operator would create for replica `rtype`/`index` of `job` (labels, owner reference,
    the replica's template), pinned to the test's nodes."""
    spec = job["spec"]["replicaSpecs"][rtype]
    template = copy.deepcopy(spec["template"])
    name = job["metadata"]["name"]
    labels = {
        **(template.get("metadata", {}).get("labels") or {}),
        JOB_LABEL: name,
        "training.kubeflow.org/replica-type": rtype.lower(),
        "training.kubeflow.org/replica-index": str(index),
        "version": str(version),
    }
    pod_spec = template["spec"]
    pod_spec["restartPolicy"] = spec.get("restartPolicy", "Never")
    pod_spec.setdefault("nodeSelector", {})[TEST_LABEL] = tag
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-{rtype.lower()}-{index}",
            "namespace": job["metadata"]["namespace"],
            "labels": labels,
            "annotations": {"hccl/rankIndex": str(_rank(job, rtype, index))},
            "ownerReferences": [
                {
                    "apiVersion": f"{AC[0]}/{AC[1]}",
                    "kind": "AscendJob",
                    "name": name,
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": pod_spec,
    }


def _rank(job: dict[str, Any], rtype: str, index: int) -> int:
    """The operator's ``hccl/rankIndex``: the replica index, plus one for a worker when a non-worker replica (the
    guide's Master) holds chips (component/ascend-operator/pkg/controllers/v1/annotation.go ``setHcclRankIndex``;
    here: when the job has a Master). A worker-only job's worker-0 has rank 0."""
    if rtype != "Worker":
        return index
    return index + (1 if "Master" in job["spec"]["replicaSpecs"] else 0)


@contextlib.asynccontextmanager
async def play_ascend_operator(api: k8s.ApiClient, job: dict[str, Any], tag: str) -> AsyncIterator[PlayedOperator]:
    """Stand in for MindCluster's ascend-operator (absent from the testbed) while the block runs: create the job's
    pods, set its conditions Created and Running, and recreate every pod of the job that gets deleted (bumping
    the job's ``version`` label once per reschedule)."""
    core = k8s.CoreV1Api(api)
    custom = k8s.CustomObjectsApi(api)
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    played = PlayedOperator()
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await custom.patch_namespaced_custom_object(
        AC[0], AC[1], ns, AC[2], name, {"metadata": {"labels": {"version": "0"}}}, _content_type=MERGE
    )
    status = {
        "conditions": [
            {"type": t, "status": "True", "reason": f"AscendJob{t}", "lastTransitionTime": now}
            for t in ("Created", "Running")
        ]
    }
    await custom.patch_namespaced_custom_object_status(
        AC[0], AC[1], ns, AC[2], name, {"status": status}, _content_type=MERGE
    )
    replicas = [
        (rtype, i) for rtype, spec in job["spec"]["replicaSpecs"].items() for i in range(int(spec.get("replicas", 1)))
    ]
    listed = await core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={name}")
    for rtype, i in replicas:
        pod = await core.create_namespaced_pod(ns, _pod_for(job, rtype, i, 0, tag))
        played.created.append((pod.metadata.name, pod.metadata.uid))

    async def run(rv: str) -> None:
        graceful: set[str] = set()
        while True:
            async with watch.Watch().stream(
                core.list_namespaced_pod, ns, label_selector=f"{JOB_LABEL}={name}", resource_version=rv
            ) as stream:
                async for ev in stream:
                    meta = ev["raw_object"]["metadata"]
                    rv = meta.get("resourceVersion", rv)
                    grace = meta.get("deletionGracePeriodSeconds")
                    if ev["type"] == "MODIFIED" and meta.get("deletionTimestamp") and (grace or 0) > 0:
                        graceful.add(meta["uid"])
                    if ev["type"] != "DELETED":
                        continue
                    played.deleted.append((meta["name"], meta["uid"], grace, meta["uid"] in graceful))
                    labels = meta.get("labels") or {}
                    if labels.get("version") == str(played.version):  # first pod of this reschedule
                        played.version += 1
                        patch = {"metadata": {"labels": {"version": str(played.version)}}}
                        await custom.patch_namespaced_custom_object(
                            AC[0], AC[1], ns, AC[2], name, patch, _content_type=MERGE
                        )
                    rtype = next(
                        r
                        for r in job["spec"]["replicaSpecs"]
                        if r.lower() == labels.get("training.kubeflow.org/replica-type")
                    )
                    index = int(labels.get("training.kubeflow.org/replica-index", "0"))
                    pod = await core.create_namespaced_pod(ns, _pod_for(job, rtype, index, played.version, tag))
                    played.created.append((pod.metadata.name, pod.metadata.uid))

    task = asyncio.create_task(run(listed.metadata.resource_version), name="play-ascend-operator")
    try:
        yield played
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _running(sc: Scenario, name: str, *, not_uids: frozenset[str] | set[str] = frozenset()) -> list[k8s.V1Pod]:
    async def probe() -> list[k8s.V1Pod] | None:
        pods = await live_pods(sc.api, sc.namespace, f"{JOB_LABEL}={name}")
        good = [
            p
            for p in pods
            if p.status.phase == "Running"
            and (p.metadata.annotations or {}).get(NPU)
            and p.metadata.uid not in not_uids
        ]
        return good if len(good) == 2 == len(pods) else None

    return await eventually(probe, timeout_s=60, what=f"AscendJob {name}'s 2 pods Running with chips")


async def test_ascendjob_chip_fault_force_deletes_pods_and_the_job_recovers(scenario: Scenario) -> None:
    sc = scenario
    await sc.add_nodes(4)
    cm, job = copy.deepcopy(seed_docs("seed-acjob.yaml"))
    for doc in (cm, job):
        doc["metadata"]["namespace"] = sc.namespace
    # The guide's Worker asks for a 16-chip node type; the testbed's nodes are the guide's 8-chip A2 nodes.
    job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"]["accelerator-type"] = "module-910b-8"
    created = await submit(sc.api, (cm, job), AC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    async with play_ascend_operator(sc.api, created, sc.tag) as operator:
        pods = await _running(sc, name)
        agent = await sc.start_agent()
        old = {p.metadata.uid for p in pods}
        master = next(p for p in pods if p.metadata.name.endswith("-master-0"))
        bad_node = master.spec.node_name
        chip = int(master.metadata.annotations[NPU].split(",")[1].rsplit("-", 1)[1])
        sc.injector.chip_fault(bad_node, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])

        (detected,) = await sc.wait_events("fault.detected", for_job(uid))
        assert detected["data"]["job"]["kind"] == "acjob"
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-job"

        new = await _running(sc, name, not_uids=old)
        assert bad_node not in {p.spec.node_name for p in new}
        deleted = [d for d in operator.deleted if d[1] in old]
        assert {d[1] for d in deleted} == old
        for pod_name, _, grace, graceful_first in deleted:  # force mode: grace 0, never a graceful deletion first
            assert grace in (0, None), f"{pod_name} deleted with grace {grace}"
            assert not graceful_first, f"{pod_name} was first deleted gracefully"
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
        assert operator.version == 1

        # The replacements reuse the old names; the agent's deletions carried the old UIDs, so they stay.
        new_uids = {p.metadata.uid for p in new}

        async def replacements_stay() -> bool:
            live = await live_pods(sc.api, sc.namespace, f"{JOB_LABEL}={name}")
            return {p.metadata.uid for p in live} == new_uids

        await holds(replacements_stay, for_s=2, what="the replacement pods left alone")
        assert agent.metric("fault_agent_recovery_seconds_count", job_kind="acjob", outcome="recovered") == 1
        assert agent.metric("fault_agent_actions_total", action="restart-job", result="done") == 1


def _guide_acjob(sc: Scenario) -> tuple[dict[str, Any], dict[str, Any]]:
    cm, job = copy.deepcopy(seed_docs("seed-acjob.yaml"))
    for doc in (cm, job):
        doc["metadata"]["namespace"] = sc.namespace
    job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"]["accelerator-type"] = "module-910b-8"
    return cm, job


def _chip_of(pod: k8s.V1Pod) -> int:
    return int(pod.metadata.annotations[NPU].split(",")[1].rsplit("-", 1)[1])


async def test_ascendjob_rank0_worker_is_no_master_so_only_its_pod_restarts(scenario: Scenario) -> None:
    """MindCluster's master rule: rank 0 escalates a pod-level restart only when the pod's replica type is not
    ``worker`` (internal/rescheduling/job.go ``isMasterRank``). A worker-only job's worker-0 has rank 0."""
    sc = scenario
    await sc.add_nodes(4)
    cm, job = _guide_acjob(sc)
    job["metadata"]["labels"]["pod-rescheduling"] = "on"
    del job["spec"]["replicaSpecs"]["Master"]
    job["spec"]["replicaSpecs"]["Worker"]["replicas"] = 2
    created = await submit(sc.api, (cm, job), AC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    async with play_ascend_operator(sc.api, created, sc.tag) as operator:
        pods = await _running(sc, name)
        await sc.start_agent()
        rank0 = next(p for p in pods if p.metadata.annotations["hccl/rankIndex"] == "0")
        assert rank0.metadata.labels["training.kubeflow.org/replica-type"] == "worker"
        other = next(p for p in pods if p.metadata.uid != rank0.metadata.uid)
        sc.injector.chip_fault(rank0.spec.node_name, [ChipFault(_chip_of(rank0), ("80E3A201",), "SeparateNPU")])
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-pods"
        new = await _running(sc, name, not_uids={rank0.metadata.uid})
        assert other.metadata.uid in {p.metadata.uid for p in new}
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
        assert [d[1] for d in operator.deleted] == [rank0.metadata.uid]


async def test_ascendjob_without_backoff_limit_or_retry_label_keeps_restarting(scenario: Scenario) -> None:
    """No ``runPolicy.backoffLimit`` and no ``fault-retry-times`` label: the Ascend Operator's limit is unlimited
    (ascendjob_controller.go ``setFaultRetryTimesToBackoffLimits``, ``unsetBackoffLimits``), so a fourth hardware
    fault still restarts the job (the agent used to stop at 3)."""
    sc = scenario
    await sc.add_nodes(4)
    cm, job = _guide_acjob(sc)
    del job["metadata"]["labels"]["fault-retry-times"]
    assert "backoffLimit" not in job["spec"]["runPolicy"]
    created = await submit(sc.api, (cm, job), AC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    async with play_ascend_operator(sc.api, created, sc.tag) as operator:
        pods = await _running(sc, name)
        await sc.start_agent()
        for round_ in range(1, 5):
            bad = pods[0]
            sc.injector.chip_fault(bad.spec.node_name, [ChipFault(_chip_of(bad), ("80E3A201",), "SeparateNPU")])
            await sc.wait_events("recovery.succeeded", for_job(uid), count=round_, timeout_s=60)
            pods = await _running(sc, name, not_uids={p.metadata.uid for p in pods})
            sc.injector.chip_healthy(bad.spec.node_name)
        started = sc.events("recovery.started", for_job(uid))
        assert [e["data"]["action"] for e in started] == ["restart-job"] * 4
        assert {e["data"]["budget_left"] for e in started} == {None}  # no limit to report
        assert sc.events("recovery.failed", for_job(uid)) == []
        assert operator.version == 4
