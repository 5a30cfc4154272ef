"""The guide's AscendJob (tests/fixtures/seed-acjob.yaml) and variants of it recovering from chip faults, under
the testbed's Ascend Operator stand-in (testbed/ascend_operator.py: MindCluster's operator as its source behaves,
checked against the real binary in docs/mindcluster-conformance.md).

Each test labels its namespace for the stand-in before it submits the job; the stand-in makes the Volcano
PodGroup and the pods (gang-scheduled by Volcano) and recreates deleted pods at the next ``version``, on the pods
only, as the real operator does. Everything else is real: the agent as a subprocess deletes the pods
(``fault-scheduling=force``: grace 0 with a UID precondition), the npu-plugin allocates chips, kwok runs the pods.
"""

from __future__ import annotations

import pytest
from conftest import Scenario, for_job
from helpers import (
    AC,
    AC_JOB_LABEL,
    acjob_running,
    chip_of,
    for_the_stand_in,
    guide_acjob,
    holds,
    live_pods,
    submit,
    watch_operator,
)
from kubernetes_asyncio import client as k8s

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e


async def test_ascendjob_chip_fault_force_deletes_pods_and_the_job_recovers(scenario: Scenario) -> None:
    sc = scenario
    await sc.add_nodes(4)
    cm, job = guide_acjob(sc)
    await for_the_stand_in(sc, job)
    async with watch_operator(sc.api, sc.namespace, job["metadata"]["name"]) as operator:
        created = await submit(sc.api, (cm, job), AC)
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]
        pods = await acjob_running(sc, name)
        assert {p.metadata.labels["version"] for p in pods} == {"0"}
        agent = await sc.start_agent()
        old = {p.metadata.uid for p in pods}
        master = next(p for p in pods if p.metadata.name.endswith("-master-0"))
        bad_node = master.spec.node_name
        sc.injector.chip_fault(bad_node, [ChipFault(chip_of(master), ("80E3A201",), "SeparateNPU")])

        (detected,) = await sc.wait_events("fault.detected", for_job(uid))
        assert detected["data"]["job"]["kind"] == "acjob"
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-job"

        new = await acjob_running(sc, name, not_uids=old)
        assert bad_node not in {p.spec.node_name for p in new}
        deleted = [d for d in operator.deleted if d[1] in old]
        assert {d[1] for d in deleted} == old
        for pod_name, _, grace, graceful_first in deleted:  # force mode: grace 0, never a graceful deletion first
            assert grace in (0, None), f"{pod_name} deleted with grace {grace}"
            assert not graceful_first, f"{pod_name} was first deleted gracefully"
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
        assert {p.metadata.labels["version"] for p in new} == {"1"}
        assert operator.version == 1
        acjob = await k8s.CustomObjectsApi(sc.api).get_namespaced_custom_object(*AC[:2], sc.namespace, AC[2], name)
        assert "version" not in (acjob["metadata"].get("labels") or {})  # the counter is on the pods only

        # The replacements reuse the old names; the agent's deletions carried the old UIDs, so they stay.
        new_uids = {p.metadata.uid for p in new}

        async def replacements_stay() -> bool:
            live = await live_pods(sc.api, sc.namespace, f"{AC_JOB_LABEL}={name}")
            return {p.metadata.uid for p in live} == new_uids

        await holds(replacements_stay, for_s=2, what="the replacement pods left alone")
        assert agent.metric("fault_agent_recovery_seconds_count", job_kind="acjob", outcome="recovered") == 1
        assert agent.metric("fault_agent_actions_total", action="restart-job", result="done") == 1


async def test_ascendjob_rank0_worker_is_no_master_so_only_its_pod_restarts(scenario: Scenario) -> None:
    """MindCluster's master rule: rank 0 escalates a pod-level restart only when the pod's replica type is not
    ``worker`` (internal/rescheduling/job.go ``isMasterRank``). A worker-only job's worker-0 has rank 0."""
    sc = scenario
    await sc.add_nodes(4)
    cm, job = guide_acjob(sc)
    job["metadata"]["labels"]["pod-rescheduling"] = "on"
    del job["spec"]["replicaSpecs"]["Master"]
    job["spec"]["replicaSpecs"]["Worker"]["replicas"] = 2
    await for_the_stand_in(sc, job)
    async with watch_operator(sc.api, sc.namespace, job["metadata"]["name"]) as operator:
        created = await submit(sc.api, (cm, job), AC)
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]
        pods = await acjob_running(sc, name)
        await sc.start_agent()
        rank0 = next(p for p in pods if p.metadata.annotations["hccl/rankIndex"] == "0")
        assert rank0.metadata.labels["training.kubeflow.org/replica-type"] == "worker"
        other = next(p for p in pods if p.metadata.uid != rank0.metadata.uid)
        sc.injector.chip_fault(rank0.spec.node_name, [ChipFault(chip_of(rank0), ("80E3A201",), "SeparateNPU")])
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-pods"
        new = await acjob_running(sc, name, not_uids={rank0.metadata.uid})
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
        assert [d[1] for d in operator.deleted] == [rank0.metadata.uid]
        # Only rank 0's pod came back, at the next version; the other pod is the same pod at the old one.
        versions = {p.metadata.name: (p.metadata.uid, p.metadata.labels["version"]) for p in new}
        assert versions[other.metadata.name] == (other.metadata.uid, "0")
        assert versions[rank0.metadata.name][1] == "1"


async def test_ascendjob_without_backoff_limit_or_retry_label_keeps_restarting(scenario: Scenario) -> None:
    """No ``runPolicy.backoffLimit`` and no ``fault-retry-times`` label: the Ascend Operator's limit is unlimited
    (ascendjob_controller.go ``setFaultRetryTimesToBackoffLimits``, ``unsetBackoffLimits``), so a fourth hardware
    fault still restarts the job (the agent used to stop at 3). Each restart deletes only pods that ran, and bumps
    the pods' version once."""
    sc = scenario
    await sc.add_nodes(4)
    cm, job = guide_acjob(sc)
    del job["metadata"]["labels"]["fault-retry-times"]
    assert "backoffLimit" not in job["spec"]["runPolicy"]
    await for_the_stand_in(sc, job)
    async with watch_operator(sc.api, sc.namespace, job["metadata"]["name"]) as operator:
        created = await submit(sc.api, (cm, job), AC)
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]
        pods = await acjob_running(sc, name)
        ran = {p.metadata.uid for p in pods}
        await sc.start_agent()
        for round_ in range(1, 5):
            bad = pods[0]
            sc.injector.chip_fault(bad.spec.node_name, [ChipFault(chip_of(bad), ("80E3A201",), "SeparateNPU")])
            await sc.wait_events("recovery.succeeded", for_job(uid), count=round_, timeout_s=60)
            pods = await acjob_running(sc, name, not_uids={p.metadata.uid for p in pods})
            replacements = [(n, u) for n, u, _, _ in operator.deleted if u not in ran]
            assert replacements == [], f"restart {round_} deleted replacement pods the operator had just made"
            assert {p.metadata.labels["version"] for p in pods} == {str(round_)}
            ran |= {p.metadata.uid for p in pods}
            sc.injector.chip_healthy(bad.spec.node_name)
        started = sc.events("recovery.started", for_job(uid))
        assert [e["data"]["action"] for e in started] == ["restart-job"] * 4
        assert {e["data"]["budget_left"] for e in started} == {None}  # no limit to report
        assert sc.events("recovery.failed", for_job(uid)) == []
        assert operator.version == 4
