"""The guide's Volcano Job recovering from hardware faults, with the whole agent as a subprocess.

Each test: fresh nodes, the guide's job Running on two of them, the agent started, one fault injected as
MindCluster's components write it; then the test checks like an operator would: Kafka events (validated against
the agent's JSON Schemas), /metrics, and the cluster's own objects (Commands, the job's status, pods, nodes).
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import (
    NPU,
    VC,
    event_time,
    eventually,
    fault_chip,
    get_job,
    guide_vcjob,
    holds,
    job_record,
    job_version,
    live_pods,
    record_commands,
    record_pods,
    recovery_span_s,
    restart_by_command,
    restart_commands,
    submit,
    taints,
    wait_running,
)
from kubernetes_asyncio import client as k8s

from agent.core.incidents import decode_ledger
from agent.core.records import KEY_LEDGER
from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e


async def _guide_job_running(sc: Scenario, **labels: str) -> tuple[str, str, list[Any], int]:
    """Four nodes, the guide's job Running on two of them; returns (name, uid, pods, status.version)."""
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, labels=labels), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    return name, uid, pods, job_version(await get_job(sc.api, sc.namespace, name))


async def _one_restart_off(sc: Scenario, name: str, uid: str, pods: list[Any], version: int, bad_node: str) -> Any:
    """Common checks after a fault that must restart the job once and move it off `bad_node`: the new pods run
    on other nodes, exactly one RestartJob Command, status.version + 1, a recovery.succeeded event. Returns the
    recovery.succeeded event."""
    old_uids = {p.metadata.uid for p in pods}
    new_pods = await wait_running(sc.api, sc.namespace, name, not_uids=old_uids, timeout_s=60)
    assert bad_node not in {p.spec.node_name for p in new_pods}, "a new pod was placed on the faulty node"
    assert len({p.spec.node_name for p in new_pods}) == 2
    (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
    assert job_version(await get_job(sc.api, sc.namespace, name)) == version + 1
    return succeeded


async def test_chip_fault_restarts_the_guides_job_once_off_the_faulty_node(scenario: Scenario) -> None:
    sc = scenario
    name, uid, pods, version = await _guide_job_running(sc)
    agent = await sc.start_agent()
    commands = await record_commands(sc.api, sc.namespace)
    try:
        bad = pods[0]
        bad_node = bad.spec.node_name
        chip = fault_chip(sc, bad, index=3)

        (detected,) = await sc.wait_events("fault.detected", for_job(uid))
        fault = detected["data"]["fault"]
        assert (fault["kind"], fault["level"], fault["node"]) == ("chip", "SeparateNPU", bad_node)
        assert fault["chips"] == [f"Ascend910-{chip}"]
        assert fault["codes"] == ["80E3A201"]
        assert fault["check_code_ok"] is True  # the injector's CheckCode encoder agrees with the agent's verifier
        assert detected["partitionkey"] == uid

        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-job"
        succeeded = await _one_restart_off(sc, name, uid, pods, version, bad_node)
        assert succeeded["data"]["incident_id"] == started["data"]["incident_id"]
        durations = succeeded["data"]["durations"]
        # within the agent's own span from the fault's signal time to its success event (issue 40: not the test's
        # stopwatch, which counts the consumer's delay)
        assert 0 < durations["total_s"] <= recovery_span_s(fault["signal_time"], succeeded) + 0.01
        assert durations["total_s"] >= durations["reschedule_s"]

        assert len(restart_commands(commands, name)) == 1
        (cmd,) = restart_commands(commands, name)
        assert cmd["target"]["uid"] == uid
        # A storm does not follow: no second Command and no second version bump while the agent keeps watching.
        await holds(lambda: _still_one(sc, commands, name, version + 1), for_s=3, what="one Command, version + 1")
        assert agent.metric("fault_agent_recovery_seconds_count", job_kind="vcjob", outcome="recovered") == 1
        assert agent.metric("fault_agent_recovery_seconds_sum", job_kind="vcjob") > 0
        assert agent.metric("fault_agent_actions_total", action="restart-job", result="done") == 1
        assert agent.metric("fault_agent_faults_total", kind="chip", level="SeparateNPU", source="device-plugin") == 1
    finally:
        await commands.stop()


def _retry_count(job: Any) -> int:
    return int((job.get("status") or {}).get("retryCount", 0))


def _killed_after_created(pods: Any) -> dict[str, str]:
    """UID → ``volcano.sh/job-version`` of each pod ADDED on the `pods` recorder that was deleted (a
    deletionTimestamp or DELETED) afterwards."""
    created = {
        o["metadata"]["uid"]: (o["metadata"].get("annotations") or {}).get("volcano.sh/job-version", "")
        for kind, o in pods.events
        if kind == "ADDED"
    }
    killed = {
        o["metadata"]["uid"] for kind, o in pods.events if kind == "DELETED" or o["metadata"].get("deletionTimestamp")
    }
    return {uid: version for uid, version in created.items() if uid in killed}


async def test_by_default_the_guides_job_is_restarted_by_pod_deletion_counted_once_by_volcano(
    scenario: Scenario,
) -> None:
    """The default ``policy.volcano_restart: auto`` restarts the guide's job (``PodEvicted → RestartJob``) by
    deleting its pods, as MindCluster's plugin does, and sends no Command. Two faults, two restarts: Volcano's
    ``status.retryCount`` and ``status.version`` grow by exactly one per restart, the agent's ledger counts the
    same two, and no restart happens twice: no pod of a restart's new version is ever killed, and a pod Volcano
    created after a fault and then killed carries the old version (its controller re-syncing the deleted pods
    before its ``PodEvicted`` request ran, killed by that same restart: docs/mindcluster-parity.md)."""
    sc = scenario
    name, uid, pods, version = await _guide_job_running(sc)
    retries = _retry_count(await get_job(sc.api, sc.namespace, name))
    agent = await sc.start_agent(POLICY__VOLCANO_RESTART="auto")
    commands = await record_commands(sc.api, sc.namespace)
    pod_events = await record_pods(sc.api, sc.namespace)
    try:
        seen: set[str] = set()
        for n in (1, 2):
            seen |= {p.metadata.uid for p in pods}
            bad = pods[0]
            fault_chip(sc, bad)
            started = await sc.wait_events("recovery.started", for_job(uid), count=n)
            assert started[-1]["data"]["action"] == "restart-job"
            await sc.wait_events("recovery.succeeded", for_job(uid), count=n, timeout_s=60)
            pods = await wait_running(sc.api, sc.namespace, name, not_uids=seen, timeout_s=60)
            job = await get_job(sc.api, sc.namespace, name)
            assert (_retry_count(job), job_version(job)) == (retries + n, version + n), "Volcano's count"
            sc.injector.chip_healthy(bad.spec.node_name)

        assert restart_commands(commands, name) == [], "the default restarted the guide's job with a Command"
        assert agent.metric("fault_agent_actions_total", action="restart-job", result="done") == 2
        record = await job_record(sc.api, sc.namespace, await get_job(sc.api, sc.namespace, name))
        assert decode_ledger(record[KEY_LEDGER]).restarts_used == 2, "the agent's ledger and Volcano's count differ"

        newest = {p.metadata.uid for p in pods}

        async def settled() -> bool:
            job = await get_job(sc.api, sc.namespace, name)
            live = {p.metadata.uid for p in await live_pods(sc.api, sc.namespace, f"volcano.sh/job-name={name}")}
            return (_retry_count(job), job_version(job)) == (retries + 2, version + 2) and live == newest

        await holds(settled, for_s=3, what="no third restart: the count and the pods stay")
        # Restart 1 kills the pods of version+1 it made; a pod of version+2 killed is a third restart's doing.
        killed = _killed_after_created(pod_events)
        assert set(killed.values()) <= {str(version), str(version + 1)}, f"a pod of the last version killed: {killed}"
        assert not newest & set(killed), "a running pod of the last restart was killed"
    finally:
        await commands.stop()
        await pod_events.stop()


async def test_a_job_running_on_pods_older_than_its_version_is_restarted_once_and_counted(
    scenario: Scenario,
) -> None:
    """Issue 39: a guide's job whose pods all carry a ``volcano.sh/job-version`` below its ``status.version`` (pods
    that survived a restart under the old version: a sync re-created them before that restart's ``killJob``, which
    did not see them yet) is restarted once, and Volcano counts it: ``status.retryCount`` and ``status.version``
    +1. Deleting those pods, as ``auto`` does for this job otherwise, is an outdated request to Volcano, only a sync
    (pods re-created, nothing counted; the agent then waited for a restart counter that never moved): the agent
    sends a RestartJob Command instead. The state is built deterministically: one restart by the test's own
    Command, then the new pods' annotation set back to the old version."""
    sc = scenario
    name, uid, pods, _ = await _guide_job_running(sc)
    await restart_by_command(sc, name, uid, reason="e2e", name=f"{name}-test")  # the test's own, not the agent's
    pods = await wait_running(sc.api, sc.namespace, name, not_uids={p.metadata.uid for p in pods}, timeout_s=60)
    job = await get_job(sc.api, sc.namespace, name)
    version, retries = job_version(job), _retry_count(job)
    assert version >= 1
    core = k8s.CoreV1Api(sc.api)
    for p in pods:
        older = {"metadata": {"annotations": {"volcano.sh/job-version": str(version - 1)}}}
        await core.patch_namespaced_pod(p.metadata.name, sc.namespace, older)
    agent = await sc.start_agent(POLICY__VOLCANO_RESTART="auto")
    commands = await record_commands(sc.api, sc.namespace)
    try:
        bad = pods[0]
        fault_chip(sc, bad)
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-job"

        async def counted() -> bool:
            job = await get_job(sc.api, sc.namespace, name)
            return (_retry_count(job), job_version(job)) == (retries + 1, version + 1)

        await eventually(counted, timeout_s=30, what="Volcano counted the restart: retryCount and version + 1")
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
        agents = [c for c in restart_commands(commands, name) if c["metadata"]["name"] != f"{name}-test"]
        assert len(agents) == 1, "the agent's restart of a job on outdated pods is one RestartJob Command"
        await holds(counted, for_s=3, what="no second restart: the count stays")
        assert agent.metric("fault_agent_actions_total", action="restart-job", result="done") == 1
    finally:
        await commands.stop()


async def _still_one(sc: Scenario, commands: Any, name: str, version: int) -> bool:
    job = await get_job(sc.api, sc.namespace, name)
    return len(restart_commands(commands, name)) == 1 and job_version(job) == version


async def test_noded_unhealthy_node_restarts_the_job_off_that_node(scenario: Scenario) -> None:
    sc = scenario
    name, uid, pods, version = await _guide_job_running(sc)
    agent = await sc.start_agent(POLICY__TAINT_KEY=f"e2e.fault-agent.io/{sc.tag}")
    commands = await record_commands(sc.api, sc.namespace)
    try:
        bad_node = pods[1].spec.node_name
        sc.injector.node_fault(bad_node, "SeparateFault", ("00000011",))

        (detected,) = await sc.wait_events("fault.detected", for_job(uid))
        fault = detected["data"]["fault"]
        assert (fault["kind"], fault["level"], fault["node"], fault["codes"]) == (
            "node",
            "SeparateFault",  # NodeD's own level name (issue 36, 13); the taint keeps the chip vocabulary
            bad_node,
            ["00000011"],
        )
        await _one_restart_off(sc, name, uid, pods, version, bad_node)
        assert len(restart_commands(commands, name)) == 1
        # A node-level SeparateFault also quarantines the node, with the configured taint key.
        assert (f"e2e.fault-agent.io/{sc.tag}", "SeparateNPU", "NoSchedule") in await taints(sc.api, bad_node)
        assert agent.metric("fault_agent_recovery_seconds_count", fault_kind="node", outcome="recovered") == 1
        # NodeD deletes its ConfigMap when the node is healthy again: one fault.cleared (schema-checked), by node
        sc.injector.node_fault_cleared(bad_node)
        (cleared,) = await sc.wait_events("fault.cleared", lambda e: e["data"]["fault"]["node"] == bad_node)
        assert cleared["data"]["fault"]["kind"] == "node"
        assert cleared["data"]["fault_duration_s"] >= 0
    finally:
        await commands.stop()


async def test_node_not_ready_restarts_within_seconds(scenario: Scenario) -> None:
    """Kubernetes alone notices a dead node after 40 s and evicts its pods 300 s later; the agent restarts the
    job once the NotReady grace (detect.node_not_ready_grace_s, 5 s by default) is over."""
    sc = scenario
    name, uid, pods, version = await _guide_job_running(sc)
    await sc.start_agent()
    commands = await record_commands(sc.api, sc.namespace)
    try:
        bad_node = pods[0].spec.node_name
        sc.injector.node_not_ready(bad_node)
        (started,) = await sc.wait_events("recovery.started", for_job(uid), timeout_s=30)
        node_faults = [f for f in started["data"]["faults"] if f["kind"] == "node"]
        assert [f["node"] for f in node_faults] == [bad_node]
        # from the node's Ready transition (its condition's lastTransitionTime, the fault's signal time) to the
        # agent's clock as it restarts the job: both from the cluster and the agent, not the test's stopwatch
        waited = (event_time(started["time"]) - event_time(node_faults[0]["signal_time"])).total_seconds()
        assert waited < 15, f"restart issued {waited:.1f} s after the node went NotReady"
        await _one_restart_off(sc, name, uid, pods, version, bad_node)
        assert len(restart_commands(commands, name)) == 1
    finally:
        await commands.stop()
        sc.injector.node_ready(bad_node)


async def test_training_failures_spend_fault_retry_times_then_recovery_fails(scenario: Scenario) -> None:
    """fault-retry-times=3 (the guide's label): three business failures give three restarts; the fourth is
    reported as recovery failed (budget exhausted). maxRetry is raised to 10 so that Volcano's own restart limit
    (which also counts these restarts) is not what ends the job."""
    sc = scenario
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, max_retry=10), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    assert created["metadata"]["labels"]["fault-retry-times"] == "3"
    pods = await wait_running(sc.api, sc.namespace, name)
    agent = await sc.start_agent()
    commands = await record_commands(sc.api, sc.namespace)
    try:
        seen: set[str] = set()
        for attempt in (1, 2, 3):
            seen |= {p.metadata.uid for p in pods}
            sc.injector.pod_failed(sc.namespace, pods[0].metadata.name, exit_code=137)
            started = await sc.wait_events("recovery.started", for_job(uid), count=attempt)
            assert started[-1]["data"]["budget_left"] == 3 - attempt
            await sc.wait_events("recovery.succeeded", for_job(uid), count=attempt, timeout_s=40)
            pods = await wait_running(sc.api, sc.namespace, name, not_uids=seen)
            assert len(restart_commands(commands, name)) == attempt

        sc.injector.pod_failed(sc.namespace, pods[0].metadata.name, exit_code=137)
        (failed,) = await sc.wait_events("recovery.failed", for_job(uid))
        assert failed["data"]["reason"] == "budget-exhausted"
        assert agent.metric("fault_agent_retry_budget_exhausted_total", job_kind="vcjob") == 1
        await holds(lambda: _commands_are(commands, name, 3), for_s=3, what="no fourth restart")
    finally:
        await commands.stop()


async def _commands_are(commands: Any, name: str, n: int) -> bool:
    return len(restart_commands(commands, name)) == n


async def test_preseparate_chip_fault_is_reported_and_the_job_left_running(scenario: Scenario) -> None:
    sc = scenario
    name, uid, pods, version = await _guide_job_running(sc)
    agent = await sc.start_agent()
    commands = await record_commands(sc.api, sc.namespace)
    try:
        bad = pods[0]
        fault_chip(sc, bad, level="PreSeparateNPU")
        (detected,) = await sc.wait_events("fault.detected", for_job(uid))
        assert detected["data"]["fault"]["level"] == "PreSeparateNPU"
        uids = {p.metadata.uid for p in pods}

        async def untouched() -> bool:
            job = await get_job(sc.api, sc.namespace, name)
            live = {p.metadata.uid for p in await live_pods(sc.api, sc.namespace, f"volcano.sh/job-name={name}")}
            return not restart_commands(commands, name) and job_version(job) == version and live == uids

        await holds(untouched, for_s=4, what="the running job left alone")
        assert not sc.events("recovery.", for_job(uid))
        assert agent.metric("fault_agent_actions_total", action="restart-job") == 0
    finally:
        await commands.stop()


async def test_a_fault_on_a_new_pod_that_joined_the_open_incident_restarts_the_job_again_once_it_closes(
    scenario: Scenario,
) -> None:
    """Issue 13 A.1. Three replicas, minAvailable 2, force mode. A chip fault restarts the job; only two nodes are
    left with eight free chips, so one new pod stays Pending and the incident stays open. A chip fault on the node
    of a new, Running pod joins that incident. Once a node is added the Pending pod runs and the incident closes
    as recovered: the joined fault is still active on the job's pod, so the job is restarted again, off that
    chip, at once (it used to keep running on the faulty chip until the agent was restarted)."""
    sc = scenario
    first_nodes = await sc.add_nodes(3)
    cm, job = guide_vcjob(sc.namespace, sc.tag)
    job["spec"]["tasks"][0]["replicas"] = 3
    assert job["spec"]["minAvailable"] == 2
    created = await submit(sc.api, (cm, job), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name, count=3)
    await sc.start_agent()
    commands = await record_commands(sc.api, sc.namespace)
    selector = f"volcano.sh/job-name={name}"
    try:
        node_a = pods[0].spec.node_name
        sc.injector.chip_fault(node_a, [ChipFault(3, ("80E3A201",), "SeparateNPU")])
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        first_incident = started["data"]["incident_id"]
        old_uids = {p.metadata.uid for p in pods}

        async def two_running_one_pending() -> list[Any] | None:
            live = [p for p in await live_pods(sc.api, sc.namespace, selector) if p.metadata.uid not in old_uids]
            running = [p for p in live if p.status.phase == "Running" and (p.metadata.annotations or {}).get(NPU)]
            pending = [p for p in live if p.status.phase == "Pending" and not p.spec.node_name]
            return running if len(live) == 3 and len(running) == 2 and len(pending) == 1 else None

        running = await eventually(two_running_one_pending, timeout_s=60, what="two new pods Running, one Pending")
        node_b = running[0].spec.node_name
        assert node_b != node_a
        assert node_b in first_nodes
        sc.injector.chip_fault(node_b, [ChipFault(5, ("80E3A201",), "SeparateNPU")])
        await sc.wait_events(
            "fault.detected",
            lambda e: (
                for_job(uid)(e) and e["data"]["fault"]["node"] == node_b and e["data"]["incident_id"] == first_incident
            ),
        )
        assert len(restart_commands(commands, name)) == 1  # joined the open incident: no second restart yet

        await sc.add_nodes(2)  # the Pending pod gets a node: the first incident closes as recovered
        (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
        assert succeeded["data"]["incident_id"] == first_incident
        starts = await sc.wait_events("recovery.started", for_job(uid), count=2, timeout_s=20)
        second = starts[-1]["data"]
        assert second["incident_id"] != first_incident
        assert any(f["node"] == node_b and f["chips"] == ["Ascend910-5"] for f in second["faults"])

        async def two_commands() -> bool:  # the Command follows its recovery.started event
            return len(restart_commands(commands, name)) == 2

        await eventually(two_commands, timeout_s=10, what="a second RestartJob Command")
        seen = old_uids | {p.metadata.uid for p in await live_pods(sc.api, sc.namespace, selector)}
        moved = await wait_running(sc.api, sc.namespace, name, count=3, not_uids=seen, timeout_s=60)
        assert not {p.spec.node_name for p in moved} & {node_a, node_b}, "a pod was placed on a faulty node"
    finally:
        await commands.stop()
