"""The agent's guards on the testbed (issue 13 B): the circuit breaker after a restart and in dry-run, and what
the agent says about a job's inputs (a restart policy other than Never).

Each test runs `agent.runtime.app.run_agent` in-process against the real apiserver (helpers of test_recovery), with
nodes and ConfigMaps of its own; the breaker ConfigMap lives in the test's namespace (``leader.namespace``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from actions_support import make_job, make_job_pod, pods_by_name, put_device_info
from kubernetes_asyncio import client as k8s
from structlog.testing import capture_logs
from support.polling import eventually
from test_recovery import _incident, _settings, running_agent

from agent.actions.breaker_store import read_breaker_state, reset_breaker
from agent.core.cluster import JobKind
from testbed.cluster import Testbed
from testbed.inject import Injector

pytestmark = pytest.mark.integration
SEPARATE = ("SeparateNPU", "80E01801")
TAINT_KEY = "fault-agent.io/fault"


@pytest.fixture
def kwok_nodes(testbed: Testbed) -> Iterator[Any]:
    """Makes kwok nodes (healthy device ConfigMaps) for a test; deletes them and their ConfigMaps afterwards."""
    inj = Injector(testbed.rest())
    made: list[str] = []

    def make(n: int) -> list[str]:
        names = [f"guard-{uuid.uuid4().hex[:6]}-{i}" for i in range(n)]
        inj.add_nodes(names)
        made.extend(names)
        return names

    yield make
    inj.delete_nodes(made)


def _handled_nodes(engine: Any) -> set[str]:
    """Nodes of the faults the engine has handled while leading (fault identity: (key, pod, level, time))."""
    return {ident[0][1] for ident in engine.deciding.handled}


async def test_standing_faults_read_at_start_do_not_trip_the_breaker(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, kwok_nodes: Any
) -> None:
    """Issue 13 B4: on start every active fault is read again; the breaker counted them at the time they were
    read, so faults 7 and 20 minutes old tripped a 300 s window. They count at their own signal time now, and
    faults that really are new still trip it."""
    old = kwok_nodes(2)
    new = kwok_nodes(2)
    now_ms = int(time.time() * 1000)
    for node, age_min in zip(old, (20, 7), strict=True):
        await put_device_info(kube_client, node, {"Ascend910-0": SEPARATE}, fault_time_ms=now_ms - age_min * 60_000)
    # any two faulty nodes within the window are more than the share: the breaker trips on the second one
    settings = _settings(testbed, namespace, breaker_node_share=0.001, breaker_min_faulty_nodes=2, breaker_window_s=300)
    async with running_agent(settings) as (engine, _):
        await eventually(
            lambda: asyncio.sleep(0, _handled_nodes(engine)),
            lambda handled: set(old) <= handled,
            what="both standing faults handled",
        )
        await asyncio.sleep(1.5)  # a tick or two
        assert not engine.breaker.is_open, engine.breaker.trip
        assert engine.breaker.faulty_in_window(time.time()) == ()
        for node in new:  # two nodes that really turn faulty now
            await put_device_info(kube_client, node, {"Ascend910-0": SEPARATE})
        await eventually(lambda: asyncio.sleep(0, engine.breaker.is_open), bool, what="breaker open on new faults")
        trip = engine.breaker.trip
        assert trip is not None
        assert set(new) <= set(trip.faulty_nodes)
        assert not set(old) & set(trip.faulty_nodes), trip.faulty_nodes


async def test_dry_run_keeps_its_breaker_and_says_would_set_taint_once(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, kwok_nodes: Any
) -> None:
    """Issue 13 B6: in dry-run the breaker ConfigMap is not written, so the agent read the ``closed`` state an
    earlier reset had left and logged ``circuit breaker reset by a person`` 1.6 s after it tripped; and it said
    ``would set taint`` about once a second. Now the tripped breaker stays open in memory until a person really
    resets it, and each node's would-be taint is said once."""
    settings = _settings(
        testbed, namespace, dry_run=True, breaker_node_share=0.001, breaker_min_faulty_nodes=2, breaker_window_s=300
    )
    core = k8s.CoreV1Api(kube_client)
    await reset_breaker(core, settings, by="earlier", now=datetime.now(UTC))  # the ConfigMap says closed
    nodes = kwok_nodes(2)
    inj = Injector(testbed.rest())
    with capture_logs() as logs:
        async with running_agent(settings) as (engine, _):
            await eventually(lambda: asyncio.sleep(0, engine.is_leader()), bool, what="the agent leads")
            for node in nodes:  # NodeD: SeparateFault quarantines the node and feeds the breaker
                inj.node_fault(node, "SeparateFault")
            await eventually(lambda: asyncio.sleep(0, engine.breaker.is_open), bool, what="breaker open")
            # the ConfigMap is read every 5 s and taints are reconciled every second: give both a few rounds
            await asyncio.sleep(11)
            assert engine.breaker.is_open, "the dry-run breaker closed without a reset"
            resets = [e for e in logs if e.get("event") == "circuit breaker reset by a person"]
            assert resets == []
            would = [
                e["target"] for e in logs if e.get("event") == "dry-run: write skipped" and e.get("action") == "taint"
            ]
            assert sorted(would) == sorted(f"Node/{n}" for n in nodes), would
            data = await read_breaker_state(core, settings)
            assert data is not None
            assert (data["state"], data.get("reset_by")) == ("closed", "earlier")
            for node in nodes:  # dry-run wrote nothing
                taints = (await core.read_node(node)).spec.taints or []
                assert not [t for t in taints if t.key == TAINT_KEY]
            # a person's reset still closes it
            await reset_breaker(core, settings, by="oncall", now=datetime.now(UTC))
            await eventually(
                lambda: asyncio.sleep(0, engine.breaker.is_open), lambda o: not o, what="closed by a person"
            )
    resets = [e for e in logs if e.get("event") == "circuit breaker reset by a person"]
    assert [e.get("by") for e in resets] == ["oncall"]


async def test_a_failing_container_in_a_running_on_failure_pod_is_explained(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, kwok_nodes: Any
) -> None:
    """Issue 13 B12: with ``restartPolicy: OnFailure`` a container that exits non-zero leaves its pod Running
    (the kubelet restarts the container); the agent restarted the whole job and said nothing. The decision's
    reason (which the ``recovery.started`` event carries and the incident annotation keeps) and
    ``fault-agent status`` now say that the job's restart policy is not Never."""
    (node,) = kwok_nodes(1)
    job = await make_job(
        kube_client, namespace, "onf", JobKind.VOLCANO, labels={"fault-scheduling": "force", "fault-retry-times": "2"}
    )
    for i in range(2):
        await make_job_pod(kube_client, job, i, node, restart_policy="OnFailure")
    core = k8s.CoreV1Api(kube_client)
    await eventually(
        lambda: pods_by_name(kube_client, namespace),
        lambda pods: sum(1 for p in pods.values() if p.status.phase == "Running") == 2,
        what="both pods Running",
    )
    async with running_agent(_settings(testbed, namespace)) as (engine, _):
        await eventually(lambda: asyncio.sleep(0, engine.is_leader()), bool, what="the agent leads")
        # what the kubelet writes for OnFailure: the container failed and was started again, the pod Running
        at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        status = {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "train",
                    "image": "fake/train:1",
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 1,
                    "state": {"running": {"startedAt": at}},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": at, "finishedAt": at}},
                }
            ],
        }
        await core.patch_namespaced_pod_status(
            "onf-worker-1", namespace, {"status": status}, _content_type="application/merge-patch+json"
        )
        decisions = await eventually(
            lambda: asyncio.sleep(0, list(engine.decisions)),
            lambda d: any(j.uid == job.uid for _, j, _ in d),
            what="a decision for the job",
        )
        decision = next(dec for _, j, dec in decisions if j.uid == job.uid)
        assert decision.action.value == "restart-job"
        assert "the job's restart policy is OnFailure, not Never" in decision.reason, decision.reason
        incident = await eventually(
            lambda: _incident(kube_client, job), lambda i: i is not None and bool(i.reason), what="incident persisted"
        )
        assert "restart policy is OnFailure, not Never" in incident.reason
    out = await _status(testbed, f"{namespace}/onf", agent_namespace=namespace)
    assert out.returncode == 0, out.stdout + out.stderr
    text = " ".join(out.stdout.split())  # rich wraps long lines
    # the incident's reason says it whatever became of the pods; the pods' own line only while they exist (the
    # job controller may already have deleted them for the restart by the time status runs)
    assert "reason:" in text, out.stdout
    assert "restart policy is OnFailure, not Never" in text, out.stdout
    if "pods: none" not in text:
        assert "the job's restart policy is OnFailure (pods onf-worker-0, onf-worker-1), not Never" in text, out.stdout


async def _status(testbed: Testbed, *args: str, agent_namespace: str | None = None) -> subprocess.CompletedProcess[str]:
    """`fault-agent status ARGS` as a person runs it (kubeconfig from $KUBECONFIG, stdout a pipe); `agent_namespace`:
    where the agent keeps its job records (leader.namespace, as the person's settings would say)."""
    environ = {k: v for k, v in os.environ.items() if k != "COLUMNS" and not k.startswith("FAULT_AGENT_")}
    environ |= {"KUBECONFIG": str(testbed.kubeconfig)}
    if agent_namespace is not None:
        environ["FAULT_AGENT_LEADER__NAMESPACE"] = agent_namespace
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agent", "status", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
