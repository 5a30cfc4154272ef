"""Business-failure retry budget on the testbed: fault-retry-times=2 gives two restarts then abort, evictions
never consume it, and the remaining count survives a restart of the agent (it lives on the job)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from actions_support import job_record, make_job, make_job_pod, make_node, pods_by_name
from kubernetes_asyncio import client as k8s
from support.polling import eventually
from test_recovery import _settings, running_agent

from agent.core.cluster import JobKind, JobRef
from agent.core.incidents import Phase, decode_incident, decode_ledger
from agent.core.records import KEY_INCIDENT, KEY_LEDGER

pytestmark = pytest.mark.integration
MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}


async def _record(api: k8s.ApiClient, job: JobRef) -> dict[str, str]:
    """The job's record (the agent's namespace is the job's in these tests: leader.namespace)."""
    return await job_record(api, job.namespace, job)


async def _pods_up(api: k8s.ApiClient, job: JobRef, node: str) -> None:
    """Play the AscendJob operator: (re)create the two pods and wait until both run."""
    existing = await pods_by_name(api, job.namespace)
    for i in range(2):
        if f"{job.name}-worker-{i}" not in existing:
            await make_job_pod(api, job, i, node)
    await eventually(
        lambda: pods_by_name(api, job.namespace),
        lambda p: len(p) == 2 and all(x.status.phase == "Running" for x in p.values()),
        what="pods Running",
    )


async def _fail_pod(api: k8s.ApiClient, namespace: str, name: str, *, evicted: bool = False) -> None:
    """Make a pod Failed as the kubelet would: exit code 1, or evicted."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status: dict[str, Any] = {"phase": "Failed"}
    if evicted:
        status |= {"reason": "Evicted", "message": "The node was low on resource: memory."}
    else:
        status["containerStatuses"] = [
            {
                "name": "train",
                "ready": False,
                "restartCount": 0,
                "image": "fake/train:1",
                "imageID": "",
                "state": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": now}},
            }
        ]
    await k8s.CoreV1Api(api).patch_namespaced_pod_status(name, namespace, {"status": status}, **MERGE)


async def _restart_cycle(api: k8s.ApiClient, job: JobRef, node: str, *, evicted: bool = False) -> None:
    """Fail pod 0, wait for the agent to delete the job's pods, bring them back, wait for recovered."""
    before = await pods_by_name(api, job.namespace)
    await _fail_pod(api, job.namespace, f"{job.name}-worker-0", evicted=evicted)
    old_uids = {p.metadata.uid for p in before.values()}
    await eventually(
        lambda: pods_by_name(api, job.namespace),
        lambda p: not (old_uids & {x.metadata.uid for x in p.values()}),
        what="the agent deleted the job's pods",
    )
    await _pods_up(api, job, node)
    await eventually(
        lambda: _record(api, job),
        lambda a: decode_incident(a[KEY_INCIDENT]).phase is Phase.RECOVERED,
        what="incident recovered",
    )


async def test_two_retries_then_abort_evictions_free_and_budget_survives_restart(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    node = await make_node(kube_client)
    try:
        job = await make_job(
            kube_client,
            namespace,
            "bz",
            JobKind.ASCEND,
            labels={"fault-scheduling": "force", "fault-retry-times": "2"},
        )
        await k8s.CustomObjectsApi(kube_client).patch_namespaced_custom_object_status(
            "mindxdl.gitee.com", "v1", namespace, "ascendjobs", "bz",
            {"status": {"conditions": [{"type": "Running", "status": "True", "reason": "JobRunning",
                                        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}]}},
            **MERGE,
        )  # fmt: skip
        await _pods_up(kube_client, job, node)
        settings = _settings(testbed, namespace)

        async def ledger() -> Any:
            return decode_ledger((await _record(kube_client, job))[KEY_LEDGER])

        async with running_agent(settings, "agent-1"):
            await _restart_cycle(kube_client, job, node)  # business failure 1: retry 1 of 2
            assert (await ledger()).business_retries_used == 1
            await _restart_cycle(kube_client, job, node, evicted=True)  # an eviction: free
            assert (await ledger()).business_retries_used == 1
        # the agent restarts; the budget is read back from the job's record
        async with running_agent(settings, "agent-2") as (engine, _):
            await _restart_cycle(kube_client, job, node)  # business failure 2: retry 2 of 2
            assert (await ledger()).business_retries_used == 2
            uids = {p.metadata.uid for p in (await pods_by_name(kube_client, namespace)).values()}
            await _fail_pod(kube_client, namespace, "bz-worker-1")  # failure 3: budget used up
            incident = await eventually(
                lambda: _record(kube_client, job),
                lambda a: decode_incident(a[KEY_INCIDENT]).phase is Phase.FAILED,
                what="incident failed (abort)",
            )
            assert "used up" in decode_incident(incident[KEY_INCIDENT]).detail
            # abort writes nothing else: the pods are still the same ones
            assert {p.metadata.uid for p in (await pods_by_name(kube_client, namespace)).values()} == uids
            assert json.loads(incident[KEY_LEDGER])["businessRetriesUsed"] == 2
            assert [d.action.value for _, _, d in engine.decisions][-1] == "abort"
    finally:
        await k8s.CoreV1Api(kube_client).delete_node(node)
