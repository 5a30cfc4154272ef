"""Kubernetes Events from the agent, as an operator sees them with `kubectl describe` (issue 41, 1: a restarted
job, a tainted node or a deleted pod showed nothing from the agent). Against the testbed's apiserver and Volcano."""

from __future__ import annotations

import asyncio
import os
import subprocess
from datetime import UTC, datetime
from typing import Any

import pytest
from actions_support import put_device_info
from kubernetes_asyncio import client as k8s
from support.polling import eventually
from test_recovery import SEPARATE, _job_with_pods, _settings, nodes, running_agent
from test_recovery_guards import kwok_nodes

from agent.actions.breaker_store import reset_breaker
from agent.core.clock import FixedClock
from agent.core.cluster import JobKind
from agent.core.kube_events import KubeEvent, Regarding
from agent.sinks.kube_events import KubeEventRecorder
from testbed.inject import Injector

pytestmark = pytest.mark.integration
_ = nodes, kwok_nodes  # the fixtures, used by name


async def _describe(testbed: Any, *args: str) -> str:
    env = os.environ | {"KUBECONFIG": str(testbed.kubeconfig)}
    done = await asyncio.to_thread(
        subprocess.run, ["kubectl", "describe", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_chip_fault_restart_shows_on_the_job_and_the_node(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any
) -> None:
    (node,) = await nodes(1)
    job = await _job_with_pods(
        kube_client, namespace, "ke", JobKind.VOLCANO, node, labels={"fault-scheduling": "force"}
    )
    async with running_agent(_settings(testbed, namespace)):
        await put_device_info(kube_client, node, {"Ascend910-1": SEPARATE})

        async def described() -> str:
            return await _describe(testbed, "-n", namespace, "jobs.batch.volcano.sh", job.name)

        text = await eventually(
            described, lambda t: "RecoveryStarted" in t, what="the restart in describe", timeout_s=30
        )
        assert "FaultDetected" in text
        started = next(line for line in text.splitlines() if "RecoveryStarted" in line)
        assert "fault-agent.io/agent" in started  # kubectl's From column: the reporting controller
        assert "restart-job" in started
        node_text = await eventually(
            lambda: _describe(testbed, "node", node), lambda t: "FaultDetected" in t, what="the fault on the node"
        )
        assert "Ascend910-1" in node_text


async def test_dry_run_writes_no_event(testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any) -> None:
    (node,) = await nodes(1)
    job = await _job_with_pods(
        kube_client, namespace, "kd", JobKind.VOLCANO, node, labels={"fault-scheduling": "force"}
    )
    async with running_agent(_settings(testbed, namespace, dry_run=True)) as (engine, _):
        await put_device_info(kube_client, node, {"Ascend910-1": SEPARATE})
        await eventually(lambda: asyncio.sleep(0, engine.store.incident(job.uid)), what="the dry-run incident")
        await asyncio.sleep(2)
    events = await k8s.EventsV1Api(kube_client).list_namespaced_event(namespace)
    assert [e.reason for e in events.items if e.reporting_controller == "fault-agent.io/agent"] == []


async def test_the_breaker_opening_and_closing_show_on_the_nodes_that_tripped_it(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, kwok_nodes: Any
) -> None:
    """Issue 41, 1: a person's breaker reset showed nowhere in `kubectl describe` (only the trip did, on the faulty
    nodes); now each of those nodes shows the close too, with who closed it and why."""
    settings = _settings(testbed, namespace, breaker_node_share=0.001, breaker_min_faulty_nodes=2, breaker_window_s=300)
    tripping = kwok_nodes(2)
    inj = Injector(testbed.rest())
    async with running_agent(settings) as (engine, _):
        await eventually(lambda: asyncio.sleep(0, engine.is_leader()), bool, what="the agent leads")
        for node in tripping:
            inj.node_fault(node, "SeparateFault")
        await eventually(lambda: asyncio.sleep(0, engine.breaker.is_open), bool, what="breaker open")
        core = k8s.CoreV1Api(kube_client)
        await reset_breaker(core, settings, by="oncall", now=datetime.now(UTC), reason="rack fixed")
        for node in tripping:
            text = await eventually(
                lambda n=node: _describe(testbed, "node", n), lambda t: "BreakerReset" in t,
                what=f"the reset on {node}", timeout_s=30,
            )  # fmt: skip
            assert "BreakerTripped" in text
            reset = next(line for line in text.splitlines() if "BreakerReset" in line)
            assert "fault-agent.io/agent" in reset
            assert "closed by oncall: rack fixed" in reset


class _Results:
    """The recorder's ``action("kube-event", result)`` counts."""

    def __init__(self) -> None:
        self.results: list[str] = []

    def action(self, action: str, result: str) -> None:
        self.results.append(result)


async def test_the_recorder_creates_then_updates_the_series_and_counts_a_refused_write(
    kube_client: k8s.ApiClient, namespace: str
) -> None:
    """KubeEventRecorder.write against the apiserver with answers read raw (never built into models, issue 39):
    the first Event is created, the same one again patches its series (count 2), and a write the apiserver refuses
    (a namespace that does not exist) is counted ``failed`` without raising."""
    clock = FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
    results = _Results()
    recorder = KubeEventRecorder(kube_client, "agent-a", clock, results)
    regarding = Regarding("ConfigMap", "v1", namespace, "ke-raw")
    event = KubeEvent(regarding, "Warning", "FaultDetected", "Detect", "chip Ascend910-1")
    await recorder.write(event)
    clock.advance(5)
    await recorder.write(event)
    listed = await k8s.EventsV1Api(kube_client).list_namespaced_event(namespace)
    ours = [e for e in listed.items if e.regarding.name == "ke-raw"]
    assert len(ours) == 1
    assert ours[0].series is not None
    assert ours[0].series.count == 2
    await recorder.write(KubeEvent(Regarding("ConfigMap", "v1", f"{namespace}-none", "x"), "Normal", "R", "A", "n"))
    assert results.results == ["done", "done", "failed"]
