"""reset-config-<job> on the testbed: the agent tells the training processes, and a stand-in for them
(testbed/training_stand_in.py) acknowledges as TaskD does.

- A ``pod-rescheduling: on`` job submitted with ``fault-agent submit`` (which creates its reset-config) gets a chip
  fault on one pod: only that pod is replaced, and once the pods are back reset-config holds MindCluster's
  pod-level update (read with agent.core.resetconfig's parser and, independently, its checkCode with hashlib);
  the stand-in sees RetryTime grow and restarts the surviving pod's processes.
- A ``subHealthyStrategy: graceExit`` job gets a sub-health fault: GracefulExit 1, the stand-in's processes exit,
  then (not before) the grace deletion, then GracefulExit 0; and when the processes do not exit, the deletion
  comes after ``policy.grace_exit_wait_s``.

Timing (issue 40): the grace-exit tests anchor on the agent's and the apiserver's own records, never on when this
test's watcher or the stand-in happened to receive something (under load either can come late): the order of the
apiserver's watch events (a pod's grace deletion shows it not Ready already: its processes had exited), the
``recovery.started`` event's ``time`` (the agent's clock, stamped before ``GracefulExit`` 1 is written) against the
moment the apiserver took the grace deletion (its ``deletionTimestamp`` less ``deletionGracePeriodSeconds``, whole
seconds), and the agent's own measure of its wait (``recovery.succeeded`` ``grace_waits``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
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


def _deletions(watched: Any, uids: set[str]) -> dict[str, dict[str, Any]]:
    """Each of `uids`' pods as the first watch event showing it terminating or gone carried it, by UID (the
    apiserver's order of events, whenever this test received them)."""
    first: dict[str, dict[str, Any]] = {}
    for kind, obj in watched.events:
        uid = obj["metadata"]["uid"]
        if uid in uids and uid not in first and (kind == "DELETED" or obj["metadata"].get("deletionTimestamp")):
            first[uid] = obj
    return first


def _deletion_requested_at(pod: dict[str, Any]) -> datetime:
    """When the apiserver took the deletion of `pod` (a watch object with ``deletionTimestamp``): that stamp is the
    request's time plus ``deletionGracePeriodSeconds``, truncated to the second, so the request came within the
    second after the returned time."""
    meta = pod["metadata"]
    stamp = datetime.fromisoformat(meta["deletionTimestamp"])
    return stamp - timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0))


def _ready_status(pod: dict[str, Any]) -> str | None:
    conditions = pod.get("status", {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)


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
        _, exited = stand_in.seen.grace_exits[0]
        assert set(exited) == {p.metadata.name for p in pods}
        (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
        deleted = _deletions(watched, old)
        assert deleted, "no grace deletion of the job's pods"
        for pod in deleted.values():  # the pod as the apiserver had it when the deletion came: processes exited
            assert _ready_status(pod) == "False", f"{pod['metadata']['name']} deleted before its processes exited"
        waits = [w for w in succeeded["data"]["grace_waits"] if w["wait"] == "grace-exit"]
        assert [w["ended"] for w in waits] == ["exited"]
        assert waits[0]["waited_s"] < 10, "the agent kept waiting after the processes had exited"

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
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        flagged_by = datetime.fromisoformat(started["time"])  # the agent's clock, before GracefulExit 1 went out
        (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
        deleted = _deletions(watched, old)
        assert deleted, "no grace deletion of the job's pods"
        requested_at = min(_deletion_requested_at(pod) for pod in deleted.values())  # the apiserver's clock
        assert requested_at + timedelta(seconds=1) - flagged_by >= timedelta(seconds=wait_s), (
            f"deleted before grace_exit_wait_s had passed: flag after {flagged_by}, deletion {requested_at}"
        )
        waits = [w for w in succeeded["data"]["grace_waits"] if w["wait"] == "grace-exit"]
        assert [w["ended"] for w in waits] == ["timeout"]
        assert waits[0]["waited_s"] >= wait_s  # the agent's own measure, from the flag's write to its end
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
