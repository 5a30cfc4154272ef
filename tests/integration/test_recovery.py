"""The whole recovery path in-process on the testbed: watch → detect → correlate → policy → incidents → actions.

Each test runs `agent.runtime.app.run_agent` against the real apiserver, watching only the test's namespace, with a
short Lease so fail-over fits in a test. Kafka is off here (events have their own tests). The testbed's Volcano
controller runs and takes the agent's Commands, so tests count Commands with a recorder (every one ever created)
and play the controller themselves where a job must come back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from actions_support import (
    CommandRecorder,
    delete_device_info,
    delete_node,
    job_record,
    make_job,
    make_job_pod,
    make_node,
    pods_by_name,
    put_device_info,
)
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from support.polling import cancel_and_wait, eventually

from agent.actions.breaker_store import read_breaker_state, reset_breaker
from agent.core.cluster import JobKind, JobRef
from agent.core.incidents import Phase, decode_incident
from agent.core.records import KEY_INCIDENT
from agent.engine.recovery import RecoveryEngine
from agent.runtime.app import run_agent
from agent.settings import Settings

pytestmark = pytest.mark.integration
SEPARATE = ("SeparateNPU", "80E01801")
MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}


def _settings(testbed: Any, namespace: str, **policy: Any) -> Settings:
    return Settings.model_validate(
        {
            "cluster_name": "it",
            "kube": {"kubeconfig": str(testbed.kubeconfig), "namespaces": [namespace]},
            "kafka": {"enabled": False},
            "server": {"port": 0},
            "leader": {
                "namespace": namespace,
                "lease_duration_s": 3,
                "renew_deadline_s": 2,
                "retry_period_s": 0.2,
            },
            "policy": {"restart_burst": 20, "restart_rate_per_min": 600, **policy},
        }
    )


@contextlib.asynccontextmanager
async def running_agent(settings: Settings, identity: str = "agent-a") -> AsyncIterator[tuple[RecoveryEngine, Any]]:
    """Run the agent until the block ends; yields (engine, task). Waits until its caches are synced.

    The agent runs as the testbed's admin (or a test's own ServiceAccount) whom no admission policy confines, so
    ``policy.admission_check`` is ``warn`` unless the settings name it (fail closed would refuse every restart)."""
    if "admission_check" not in settings.policy.model_fields_set:
        settings = settings.model_copy(
            update={"policy": settings.policy.model_copy(update={"admission_check": "warn"})}
        )
    stop = asyncio.Event()
    engines: list[RecoveryEngine] = []
    task = asyncio.create_task(run_agent(settings, stop, identity=identity, on_engine=engines.append), name=identity)

    async def synced() -> bool:
        if task.done():
            task.result()  # surface a crash at once
        return bool(engines) and engines[0].state.ready

    await eventually(synced, bool, what=f"{identity} synced", timeout_s=30)
    try:
        yield engines[0], task
    finally:
        stop.set()
        # bounded twice: wait_for's cancellation after its timeout waits for the task without a bound
        done, _ = await asyncio.wait({task}, timeout=20)
        if not done:
            await cancel_and_wait(task, what=f"agent {identity}, stopped and not ending within 20 s,")
        elif not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


@pytest.fixture
async def nodes(kube_client: k8s.ApiClient) -> AsyncIterator[Callable[[int], Any]]:
    made: list[str] = []

    async def make(n: int) -> list[str]:
        names = [await make_node(kube_client) for _ in range(n)]
        made.extend(names)
        return names

    yield make
    for name in made:
        await delete_device_info(kube_client, name)
        await delete_node(kube_client, name)


async def _job_with_pods(
    api: k8s.ApiClient, namespace: str, name: str, kind: JobKind, node: str, *, labels: dict[str, str]
) -> JobRef:
    job = await make_job(api, namespace, name, kind, labels=labels)
    for i in range(2):
        await make_job_pod(api, job, i, node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}")
    await eventually(
        lambda: pods_by_name(api, namespace),
        lambda pods: (
            sum(1 for p in pods.values() if p.status.phase == "Running" and p.metadata.name.startswith(name)) == 2
        ),
        what=f"{name} pods Running",
    )
    return job


async def _incident(api: k8s.ApiClient, job: JobRef) -> Any:
    """The incident in the job's record (the agent's namespace is the job's here: leader.namespace)."""
    text = (await job_record(api, job.namespace, job)).get(KEY_INCIDENT)
    return None if text is None else decode_incident(text)


async def test_volcano_chip_fault_and_a_burst_make_exactly_one_restart_command(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any
) -> None:
    (node,) = await nodes(1)
    job = await _job_with_pods(
        kube_client, namespace, "vc", JobKind.VOLCANO, node, labels={"fault-scheduling": "force"}
    )
    async with (
        CommandRecorder(kube_client, namespace) as rec,
        running_agent(_settings(testbed, namespace)) as (engine, _),
    ):
        # Two chips of the job fail in one device-plugin update: the second fault is handled right after the first
        # opened the incident, while the job's pods still exist, so it joins that incident (a later fault may find
        # the pods already gone: the Volcano controller takes the Command and the force follow-up deletes them).
        await put_device_info(kube_client, node, {"Ascend910-1": SEPARATE, "Ascend910-2": ("SeparateNPU", "80E01802")})
        commands = await eventually(rec.count, lambda c: len(c) >= 1, what="a RestartJob Command")
        # a burst of 20 more faults on the same job's chips while it is restarting
        for i in range(20):
            chip = f"Ascend910-{i % 4}"
            await put_device_info(kube_client, node, {chip: ("SeparateNPU", f"80E0{1800 + i:04X}")})
        await asyncio.sleep(3)
        commands = await rec.count()
        assert len(commands) == 1
        assert commands[0]["action"] == "RestartJob"
        assert commands[0]["target"]["uid"] == job.uid
        incident = await _incident(kube_client, job)
        assert incident is not None
        assert incident.phase is Phase.RESTARTING
        joined = engine.store.incident(job.uid)
        assert joined is not None
        assert joined.fault_count >= 2  # the burst joined the open incident (kept in memory, not re-persisted)
        assert engine.store.ledger(job.uid).restarts_used == 1


async def test_ascend_job_pods_deleted_at_once(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any
) -> None:
    (node,) = await nodes(1)
    await _job_with_pods(kube_client, namespace, "ac", JobKind.ASCEND, node, labels={"fault-scheduling": "force"})
    async with CommandRecorder(kube_client, namespace) as rec, running_agent(_settings(testbed, namespace)):
        await put_device_info(kube_client, node, {"Ascend910-2": SEPARATE})
        # pods have terminationGracePeriodSeconds 30: gone within seconds only with grace 0
        await eventually(
            lambda: pods_by_name(kube_client, namespace), lambda p: not p, what="pods deleted", timeout_s=8
        )
        assert await rec.count() == []


async def test_dry_run_writes_nothing(testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any) -> None:
    (node,) = await nodes(1)
    job = await _job_with_pods(
        kube_client, namespace, "dr", JobKind.VOLCANO, node, labels={"fault-scheduling": "force"}
    )
    core = k8s.CoreV1Api(kube_client)

    async def versions() -> dict[str, str]:
        out = {
            p.metadata.name: p.metadata.resource_version for p in (await pods_by_name(kube_client, namespace)).values()
        }
        out["node"] = (await core.read_node(node)).metadata.resource_version
        obj = await k8s.CustomObjectsApi(kube_client).get_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", namespace, "jobs", "dr"
        )
        out["job"] = obj["metadata"]["resourceVersion"]
        return out

    async with (
        CommandRecorder(kube_client, namespace) as rec,
        running_agent(_settings(testbed, namespace, dry_run=True)) as (engine, _),
    ):
        before = await versions()
        await put_device_info(kube_client, node, {"Ascend910-0": SEPARATE})
        await eventually(
            lambda: asyncio.sleep(0, engine.decisions),
            lambda d: any(j.uid == job.uid and dec.restarts for _, j, dec in d),
            what="a restart decision",
        )
        await asyncio.sleep(2)
        assert await rec.count() == []
        after = await versions()
    assert {k: v for k, v in after.items() if k != "node"} == {k: v for k, v in before.items() if k != "node"}


async def test_breaker_trips_when_30_percent_of_nodes_fail(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any
) -> None:
    made = await nodes(10)
    total = len((await k8s.CoreV1Api(kube_client).list_node()).items)
    failing = made[: max(3, int(0.3 * total))]
    assert len(failing) > 0.2 * total
    for i, node in enumerate(failing):
        await _job_with_pods(
            kube_client, namespace, f"b{i}", JobKind.VOLCANO, node, labels={"fault-scheduling": "force"}
        )
    settings = _settings(testbed, namespace)
    async with CommandRecorder(kube_client, namespace) as rec, running_agent(settings) as (engine, _):
        for node in failing:  # all at once
            await put_device_info(kube_client, node, {"Ascend910-0": SEPARATE})
        await eventually(lambda: asyncio.sleep(0, engine.breaker.is_open), bool, what="breaker open")
        await asyncio.sleep(2)
        commands = await rec.count()
        # the breaker trips on the k-th faulty node with k > 20% of the nodes: at most k-1 restarts before it
        assert len(commands) <= int(0.2 * total)
        state = await eventually(
            lambda: read_breaker_state(k8s.CoreV1Api(kube_client), settings),
            lambda d: d is not None and d.get("state") == "open",
            what="breaker ConfigMap open",
        )
        assert state is not None
        assert "watched nodes" in state["reason"]
        # a person resets it; the agent follows within a few ticks
        await reset_breaker(k8s.CoreV1Api(kube_client), settings, by="test", now=datetime.now(UTC))
        await eventually(lambda: asyncio.sleep(0, engine.breaker.is_open), lambda o: not o, what="closed", timeout_s=10)


async def test_only_the_leader_writes_and_the_standby_finishes_without_a_second_restart(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any
) -> None:
    (node,) = await nodes(1)
    job = await _job_with_pods(
        kube_client, namespace, "lf", JobKind.VOLCANO, node, labels={"fault-scheduling": "force"}
    )
    settings = _settings(testbed, namespace)
    async with (
        CommandRecorder(kube_client, namespace) as rec,
        running_agent(settings, "agent-a") as (leader, leader_task),
    ):
        await eventually(lambda: asyncio.sleep(0, leader.is_leader()), bool, what="agent-a leads")
        async with running_agent(settings, "agent-b") as (standby, _):
            await _fail_over(kube_client, namespace, node, job, leader, leader_task, standby, rec)


async def _fail_over(
    kube_client: k8s.ApiClient,
    namespace: str,
    node: str,
    job: JobRef,
    leader: RecoveryEngine,
    leader_task: Any,
    standby: RecoveryEngine,
    rec: CommandRecorder,
) -> None:
    if True:
        assert not standby.is_leader()
        await put_device_info(kube_client, node, {"Ascend910-0": SEPARATE})
        await eventually(rec.count, lambda c: len(c) == 1, what="one Command")
        await eventually(
            lambda: _incident(kube_client, job),
            lambda i: i is not None and i.phase is Phase.RESTARTING,
            what="restarting",
        )
        assert standby.store.open_incidents() == []  # the standby acted on nothing
        # the leader crashes mid-incident (no Lease release); bounded: an agent that does not end fails here
        await cancel_and_wait(leader_task, what="the cancelled leader agent-a")
        await eventually(lambda: asyncio.sleep(0, standby.is_leader()), bool, what="standby takes over", timeout_s=10)
        # the controller (played here) restarts the job: new version, new pods Running
        custom = k8s.CustomObjectsApi(kube_client)
        await custom.patch_namespaced_custom_object_status(
            "batch.volcano.sh", "v1alpha1", namespace, "jobs", "lf",
            {"status": {"state": {"phase": "Running"}, "version": 1}},
            **MERGE,
        )  # fmt: skip
        core = k8s.CoreV1Api(kube_client)
        for i in range(2):
            try:
                await core.delete_namespaced_pod(f"lf-worker-{i}", namespace, grace_period_seconds=0)
            except ApiException as e:  # a real Volcano controller may have got there first
                if e.status != 404:
                    raise
        await eventually(lambda: pods_by_name(kube_client, namespace), lambda p: not p, what="old pods gone")
        for i in range(2):
            await make_job_pod(kube_client, job, i, node)
        incident = await eventually(
            lambda: _incident(kube_client, job),
            lambda i: i is not None and i.phase is Phase.RECOVERED,
            what="recovered by the new leader",
            timeout_s=20,
        )
        assert len(await rec.count()) == 1  # no second restart
        assert incident.recovery_seconds is not None
        assert incident.at(Phase.DETECTED) <= incident.at(Phase.ACTING)  # counted from the original fault
        assert leader.store.ledger(job.uid).restarts_used == 1
