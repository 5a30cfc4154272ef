"""Grace mode (``fault-scheduling=grace``): the job's pods are deleted normally, honouring their grace period,
and force-deleted once ``policy.grace_over_time_s`` has passed if they are still there.

kwok confirms a pod's exit at once, so to have pods that do not exit in time the test stops kwok: like a kubelet
that does not answer, nothing then completes a graceful deletion.

Timing (issue 40): grace-over-time counts from the agent's restart, so the check is anchored on the agent's and
the apiserver's own times, never on when this test's consumer happened to receive an event (under load that came
late and the test saw "forced before grace-over-time"): the ``recovery.started`` event's ``time`` (the agent's
clock, stamped before the restart is sent) against the force deletion's ``deletionTimestamp`` (the apiserver's clock,
whole seconds, set to the moment of a grace-0 deletion), and the agent's own measure of its wait
(``recovery.succeeded`` ``grace_waits``). Once the agent has forced the deletions the
test starts kwok again (a fresh process: a paused one would replay stale deletions by pod name onto the
replacement pods, which Volcano gives the same names), so the replacement pods can start. The node Leases of
the test's nodes are deleted first, else the new kwok waits for the old one's Leases to expire (40 s).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta

import pytest
from conftest import Scenario, for_job
from helpers import VC, eventually, get_job, guide_vcjob, job_version, record_pods, submit, wait_running
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e
GRACE_OVER_TIME_S = 3


async def test_grace_mode_deletes_normally_then_forces_after_grace_over_time(scenario: Scenario) -> None:
    sc = scenario
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, labels={"fault-scheduling": "grace"}), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    version = job_version(await get_job(sc.api, sc.namespace, name))
    old_uids = {p.metadata.uid for p in pods}
    agent = await sc.start_agent(POLICY__GRACE_OVER_TIME_S=str(GRACE_OVER_TIME_S))
    watched = await record_pods(sc.api, sc.namespace)
    bad = pods[0]
    chip = int(bad.metadata.annotations["huawei.com/Ascend910"].split(",")[5].rsplit("-", 1)[1])
    sc.testbed.kill("kwok")
    stopped = True
    try:
        sc.injector.chip_fault(bad.spec.node_name, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        restart_at = datetime.fromisoformat(started["time"])  # the agent's clock, before the restart went out
        assert started["data"]["action"] == "restart-job"

        def graceful() -> set[str]:
            """Old pods seen terminating with a grace period (a normal deletion)."""
            return {
                o["metadata"]["uid"]
                for kind, o in watched.events
                if kind == "MODIFIED"
                and o["metadata"]["uid"] in old_uids
                and o["metadata"].get("deletionTimestamp")
                and (o["metadata"].get("deletionGracePeriodSeconds") or 0) > 0
            }

        def deleted() -> set[str]:
            return {o["metadata"]["uid"] for kind, o in watched.events if kind == "DELETED"} & old_uids

        async def terminating() -> bool:
            return graceful() == old_uids and not deleted()

        await eventually(terminating, timeout_s=15, what="both pods terminating with their grace period")

        async def forced() -> bool:
            return deleted() == old_uids

        await eventually(forced, timeout_s=GRACE_OVER_TIME_S + 15, what="the agent to force-delete the pods")
        forced_at = min(
            datetime.fromisoformat(o["metadata"]["deletionTimestamp"])
            for kind, o in watched.events
            if kind == "DELETED" and o["metadata"]["uid"] in old_uids
        )  # the apiserver's time of the first grace-0 deletion, truncated to the second
        assert forced_at + timedelta(seconds=1) - restart_at >= timedelta(seconds=GRACE_OVER_TIME_S), (
            f"forced before grace-over-time: restart {restart_at}, force {forced_at}"
        )

        async def counted() -> bool:  # counted once the last deletion is answered, which its DELETED event can precede
            return agent.metric("fault_agent_actions_total", action="force-after-grace", result="done") == 1

        await eventually(counted, timeout_s=10, what="one force-after-grace action counted")
        await _restart_kwok(sc)
        stopped = False

        new = await wait_running(sc.api, sc.namespace, name, not_uids=old_uids, timeout_s=60)
        assert bad.spec.node_name not in {p.spec.node_name for p in new}
        (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
        (wait,) = succeeded["data"]["grace_waits"]  # the agent's own measure, from its restart to the force
        assert (wait["wait"], wait["ended"]) == ("grace-over-time", "timeout")
        assert wait["waited_s"] >= GRACE_OVER_TIME_S
        assert job_version(await get_job(sc.api, sc.namespace, name)) == version + 1
    finally:
        if stopped:
            await _restart_kwok(sc)
        await watched.stop()


async def _restart_kwok(sc: Scenario) -> None:
    coord = k8s.CoordinationV1Api(sc.api)
    for node in sc.nodes:
        with contextlib.suppress(ApiException):
            await coord.delete_namespaced_lease(node, "kube-node-lease")
    await asyncio.to_thread(sc.testbed.start, "kwok")
