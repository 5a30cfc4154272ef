"""reset-config-<job> on the testbed: the agent tells the training processes, and a stand-in for them
(testbed/training_stand_in.py) acknowledges as TaskD does.

- A ``pod-rescheduling: on`` job submitted with ``fault-agent submit`` (which creates its reset-config) gets a chip
  fault on one pod: only that pod is replaced, and once the pods are back reset-config holds MindCluster's
  pod-level update (read with agent.core.resetconfig's parser and, independently, its checkCode with hashlib);
  the stand-in sees RetryTime grow and restarts the surviving pod's processes.
- A ``subHealthyStrategy: graceExit`` job gets a sub-health fault: GracefulExit 1, the stand-in's processes exit,
  then (not before) the grace deletion, then GracefulExit 0; and when the processes do not exit, the deletion
  comes after ``policy.grace_exit_wait_s``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import eventually, get_job, guide_vcjob, record_pods, wait_running
from kubernetes_asyncio import client as k8s

from agent.core.resetconfig import parse_reset_config
from agent.platform.submit import plan_documents, submit_plan
from testbed.inject import ChipFault
from testbed.training_stand_in import TrainingStandIn

pytestmark = pytest.mark.e2e


async def _submit(sc: Scenario, name: str, labels: dict[str, str]) -> tuple[str, str]:
    """Submit the guide's job with `labels` through fault-agent submit's planning and creation; no Volcano
    policies (a deleted pod is recreated, not turned into a whole-job restart). Returns (name, uid)."""
    cm, job = guide_vcjob(sc.namespace, sc.tag, name=name, labels=labels)
    job["spec"]["policies"] = []
    plan = plan_documents([cm, job], None)
    assert plan.reset_config is not None, "submit must create the reset-config this job needs"
    await submit_plan(sc.api, plan, dry_run=False, say=lambda line: None)
    created = await get_job(sc.api, sc.namespace, name)
    return name, created["metadata"]["uid"]


async def _reset_config(sc: Scenario, name: str) -> dict[str, str]:
    cm = await k8s.CoreV1Api(sc.api).read_namespaced_config_map(f"reset-config-{name}", sc.namespace)
    return dict(cm.data or {})


def _chip(pod: k8s.V1Pod) -> int:
    return int(pod.metadata.annotations["huawei.com/Ascend910"].split(",")[0].rsplit("-", 1)[1])


async def test_pod_rescheduling_job_gets_reset_config_rewritten_once_its_pods_are_back(scenario: Scenario) -> None:
    sc = scenario
    await sc.add_nodes(3)
    name, uid = await _submit(sc, "resched", {"pod-rescheduling": "on"})
    initial = await _reset_config(sc, name)
    assert parse_reset_config(initial).info.retry_time == 0
    pods = await wait_running(sc.api, sc.namespace, name)
    await sc.start_agent()
    bad, survivor = pods
    async with TrainingStandIn(sc.api, sc.namespace, name) as stand_in:
        await eventually(lambda: _true(stand_in.seen.payloads), what="the stand-in to read reset-config")
        sc.injector.chip_fault(bad.spec.node_name, [ChipFault(_chip(bad), ("80E3A201",), "SeparateNPU")])
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-pods"
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
        new = await wait_running(sc.api, sc.namespace, name, timeout_s=30)
        assert survivor.metadata.uid in {p.metadata.uid for p in new}  # only the hit pod was replaced

        async def rewritten() -> dict[str, str] | None:
            data = await _reset_config(sc, name)
            return data if data.get("restartType") == "podReschedule" else None

        data = await eventually(rewritten, timeout_s=15, what="reset-config rewritten")
        got = parse_reset_config(data)
        assert (got.info.rank_list, got.info.retry_time, got.info.graceful_exit) == ((), 1, 0)
        assert got.info.update_time > 0
        assert got.check_code_ok is True
        assert data["checkCode"] == hashlib.sha256(data["reset.json"].encode()).hexdigest()  # independently
        assert json.loads(data["reset.json"])["RankList"] == []

        async def restarted() -> bool:
            return any(retry == 1 for _, retry, _ in stand_in.seen.restarts)

        await eventually(restarted, timeout_s=10, what="the stand-in to restart its processes")
        (_, _, running) = stand_in.seen.restarts[0]
        assert survivor.metadata.name in running


async def _true(value: Any) -> bool:
    return bool(value)


async def _grace_exit_job(sc: Scenario, name: str) -> tuple[str, list[k8s.V1Pod]]:
    await sc.add_nodes(3)
    name, uid = await _submit(sc, name, {"fault-scheduling": "grace", "subHealthyStrategy": "graceExit"})
    return uid, await wait_running(sc.api, sc.namespace, name)


def _first_deletion(watched: Any, uids: set[str]) -> float | None:
    """Receipt time of the first watch event showing one of `uids` terminating or gone."""
    for at, (kind, obj) in zip(watched.received_at, watched.events, strict=True):
        if obj["metadata"]["uid"] in uids and (kind == "DELETED" or obj["metadata"].get("deletionTimestamp")):
            return float(at)
    return None


async def test_grace_exit_waits_for_the_processes_then_deletes_and_resets_the_flag(scenario: Scenario) -> None:
    sc = scenario
    uid, pods = await _grace_exit_job(sc, "graceexit")
    name = "graceexit"
    agent = await sc.start_agent(POLICY__GRACE_EXIT_WAIT_S="30", POLICY__GRACE_OVER_TIME_S="3")
    watched = await record_pods(sc.api, sc.namespace)
    old = {p.metadata.uid for p in pods}
    async with TrainingStandIn(sc.api, sc.namespace, name) as stand_in:
        await eventually(lambda: _true(stand_in.seen.payloads), what="the stand-in to read reset-config")
        bad = pods[0]
        sc.injector.chip_fault(bad.spec.node_name, [ChipFault(_chip(bad), ("80E3A201",), "SubHealthFault")])
        await eventually(lambda: _true(stand_in.seen.grace_exits), timeout_s=20, what="GracefulExit 1 seen")
        exited_at, exited = stand_in.seen.grace_exits[0]
        assert set(exited) == {p.metadata.name for p in pods}
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
        deleted_at = _first_deletion(watched, old)
        assert deleted_at is not None
        assert deleted_at >= exited_at, "the grace deletion came before the processes exited"
        assert deleted_at - exited_at < 10, "the agent kept waiting after the processes had exited"

        async def reset() -> bool:
            return [v for _, v in stand_in.seen.graceful_exit] == [1, 0]

        await eventually(reset, timeout_s=10, what="GracefulExit back to 0")
        data = await _reset_config(sc, name)
        assert "restartType" not in data  # the graceful-exit update rewrites only checkCode and reset.json
        assert data["checkCode"] == hashlib.sha256(data["reset.json"].encode()).hexdigest()
        assert agent.metric("fault_agent_actions_total", action="grace-exit-wait", result="exited") == 1


async def test_grace_exit_deletes_after_the_wait_when_the_processes_do_not_exit(scenario: Scenario) -> None:
    sc = scenario
    uid, pods = await _grace_exit_job(sc, "gracehang")
    name = "gracehang"
    wait_s = 3.0
    agent = await sc.start_agent(POLICY__GRACE_EXIT_WAIT_S=str(wait_s), POLICY__GRACE_OVER_TIME_S="3")
    watched = await record_pods(sc.api, sc.namespace)
    old = {p.metadata.uid for p in pods}
    async with TrainingStandIn(sc.api, sc.namespace, name, exits=False) as stand_in:
        await eventually(lambda: _true(stand_in.seen.payloads), what="the stand-in to read reset-config")
        bad = pods[0]
        sc.injector.chip_fault(bad.spec.node_name, [ChipFault(_chip(bad), ("80E3A201",), "SubHealthFault")])
        await eventually(lambda: _true(stand_in.seen.graceful_exit), timeout_s=20, what="GracefulExit 1 seen")
        flag_at = stand_in.seen.graceful_exit[0][0]
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
        deleted_at = _first_deletion(watched, old)
        assert deleted_at is not None
        # the stand-in polls every 0.1 s: it saw the flag at most that much after the write
        assert deleted_at - flag_at >= wait_s - 0.5, "deleted before grace_exit_wait_s had passed"
        assert stand_in.seen.grace_exits == []
        assert agent.metric("fault_agent_actions_total", action="grace-exit-wait", result="timeout") == 1

        async def reset() -> bool:
            return [v for _, v in stand_in.seen.graceful_exit] == [1, 0]

        await eventually(reset, timeout_s=10, what="GracefulExit back to 0")


async def test_pod_level_grace_exit_replaces_the_hit_pod_and_restarts_the_survivors_processes(
    scenario: Scenario,
) -> None:
    """pod-rescheduling and graceExit together, as MindCluster runs them: GracefulExit stops every pod's
    processes, only the hit pod is replaced, then the pod-level update (RetryTime + 1) restarts the survivor's."""
    sc = scenario
    await sc.add_nodes(3)
    labels = {"fault-scheduling": "grace", "subHealthyStrategy": "graceExit", "pod-rescheduling": "on"}
    name, uid = await _submit(sc, "podgrace", labels)
    pods = await wait_running(sc.api, sc.namespace, name)
    await sc.start_agent(POLICY__GRACE_EXIT_WAIT_S="30", POLICY__GRACE_OVER_TIME_S="3")
    bad, survivor = pods
    async with TrainingStandIn(sc.api, sc.namespace, name) as stand_in:
        await eventually(lambda: _true(stand_in.seen.payloads), what="the stand-in to read reset-config")
        sc.injector.chip_fault(bad.spec.node_name, [ChipFault(_chip(bad), ("80E3A201",), "SubHealthFault")])
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-pods"
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)

        async def restarted() -> bool:
            return any(retry == 1 for _, retry, _ in stand_in.seen.restarts)

        await eventually(restarted, timeout_s=15, what="the survivor's processes restarted")
        new = await wait_running(sc.api, sc.namespace, name, timeout_s=30)  # every pod Ready again
        assert survivor.metadata.uid in {p.metadata.uid for p in new}
        assert [v for _, v in stand_in.seen.graceful_exit] == [1, 0]
        got = parse_reset_config(await _reset_config(sc, name))
        assert (got.info.retry_time, got.info.graceful_exit, got.restart_type, got.check_code_ok) == (
            1,
            0,
            "podReschedule",
            True,
        )
