"""Issue 19 on the testbed: the claim goes out together with the RestartJob Command (one round trip). A leader
whose Command lands while its claim (and every later incident write) is lost, as when it dies between the two,
leaves a job restarted with nothing on its annotations; the next leader, re-evaluating the still-active fault on
the restarted job's new pods, does not restart the job a second time.

The Volcano controller is paused and its part played here (status.version and retryCount moved on, the old pods
replaced), so what the second leader sees is fixed; the apiserver, the watches and both agents are real.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from actions_support import (
    CommandRecorder,
    delete_device_info,
    delete_node,
    make_job,
    make_job_pod,
    make_node,
    pods_by_name,
    put_device_info,
)
from kubernetes_asyncio import client as k8s
from support.polling import eventually
from test_recovery import _incident, _settings, running_agent

from agent.actions import ActionResult, Outcome
from agent.actions.writer import BUS_GROUP, BUS_PLURAL, BUS_VERSION, VOLCANO_GROUP, VOLCANO_PLURAL, VOLCANO_VERSION
from agent.core.cluster import JobKind

pytestmark = pytest.mark.integration

SEPARATE = ("SeparateNPU", "80E01801")


async def test_a_leader_dying_between_its_command_and_its_claim_does_not_cause_a_second_restart(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    node = await make_node(kube_client)
    custom = k8s.CustomObjectsApi(kube_client)
    testbed.pause("vc-controller-manager")
    try:
        job = await make_job(kube_client, namespace, "rt", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
        for i in range(2):
            await make_job_pod(kube_client, job, i, node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}", grace_s=0)
        settings = _settings(testbed, namespace)
        async with CommandRecorder(kube_client, namespace) as rec:
            async with running_agent(settings, "agent-first") as (first, _):
                await eventually(lambda: asyncio.sleep(0, first.is_leader()), bool, what="the first agent leads")
                writer: Any = first.ctx.writer

                async def lost(*args: Any, **kwargs: Any) -> ActionResult:
                    return ActionResult("lost", "x", Outcome.FAILED, "lost: the replica died", True, 500)

                writer.claim_record = lost  # this replica's incident writes never land (it "dies" after the Command)
                writer.write_record = lost
                await put_device_info(kube_client, node, {"Ascend910-0": SEPARATE})
                commands = await eventually(rec.count, lambda c: len(c) >= 1, what="the first leader's Command")
            assert len(commands) == 1
            assert await _incident(kube_client, job) is None  # no record holds that restart

            # Volcano's part: it took the Command (version and retryCount move on) and replaced the pods
            for name in await pods_by_name(kube_client, namespace):
                await k8s.CoreV1Api(kube_client).delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            await eventually(lambda: pods_by_name(kube_client, namespace), lambda p: not p, what="old pods gone")
            await custom.patch_namespaced_custom_object_status(
                VOLCANO_GROUP, VOLCANO_VERSION, namespace, VOLCANO_PLURAL, "rt",
                {"status": {"state": {"phase": "Running"}, "version": 1, "retryCount": 1}},
                _content_type="application/merge-patch+json",
            )  # fmt: skip
            for i in range(2):  # the new generation lands on the same chips (the fault is still active)
                await make_job_pod(kube_client, job, i, node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}")

            async with running_agent(settings, "agent-second") as (second, _):
                await eventually(
                    lambda: asyncio.sleep(0, second.is_leader()), bool, what="the second agent leads", timeout_s=15
                )
                await eventually(
                    lambda: asyncio.sleep(0, second.reevaluate_pending), lambda p: not p, what="re-evaluated"
                )
                await asyncio.sleep(2)  # several ticks
                assert len(await rec.count()) == 1, [c["metadata"]["name"] for c in await rec.count()]
    finally:
        listed = await custom.list_namespaced_custom_object(BUS_GROUP, BUS_VERSION, namespace, BUS_PLURAL)
        for c in listed["items"]:  # never let the controller run them once it is back
            await custom.delete_namespaced_custom_object(
                BUS_GROUP, BUS_VERSION, namespace, BUS_PLURAL, c["metadata"]["name"]
            )
        testbed.resume("vc-controller-manager")
        await delete_device_info(kube_client, node)
        await delete_node(kube_client, node)
