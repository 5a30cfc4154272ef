"""A leader frozen past its Lease must not act when it wakes up (issue 16 item 4), two agent processes.

The interleaving is built step by step with SIGSTOP/SIGCONT, not hoped for:

1. the old leader is frozen, the standby takes the Lease (3 s) and is frozen too, holding it;
2. a chip fault is written: both have it in their socket buffers, nobody acts;
3. with the kube-apiserver paused (it answers nothing, so no Lease round can tell anyone anything) the old
   leader wakes up for a second and is frozen again: before the fence it decided there and then, as the leader
   it still believed it was, and its first write (the incident annotation) went to the apiserver's socket;
4. the apiserver and the new leader go on: the new leader restarts the job, Volcano runs that Command and
   deletes it;
5. the old leader wakes up for good. Before the fence it went on with its decision and created a second
   RestartJob Command (the first one was gone, so the deterministic name did not help). Now its own clock told
   it in step 3 that its last renewal was older than its renew deadline: it never decided.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import pytest
from conftest import Scenario
from helpers import eventually, get_job, holds, job_version, record_commands, restart_commands
from test_volcano_recovery import _guide_job_running

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e

SHORT_LEASE = {"LEADER__LEASE_DURATION_S": "3", "LEADER__RENEW_DEADLINE_S": "2", "LEADER__RETRY_PERIOD_S": "0.2"}


async def test_a_leader_frozen_past_its_lease_does_not_restart_the_job_again(scenario: Scenario) -> None:
    sc = scenario
    name, _, pods, version = await _guide_job_running(sc)
    old = await sc.start_agent("old", **SHORT_LEASE)
    new = await sc.start_agent("new", standby=True, **SHORT_LEASE)
    assert old.proc is not None
    assert new.proc is not None
    commands = await record_commands(sc.api, sc.namespace)
    frozen: set[Any] = set()

    def freeze(agent: Any) -> None:
        agent.proc.send_signal(signal.SIGSTOP)
        frozen.add(agent)

    def thaw(agent: Any) -> None:
        agent.proc.send_signal(signal.SIGCONT)
        frozen.discard(agent)

    try:
        freeze(old)
        frozen_at = time.monotonic()

        async def new_leads() -> bool:
            return new.metric("fault_agent_leader") == 1

        await eventually(new_leads, what="the standby to take the Lease", timeout_s=20)
        freeze(new)
        bad = pods[0]
        chip = int(bad.metadata.annotations["huawei.com/Ascend910"].split(",")[0].rsplit("-", 1)[1])
        sc.injector.chip_fault(bad.spec.node_name, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])
        await asyncio.sleep(0.5)  # the watch events are in both agents' socket buffers

        sc.testbed.pause("kube-apiserver")
        try:
            assert time.monotonic() - frozen_at > 3  # longer than the Lease, by construction
            thaw(old)
            await asyncio.sleep(1.0)  # the old leader reads the fault and decides (before the fence) or not
            freeze(old)
        finally:
            sc.testbed.resume("kube-apiserver")
        await asyncio.sleep(0.5)  # whatever the old leader had sent is processed now
        thaw(new)

        async def restarted() -> bool:
            job = await get_job(sc.api, sc.namespace, name)
            return len(restart_commands(commands, name)) >= 1 and job_version(job) == version + 1

        await eventually(restarted, what="the new leader's Command, taken by Volcano", timeout_s=30)
        thaw(old)

        async def one_command() -> bool:
            return len(restart_commands(commands, name)) == 1

        await holds(one_command, for_s=8, what="exactly one RestartJob Command")
        assert old.metric("fault_agent_actions_total", action="restart-job") == 0
        assert old.metric("fault_agent_leader") == 0
        await eventually(new_leads, what="the new leader to lead", timeout_s=10)
    finally:
        for agent in list(frozen):
            thaw(agent)
        await commands.stop()
