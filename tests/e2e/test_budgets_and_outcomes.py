"""RetryLedger and outcomes as Volcano sees them (issue 13, C.9 and C.10), with the whole agent as a subprocess and
the testbed's real Volcano controller taking the Commands.

- Volcano counts every restart against ``spec.maxRetry`` and marks the job Failed at the restart that brings
  ``status.retryCount`` to maxRetry (Volcano v1.14 ``pkg/controllers/job/state/running.go``, ``restarting.go``):
  the agent's ledger follows the job's counter and no decision promises a restart Volcano would refuse.
- Every ``recovery.started`` ends in exactly one ``recovery.succeeded`` or ``recovery.failed`` and one
  ``fault_agent_recovery_seconds`` sample: Volcano failing the job fails the recovery at once (``job-failed``),
  a deleted job is abandoned (``job-gone``, outcome ``abandoned``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Scenario, for_job
from helpers import (
    TEST_LABEL,
    VC,
    eventually,
    fault_chip,
    get_job,
    guide_vcjob,
    holds,
    job_record,
    record_commands,
    restart_by_command,
    restart_commands,
    submit,
    wait_running,
)
from kubernetes_asyncio import client as k8s

from agent.core.incidents import Phase, decode_incident, decode_ledger
from agent.core.records import KEY_INCIDENT, KEY_LEDGER

pytestmark = pytest.mark.e2e
EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "examples" / "vcjob-mindx-dls-test.yaml"


def _status(job: Any) -> tuple[str, int]:
    status = job.get("status") or {}
    return (status.get("state") or {}).get("phase", ""), int(status.get("retryCount", 0))


async def _stored(sc: Scenario, job: Any, key: str) -> str:
    """`key` of the agent's record of `job` (its namespace is the scenario's: leader.namespace)."""
    return (await job_record(sc.api, sc.namespace, job)).get(key, "")


async def test_the_guides_job_budget_follows_volcanos_retry_count(scenario: Scenario) -> None:
    """The issue's run, with the shipped example's maxRetry 3 and fault-retry-times 3: a chip restart and one
    business restart leave Volcano one restart short of failing the job (retryCount 2 of maxRetry 3), so the
    next business failure is not restarted: recovery.failed (budget-exhausted) names both numbers, and Volcano
    does not mark the job Failed. Before, the agent promised "retry 2 of 3 (1 left)" and its third Command made
    Volcano fail the job (retryCount 3)."""
    sc = scenario
    (_, example) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag), VC)
    assert created["spec"]["maxRetry"] == example["spec"]["maxRetry"] == 3
    assert created["metadata"]["labels"]["fault-retry-times"] == example["metadata"]["labels"]["fault-retry-times"]
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    await sc.start_agent()
    commands = await record_commands(sc.api, sc.namespace)
    try:
        seen = {p.metadata.uid for p in pods}
        fault_chip(sc, pods[0])
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=40)
        pods = await wait_running(sc.api, sc.namespace, name, not_uids=seen)
        seen |= {p.metadata.uid for p in pods}

        sc.injector.pod_failed(sc.namespace, pods[0].metadata.name, exit_code=137)  # business failure 1
        await sc.wait_events("recovery.succeeded", for_job(uid), count=2, timeout_s=40)
        pods = await wait_running(sc.api, sc.namespace, name, not_uids=seen)
        job = await get_job(sc.api, sc.namespace, name)
        assert _status(job) == ("Running", 2)
        # the agent's ledger agrees with the job's own counter: both restarts count against maxRetry
        assert decode_ledger(await _stored(sc, job, KEY_LEDGER)).restarts_used == 2
        started = sc.events("recovery.started", for_job(uid))
        assert [e["data"]["budget_left"] for e in started] == [1, 0], "a restart Volcano would refuse was promised"

        sc.injector.pod_failed(sc.namespace, pods[0].metadata.name, exit_code=137)  # business failure 2
        (failed,) = await sc.wait_events("recovery.failed", for_job(uid), timeout_s=30)
        assert failed["data"]["reason"] == "budget-exhausted"
        assert "maxRetry 3" in failed["data"]["detail"]
        assert "retryCount 2" in failed["data"]["detail"]

        async def volcano_keeps_the_job() -> bool:
            job = await get_job(sc.api, sc.namespace, name)
            return _status(job)[1] == 2 and _status(job)[0] != "Failed" and len(restart_commands(commands, name)) == 2

        await holds(volcano_keeps_the_job, for_s=4, what="no third restart, the job not Failed by Volcano")
        assert len(sc.events("recovery.started", for_job(uid))) == 2
    finally:
        await commands.stop()


async def _restarting_with_nowhere_to_go(sc: Scenario) -> tuple[str, str, Any]:
    """The guide's job Running on two nodes, which then stop matching its node selector (as if taken for other
    work); a chip fault on one of them: the agent restarts the job and the new pods have nowhere to go, so the job
    stays Restarting or Pending (retryCount 1) and the incident ``restarting``. Returns (name, uid, agent)."""
    nodes = await sc.add_nodes(2)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    for node in nodes:
        await k8s.CoreV1Api(sc.api).patch_node(node, {"metadata": {"labels": {TEST_LABEL: f"{sc.tag}-taken"}}})
    agent = await sc.start_agent()
    fault_chip(sc, pods[0])
    await sc.wait_events("recovery.started", for_job(uid))

    async def waiting() -> bool:
        job = await get_job(sc.api, sc.namespace, name)
        text = await _stored(sc, job, KEY_INCIDENT)
        phase, retries = _status(job)
        restarting = bool(text) and decode_incident(text).phase is Phase.RESTARTING
        return restarting and retries == 1 and phase in ("Restarting", "Pending")

    await eventually(waiting, timeout_s=30, what="the job restarted once and waiting, its incident restarting")
    await holds(waiting, for_s=2, what="the new pods have nowhere to go")
    return name, uid, agent


async def test_volcano_failing_the_job_fails_the_recovery_at_once(scenario: Scenario) -> None:
    """While the incident waits for the new pods, Volcano gives the job up: an operator lowers spec.maxRetry to the
    one restart already spent and restarts the job too (``vcctl job restart``: a RestartJob Command), so Volcano
    marks it Failed at its next sync whether it was Restarting (retryCount >= maxRetry) or Pending (the Command's
    restart). The recovery fails at once with reason ``job-failed``, not after the 1800 s recovery deadline."""
    sc = scenario
    name, uid, agent = await _restarting_with_nowhere_to_go(sc)
    custom = k8s.CustomObjectsApi(sc.api)
    merge: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
    await custom.patch_namespaced_custom_object(*VC[:2], sc.namespace, VC[2], name, {"spec": {"maxRetry": 1}}, **merge)
    await restart_by_command(sc, name, uid, reason="operator")

    async def volcano_failed() -> bool:
        return _status(await get_job(sc.api, sc.namespace, name))[0] == "Failed"

    await eventually(volcano_failed, timeout_s=30, what="Volcano to mark the job Failed")
    (failed,) = await sc.wait_events("recovery.failed", for_job(uid), timeout_s=10)
    assert failed["data"]["reason"] == "job-failed"
    assert "Volcano marked the job Failed" in failed["data"]["detail"]
    assert "spec.maxRetry 1" in failed["data"]["detail"]
    assert failed["data"]["action"] == "restart-job"
    job = await get_job(sc.api, sc.namespace, name)
    assert decode_incident(await _stored(sc, job, KEY_INCIDENT)).phase is Phase.FAILED
    assert agent.metric("fault_agent_recovery_seconds_count", job_kind="vcjob", outcome="failed") == 1
    await holds(lambda: _one(sc, "recovery.failed", uid), for_s=3, what="exactly one recovery.failed for the incident")
    assert len(sc.events("recovery.succeeded", for_job(uid))) == 0


async def _one(sc: Scenario, fragment: str, uid: str) -> bool:
    return len(sc.events(fragment, for_job(uid))) == 1


async def test_a_job_deleted_mid_recovery_is_abandoned(scenario: Scenario) -> None:
    """The job is deleted while its incident waits for the new pods: one log line, one recovery.failed
    (``job-gone``) and one recovery_seconds sample with outcome ``abandoned``, as the metric's help promises."""
    sc = scenario
    name, uid, agent = await _restarting_with_nowhere_to_go(sc)
    await k8s.CustomObjectsApi(sc.api).delete_namespaced_custom_object(*VC[:2], sc.namespace, VC[2], name)
    (failed,) = await sc.wait_events("recovery.failed", for_job(uid), timeout_s=15)
    assert failed["data"]["reason"] == "job-gone"
    assert failed["data"]["action"] == "restart-job"
    assert failed["data"]["job"]["name"] == name

    async def sampled() -> bool:
        return agent.metric("fault_agent_recovery_seconds_count", job_kind="vcjob", outcome="abandoned") == 1

    await eventually(sampled, timeout_s=5, what="one recovery_seconds sample with outcome abandoned")
    assert agent.metric("fault_agent_recovery_seconds_count", job_kind="vcjob") == 1
    assert "job deleted while recovering" in agent.log.read_text()
    await holds(lambda: _one(sc, "recovery.failed", uid), for_s=3, what="exactly one recovery.failed for the incident")
