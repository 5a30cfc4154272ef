"""A leader frozen past its Lease must not act when it wakes up (issue 16 item 4), two agent processes.

The interleaving is built, not hoped for: the old leader is frozen (SIGSTOP) for longer than its Lease, the
standby takes over and restarts the job for a chip fault written meanwhile, and Volcano runs that Command (and
deletes it). Then the old leader wakes up (SIGCONT) while the kube-apiserver answers nothing (SIGSTOP): the fault
is already in its socket buffer, so its watch hands it over at once, while no Lease round can tell it that it
lost the Lease. Only its own clock can: its last renewal is older than its renew deadline. Before the fence it
decided as leader there and then and, once the apiserver answered again, created a second RestartJob Command
(the first one was gone, so the deterministic name did not help).
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from conftest import Scenario, for_job
from helpers import eventually, get_job, holds, job_version, record_commands, restart_commands
from test_volcano_recovery import _guide_job_running

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e

SHORT_LEASE = {"LEADER__LEASE_DURATION_S": "3", "LEADER__RENEW_DEADLINE_S": "2", "LEADER__RETRY_PERIOD_S": "0.2"}


async def test_a_leader_frozen_past_its_lease_does_not_restart_the_job_again(scenario: Scenario) -> None:
    sc = scenario
    name, uid, pods, version = await _guide_job_running(sc)
    old = await sc.start_agent("old", **SHORT_LEASE)
    new = await sc.start_agent("new", standby=True, **SHORT_LEASE)
    assert old.proc is not None
    commands = await record_commands(sc.api, sc.namespace)
    frozen = False
    try:
        old.proc.send_signal(signal.SIGSTOP)
        frozen = True
        frozen_at = time.monotonic()

        async def new_leads() -> bool:
            return new.metric("fault_agent_leader") == 1

        await eventually(new_leads, what="the standby to take the Lease", timeout_s=20)
        bad = pods[0]
        chip = int(bad.metadata.annotations["huawei.com/Ascend910"].split(",")[0].rsplit("-", 1)[1])
        sc.injector.chip_fault(bad.spec.node_name, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])
        await sc.wait_events("recovery.started", for_job(uid), timeout_s=30)

        async def restarted() -> bool:
            job = await get_job(sc.api, sc.namespace, name)
            return len(restart_commands(commands, name)) == 1 and job_version(job) == version + 1

        await eventually(restarted, what="the new leader's Command to be taken by Volcano", timeout_s=30)
        assert time.monotonic() - frozen_at > 3  # frozen for longer than the Lease, by construction

        sc.testbed.pause("kube-apiserver")
        try:
            old.proc.send_signal(signal.SIGCONT)
            frozen = False
            await asyncio.sleep(1.5)  # the old leader reads the buffered fault and decides (or, now, does not)
        finally:
            sc.testbed.resume("kube-apiserver")

        async def one_command() -> bool:
            return len(restart_commands(commands, name)) == 1

        await holds(one_command, for_s=8, what="exactly one RestartJob Command")
        assert old.metric("fault_agent_leader") == 0
        assert new.metric("fault_agent_leader") == 1
        assert old.metric("fault_agent_actions_total", action="restart-job") == 0
    finally:
        if frozen:
            old.proc.send_signal(signal.SIGCONT)
        await commands.stop()
