"""JobSets (jobset.x-k8s.io/v1alpha2) on the testbed's real JobSet controller (sigs.k8s.io/jobset, testbed/build.py),
with the whole agent as a subprocess (kube.jobsets_enabled).

The JobSet is the guide's (agent.platform.builders.build_jobset): two workers, child Job backoffLimit 0, a
podFailurePolicy that fails the Job on DisruptionTarget and a failure policy rule RestartJobSetAndIgnoreMaxRestarts
on PodFailurePolicy. What JobSet counts is read from its own status (restarts, restartsCountTowardsMax), never from
the agent (docs/jobset.md).
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import JS, NPU, TEST_LABEL, chip_of, event_time, eventually, holds, recovery_span_s
from kubernetes_asyncio import client as k8s

from agent.core.jobset import JOBSET_NAME_LABEL, RESTART_ATTEMPT_LABEL
from agent.platform.builders import JobSetTrainingSpec, build_jobset
from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e

ENABLED = {"KUBE__JOBSETS_ENABLED": "true"}


async def _submit(sc: Scenario, *, max_restarts: int) -> dict[str, Any]:
    body = build_jobset(
        JobSetTrainingSpec(
            name=f"js-{sc.tag}",
            namespace=sc.namespace,
            image="busybox",
            workers=2,
            max_restarts=max_restarts,
            accelerators=8,
            accelerator_resource=NPU,
            node_selector={TEST_LABEL: sc.tag},
        )
    )
    created: dict[str, Any] = await k8s.CustomObjectsApi(sc.api).create_namespaced_custom_object(
        JS[0], JS[1], sc.namespace, JS[2], body
    )
    return created


async def _jobset(sc: Scenario, name: str) -> dict[str, Any]:
    got: dict[str, Any] = await k8s.CustomObjectsApi(sc.api).get_namespaced_custom_object(
        JS[0], JS[1], sc.namespace, JS[2], name
    )
    return got


def _counters(js: dict[str, Any]) -> tuple[int, int]:
    """(status.restarts, status.restartsCountTowardsMax)."""
    status = js.get("status") or {}
    return int(status.get("restarts", 0)), int(status.get("restartsCountTowardsMax", 0))


async def _running(sc: Scenario, name: str, attempt: int, *, timeout_s: float = 60.0) -> list[k8s.V1Pod]:
    """The JobSet's 2 pods of restart attempt `attempt`, once all are Running, Ready and given their chips."""
    core = k8s.CoreV1Api(sc.api)

    async def probe() -> list[k8s.V1Pod] | None:
        pods = (await core.list_namespaced_pod(sc.namespace, label_selector=f"{JOBSET_NAME_LABEL}={name}")).items
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        good = [
            p
            for p in live
            if p.status.phase == "Running"
            and p.metadata.labels.get(RESTART_ATTEMPT_LABEL) == str(attempt)
            and (p.metadata.annotations or {}).get(NPU)
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        ]
        return good if len(good) == 2 == len(live) else None

    return await eventually(probe, timeout_s=timeout_s, what=f"JobSet {name} attempt {attempt} Running with 2 pods")


def _agent_annotations(js: dict[str, Any]) -> dict[str, str]:
    notes = (js.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in notes.items() if k.startswith("fault-agent.io/")}


async def test_chip_fault_restarts_the_jobset_exactly_once(scenario: Scenario) -> None:
    """A chip fault under a JobSet's pod: the agent deletes the pods, the child Job fails (backoffLimit 0) and JobSet
    restarts the whole JobSet once (status.restarts and restartsCountTowardsMax 0 → 1, new pods of attempt 1); the
    agent's promise (budget_left) is JobSet's maxRestarts less its own counter, and nothing is written on the
    JobSet."""
    sc = scenario
    await sc.add_nodes(3)
    created = await _submit(sc, max_restarts=2)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await _running(sc, name, 0)
    await sc.start_agent(**ENABLED)
    bad = pods[0]
    sc.injector.chip_fault(bad.spec.node_name, [ChipFault(chip_of(bad), ("80E3A201",), "SeparateNPU")])

    (started,) = await sc.wait_events("recovery.started", for_job(uid), timeout_s=30)
    assert started["data"]["action"] == "restart-job"
    assert started["data"]["budget_left"] == 1, "JobSet grants maxRestarts 2 - restartsCountTowardsMax 0 - this one"
    (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
    assert succeeded["data"]["acted_by"] == "agent"
    new = await _running(sc, name, 1)
    assert not {p.metadata.uid for p in new} & {p.metadata.uid for p in pods}
    assert _counters(await _jobset(sc, name)) == (1, 1)

    async def once() -> bool:
        return _counters(await _jobset(sc, name)) == (1, 1)

    await holds(once, for_s=4, what="exactly one JobSet restart")
    assert len(sc.events("recovery.started", for_job(uid))) == 1
    assert _agent_annotations(await _jobset(sc, name)) == {}


async def test_no_restart_promised_past_max_restarts(scenario: Scenario) -> None:
    """maxRestarts 1: the first chip fault is restarted (JobSet's restartsCountTowardsMax 1 = maxRestarts); the next
    one is not: recovery.failed (budget-exhausted) names JobSet's numbers, and JobSet never restarts a second
    time."""
    sc = scenario
    await sc.add_nodes(4)
    created = await _submit(sc, max_restarts=1)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await _running(sc, name, 0)
    await sc.start_agent(**ENABLED)
    sc.injector.chip_fault(pods[0].spec.node_name, [ChipFault(chip_of(pods[0]), ("80E3A201",), "SeparateNPU")])
    (started,) = await sc.wait_events("recovery.started", for_job(uid), timeout_s=30)
    assert started["data"]["budget_left"] == 0
    await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
    pods = await _running(sc, name, 1)
    assert _counters(await _jobset(sc, name)) == (1, 1)

    sc.injector.chip_fault(pods[0].spec.node_name, [ChipFault(chip_of(pods[0]), ("80E3A201",), "SeparateNPU")])
    (failed,) = await sc.wait_events("recovery.failed", for_job(uid), timeout_s=30)
    assert failed["data"]["reason"] == "budget-exhausted"
    assert "maxRestarts" in failed["data"]["detail"]
    assert "restartsCountTowardsMax is 1" in failed["data"]["detail"]
    assert len(sc.events("recovery.started", for_job(uid))) == 1

    async def no_second_restart() -> bool:
        return _counters(await _jobset(sc, name))[0] == 1

    await holds(no_second_restart, for_s=4, what="JobSet not restarted past maxRestarts")


async def test_an_eviction_is_not_spent_from_the_budget(scenario: Scenario) -> None:
    """An eviction (Eviction API, as a drain does) fails the child Job by its podFailurePolicy and JobSet restarts
    the JobSet under RestartJobSetAndIgnoreMaxRestarts: restarts 1, restartsCountTowardsMax 0. The agent deletes
    nothing for it; with maxRestarts 1 a chip fault afterwards is still restarted (the budget is whole)."""
    sc = scenario
    await sc.add_nodes(4)
    created = await _submit(sc, max_restarts=1)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await _running(sc, name, 0)
    await sc.start_agent(**ENABLED)
    sc.injector.pod_evicted_by_api(sc.namespace, pods[0].metadata.name)
    pods = await _running(sc, name, 1)
    assert _counters(await _jobset(sc, name)) == (1, 0)
    assert sc.events("recovery.started", for_job(uid)) == []

    sc.injector.chip_fault(pods[0].spec.node_name, [ChipFault(chip_of(pods[0]), ("80E3A201",), "SeparateNPU")])
    (started,) = await sc.wait_events("recovery.started", for_job(uid), timeout_s=30)
    assert started["data"]["budget_left"] == 0
    await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
    await _running(sc, name, 2)
    assert _counters(await _jobset(sc, name)) == (2, 1)


async def test_observe_mode_times_a_restart_jobsets_own_policy_made(scenario: Scenario) -> None:
    """Observe mode: a pod fails by itself, its child Job fails, JobSet's failure policy restarts the JobSet; the
    agent deletes nothing and records the observed recovery (acted_by observed) and its time."""
    sc = scenario
    await sc.add_nodes(3)
    created = await _submit(sc, max_restarts=2)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await _running(sc, name, 0)
    agent = await sc.start_agent(POLICY__MODE="observe", **ENABLED)
    sc.injector.pod_failed(sc.namespace, pods[0].metadata.name, exit_code=1)
    (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
    assert succeeded["data"]["acted_by"] == "observed"
    total = succeeded["data"]["durations"]["total_s"]
    # within the agent's own span from the first failure's signal time to its success event (issue 40); the
    # job's events share one partition, so its fault.detected events were read before recovery.succeeded
    first = min((e["data"]["fault"]["signal_time"] for e in sc.events("fault.detected", for_job(uid))), key=event_time)
    assert 0 < total <= recovery_span_s(first, succeeded) + 0.01
    assert _counters(await _jobset(sc, name)) == (1, 1)
    await _running(sc, name, 1)

    async def sampled() -> bool:
        return agent.metric("fault_agent_recovery_seconds_count", acted_by="observed", outcome="recovered") == 1

    await eventually(sampled, timeout_s=10, what="one observed recovery-time sample")
    assert agent.metric("fault_agent_actions_total", action="restart-job", result="done") == 0
