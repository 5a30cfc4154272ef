"""Resubmission on the testbed: a Volcano Job that reached Failed because of a hardware fault is deleted and
created again from its spec (lineage annotations, labels kept), its incident is recovered once the new job runs,
and once ``policy.resubmit_limit`` is used up (counted across agent restarts) the next one is an abort.

The test plays the Volcano controller where the job must change phase (status subresource), as the other
recovery tests do.
"""

from __future__ import annotations

from typing import Any

import pytest
from actions_support import (
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
from support.polling import eventually
from test_recovery import _settings, running_agent

from agent.core.cluster import JobKind, JobRef
from agent.core.incidents import (
    RESUBMIT_COUNT_ANNOTATION,
    RESUBMITTED_FROM_ANNOTATION,
    Phase,
    decode_incident,
)
from agent.core.records import KEY_INCIDENT

pytestmark = pytest.mark.integration
VC = ("batch.volcano.sh", "v1alpha1", "jobs")
MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}


async def _get(api: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        obj: dict[str, Any] = await k8s.CustomObjectsApi(api).get_namespaced_custom_object(
            *VC[:2], namespace, VC[2], name
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return obj


async def _set_phase(api: k8s.ApiClient, namespace: str, name: str, phase: str) -> None:
    await k8s.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        *VC[:2], namespace, VC[2], name, {"status": {"state": {"phase": phase}}}, **MERGE
    )


async def _with_record(api: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The job (None when gone) with the data of the agent's record of it (agent.core.records; the agent's
    namespace is the job's here) under the extra key ``record``."""
    obj = await _get(api, namespace, name)
    if obj is None:
        return None
    ref = JobRef(JobKind.VOLCANO, namespace, name, obj["metadata"]["uid"])
    return {**obj, "record": await job_record(api, namespace, ref)}


def _incident_of(obj: dict[str, Any] | None) -> Any:
    text = ((obj or {}).get("record") or {}).get(KEY_INCIDENT)
    return None if text is None else decode_incident(text)


async def test_failed_job_is_resubmitted_once_then_the_limit_aborts(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    node = await make_node(kube_client)
    try:
        await _scenario(testbed, kube_client, namespace, node)
    finally:
        await delete_device_info(kube_client, node)
        await delete_node(kube_client, node)


async def _scenario(testbed: Any, api: k8s.ApiClient, namespace: str, node: str) -> None:
    labels = {"fault-scheduling": "force", "team": "llm"}
    old = await make_job(api, namespace, "rs", JobKind.VOLCANO, labels=labels)
    for i in range(2):
        await make_job_pod(api, old, i, node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}")
    await _set_phase(api, namespace, "rs", "Failed")  # the job already failed on its hardware
    settings = _settings(testbed, namespace, resubmit_limit=1)

    async with running_agent(settings, "agent-a") as (engine, _):
        await eventually(
            lambda: _with_record(api, namespace, "rs"),
            lambda o: o is not None and (o["status"] or {}).get("state", {}).get("phase") == "Failed",
            what="job Failed in the cache's view",
        )
        await put_device_info(api, node, {"Ascend910-0": ("SeparateNPU", "80E01801")})
        new = await eventually(
            lambda: _with_record(api, namespace, "rs"),
            lambda o: o is not None and o["metadata"]["uid"] != old.uid,
            what="the job created again",
            timeout_s=30,
        )
        meta = new["metadata"]
        assert meta["annotations"][RESUBMITTED_FROM_ANNOTATION] == old.uid
        assert meta["annotations"][RESUBMIT_COUNT_ANNOTATION] == "1"
        assert meta["labels"] == labels  # labels kept
        assert "ownerReferences" not in meta
        assert new["spec"]["maxRetry"] == 3  # spec kept
        assert new["spec"]["schedulerName"] == "volcano"
        assert (new.get("status") or {}).get("state", {}).get("phase") != "Failed"  # status not copied
        incident = await eventually(
            lambda: _with_record(api, namespace, "rs"),
            lambda o: _incident_of(o) is not None,
            what="incident persisted in the new job's record",
        )
        incident = _incident_of(incident)
        assert await job_record(api, namespace, old) == {}  # the old job's record went with it
        assert incident.job_uid == meta["uid"]
        assert incident.action == "resubmit"
        assert incident.phase is Phase.RESTARTING

        # the controller (played here) runs the new job: its pods Running, the job Running → recovered
        fresh = JobRef(JobKind.VOLCANO, namespace, "rs", meta["uid"])
        await eventually(
            lambda: pods_by_name(api, namespace),
            lambda pods: not pods,
            what="the old job's pods collected",
            timeout_s=30,
        )
        for i in range(2):
            await make_job_pod(api, fresh, i, node, chips=f"Ascend910-{2 * i + 4},Ascend910-{2 * i + 5}")
        await _set_phase(api, namespace, "rs", "Running")
        recovered = await eventually(
            lambda: _with_record(api, namespace, "rs"),
            lambda o: _incident_of(o) is not None and _incident_of(o).phase is Phase.RECOVERED,
            what="incident recovered when the new job runs",
            timeout_s=30,
        )
        assert recovered["metadata"]["uid"] == meta["uid"]
        assert engine.store.ledger(meta["uid"]).resubmits_used == 1

    # a new agent (the count must come from the job, not from memory): the job fails again on hardware
    await _set_phase(api, namespace, "rs", "Failed")
    async with running_agent(settings, "agent-b") as (engine, _):
        await eventually(
            lambda: _with_record(api, namespace, "rs"),
            lambda o: o is not None and o["status"]["state"]["phase"] == "Failed",
            what="job Failed again",
        )
        await put_device_info(api, node, {"Ascend910-4": ("SeparateNPU", "80E01802")})
        final = await eventually(
            lambda: _with_record(api, namespace, "rs"),
            lambda o: _incident_of(o) is not None and _incident_of(o).phase is Phase.FAILED,
            what="abort: the resubmit limit is used up",
            timeout_s=30,
        )
        assert final["metadata"]["uid"] == meta["uid"]  # not resubmitted a second time
        assert _incident_of(final).action == "abort"
        assert "resubmit limit" in _incident_of(final).reason
