"""An AscendJob's status as the real Ascend Operator writes it, on the testbed (issue 35, defects 2 and 3).

At each restart the operator re-appends ``Created`` after ``Running`` with its old lastTransitionTime and leaves
``Running`` as it was once the pods run again (kubeflow common v0.4.3 ``pkg/util/status.go`` ``setCondition``),
so the two tie to the second; its restart counter is the pods' ``version`` label only
(component/ascend-operator/pkg/controllers/v1/ascendjob_controller.go ``onPodDeleteFunc``, labels.go). Here the
test plays the operator: it recreates the deleted pods with the next version and keeps the conditions tied.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from actions_support import make_job, make_job_pod, make_node, pods_by_name, put_device_info
from kubernetes_asyncio import client as k8s
from support.polling import eventually
from test_recovery import _settings, running_agent
from test_recovery_budget import _record

from agent.core.cluster import JobKind, JobRef
from agent.core.incidents import Phase, decode_incident
from agent.core.records import KEY_INCIDENT

pytestmark = pytest.mark.integration
MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
SEPARATE = ("SeparateNPU", "80E01801")


async def _pods_at(api: k8s.ApiClient, job: JobRef, node: str, version: int) -> None:
    """Play the operator: create the job's missing pods with the `version` label, wait until both run."""
    core = k8s.CoreV1Api(api)
    existing = await pods_by_name(api, job.namespace)
    for i in range(2):
        name = f"{job.name}-worker-{i}"
        if name not in existing:
            await make_job_pod(api, job, i, node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}", grace_s=0)
            await core.patch_namespaced_pod(name, job.namespace, {"metadata": {"labels": {"version": str(version)}}})
    await eventually(
        lambda: pods_by_name(api, job.namespace),
        lambda p: len(p) == 2 and all(x.status.phase == "Running" for x in p.values()),
        what="pods Running",
    )


async def test_restart_recovers_though_created_ties_with_running(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    node = await make_node(kube_client)
    try:
        job = await make_job(kube_client, namespace, "ct", JobKind.ASCEND, labels={"fault-scheduling": "force"},
                             max_retry=2)  # fmt: skip
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = [
            {"type": t, "status": "True", "reason": r, "lastTransitionTime": now, "lastUpdateTime": now}
            for t, r in (("Running", "JobRunning"), ("Created", "PodGroupPending"))
        ]
        await k8s.CustomObjectsApi(kube_client).patch_namespaced_custom_object_status(
            "mindxdl.gitee.com", "v1", namespace, "ascendjobs", "ct", {"status": {"conditions": conditions}}, **MERGE
        )
        await _pods_at(kube_client, job, node, 1)  # one restart made before the agent came (by anyone)
        async with running_agent(_settings(testbed, namespace)) as (engine, _):
            before = {p.metadata.uid for p in (await pods_by_name(kube_client, namespace)).values()}
            await put_device_info(kube_client, node, {"Ascend910-0": SEPARATE})
            await eventually(
                lambda: pods_by_name(kube_client, namespace),
                lambda p: not (before & {x.metadata.uid for x in p.values()}),
                what="the agent deleted the job's pods",
            )
            decision = engine.decisions[-1][2]
            assert decision.action.value == "restart-job"
            # backoffLimit 2, pods at version 1: this restart is the last one the operator takes
            assert "0 restarts left" in decision.reason, decision.reason
            await _pods_at(kube_client, job, node, 2)
            await eventually(
                lambda: _record(kube_client, job),
                lambda r: KEY_INCIDENT in r and decode_incident(r[KEY_INCIDENT]).phase is Phase.RECOVERED,
                what="incident recovered though Created ties with Running",
                timeout_s=20,
            )
    finally:
        await k8s.CoreV1Api(kube_client).delete_node(node)
