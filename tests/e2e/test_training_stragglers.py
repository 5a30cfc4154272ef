"""Straggler detection from the heartbeat's per-rank step times (issue 38), with the whole agent as a subprocess.

The guide's Volcano Job (2 pods, one per node) opts in with ``fault-agent.io/progress: lease`` and
``fault-agent.io/straggler``; its rank 0's training loop (testbed.heartbeat.TrainingLoop, the real client against
the real apiserver) steps every 0.5 s, writes the Lease every second and reports both pod ranks' step times. Even
ranks are left alone; one rank made three times slower is one ``job.straggler`` event naming its pod, node and
chips, and never a restart; with ``avoid`` its node is tainted ``SubHealthFault`` and the next restart (for a chip
fault elsewhere) places no pod there.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import (
    NPU,
    VC,
    chip_of,
    eventually,
    guide_vcjob,
    holds,
    record_commands,
    restart_commands,
    submit,
    taints,
    wait_running,
)

from agent.core.progress import HANG_TIMEOUT_LABEL, PROGRESS_LABEL
from agent.core.straggler import STRAGGLER_LABEL
from testbed.heartbeat import TrainingLoop
from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e

WINDOWS = 2
SETTINGS = {"DETECT__STRAGGLER_WINDOWS": str(WINDOWS)}


def _by_rank(pods: list[Any]) -> list[Any]:
    """The pods in pod-rank order (the guide's pods carry no ``hccl/rankIndex``: the index ending their name)."""
    return sorted(pods, key=lambda p: int(re.search(r"(\d+)$", p.metadata.name).group(1)))  # type: ignore[union-attr]


async def _job(sc: Scenario, mode: str, nodes: int = 2) -> tuple[str, str, list[Any], TrainingLoop]:
    await sc.add_nodes(nodes)
    labels = {PROGRESS_LABEL: "lease", STRAGGLER_LABEL: mode, HANG_TIMEOUT_LABEL: "600"}
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, labels=labels, max_retry=10), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = _by_rank(await wait_running(sc.api, sc.namespace, name))
    loop = TrainingLoop(sc.testbed, sc.namespace, name, pods[0].metadata.name, ranks=len(pods)).start()
    return name, uid, pods, loop


def _straggling(uid: str) -> Any:
    return lambda e: for_job(uid)(e) and e["data"]["state"] == "straggling"


async def test_one_slow_rank_is_one_straggler_event_naming_its_pod_and_even_ranks_none(scenario: Scenario) -> None:
    sc = scenario
    name, uid, pods, loop = await _job(sc, "detect")
    commands = await record_commands(sc.api, sc.namespace)
    try:
        agent = await sc.start_agent(**SETTINGS)
        # even ranks: many windows, no event
        await holds(lambda: _no_events(sc, uid), for_s=4 * WINDOWS + 4, what="no straggler while ranks are even")
        slow = pods[1]
        loop.slow(1, 3.0)
        (event,) = await sc.wait_events("job.straggler", _straggling(uid), timeout_s=20)
        data = event["data"]
        assert data["pod"]["name"] == slow.metadata.name
        assert data["pod"]["uid"] == slow.metadata.uid
        assert data["node"] == slow.spec.node_name
        assert sorted(data["chips"]) == sorted(slow.metadata.annotations[NPU].split(","))
        assert data["rank"] == 1
        assert data["step_time_s"] == pytest.approx(1.5, rel=0.01)
        assert data["median_s"] == pytest.approx(0.5, rel=0.01)
        assert data["windows"] == WINDOWS
        assert (data["mode"], data["avoidance"]) == ("detect", "none")
        assert agent.metric("fault_agent_stragglers_total", job_kind="vcjob") == 1
        assert agent.metric("fault_agent_stragglers_current", job_kind="vcjob") == 1
        # reported once per episode, and never a restart nor a mark on the node
        await holds(lambda: _commands_are(commands, name, 0), for_s=4, what="a straggler restarts nothing")
        assert len(sc.events("job.straggler", _straggling(uid))) == 1
        assert await taints(sc.api, slow.spec.node_name) == []
        # healthy again: the episode ends
        loop.slow(1, 1.0)
        (ended,) = await sc.wait_events("job.straggler", lambda e: for_job(uid)(e) and e["data"]["state"] == "ended")
        assert ended["data"]["ended_by"] == "recovered"
        assert ended["data"]["found_at"] == data["found_at"]

        async def cleared() -> float:
            return agent.metric("fault_agent_stragglers_current", job_kind="vcjob")

        await eventually(cleared, lambda n: n == 0, what="no straggler now")
        assert agent.metric("fault_agent_stragglers_total", job_kind="vcjob") == 1
    finally:
        loop.stop()
        await commands.stop()


async def test_with_avoid_the_stragglers_node_is_marked_and_the_next_restart_avoids_it(scenario: Scenario) -> None:
    sc = scenario
    name, uid, pods, loop = await _job(sc, "avoid")
    key = f"e2e.fault-agent.io/{sc.tag}"
    commands = await record_commands(sc.api, sc.namespace)
    try:
        await sc.start_agent(POLICY__TAINT_KEY=key, **SETTINGS)
        slow, healthy = pods[1], pods[0]
        slow_node = slow.spec.node_name
        await asyncio.sleep(2)
        loop.slow(1, 3.0)
        (event,) = await sc.wait_events("job.straggler", _straggling(uid), timeout_s=20)
        assert (event["data"]["node"], event["data"]["avoidance"]) == (slow_node, "node-marked")
        mark = (key, "SubHealthFault", "NoSchedule")

        async def slow_node_taints() -> list[tuple[str, str, str]]:
            return await taints(sc.api, slow_node)

        await eventually(slow_node_taints, lambda ts: mark in ts, what="the straggler's node marked sub-healthy")
        await holds(lambda: _commands_are(commands, name, 0), for_s=3, what="the mark alone restarts nothing")
        # a chip fault on the other pod's node restarts the job; two spare nodes, so placement has a choice
        spares = await sc.add_nodes(2)
        sc.injector.chip_fault(healthy.spec.node_name, [ChipFault(chip_of(healthy), ("80E3A201",), "SeparateNPU")])
        loop.slow(1, 1.0)  # the slow pod is replaced: its successor is healthy
        await sc.wait_events("recovery.started", for_job(uid))
        new = await wait_running(sc.api, sc.namespace, name, not_uids={p.metadata.uid for p in pods}, timeout_s=60)
        placed = {p.spec.node_name for p in new}
        assert slow_node not in placed, "a restarted pod was placed on the straggler's node"
        assert placed <= {healthy.spec.node_name, *spares}
        # the episode ended with the restart; the mark stays (detect.straggler_avoid_hold_s) as a persisted hold
        (ended,) = await sc.wait_events("job.straggler", lambda e: for_job(uid)(e) and e["data"]["state"] == "ended")
        assert ended["data"]["ended_by"] == "restarted"
        assert mark in await slow_node_taints()
        assert len(restart_commands(commands, name)) == 1
    finally:
        loop.stop()
        await commands.stop()


async def _no_events(sc: Scenario, uid: str) -> bool:
    return sc.events("job.straggler", for_job(uid)) == []


async def _commands_are(commands: object, name: str, n: int) -> bool:
    return len(restart_commands(commands, name)) == n  # type: ignore[arg-type]
