"""remain-retry-times entries for every opted-in job, before any failure (issue 35, defect 1), on the testbed.

The Ascend Operator fails an AscendJob with ``fault-retry-times`` > 0 at its first Failed pod unless
``volcano-system/vcjob-fault-npu-cm`` key ``remain-retry-times`` already holds an entry for it with ``Times`` >= 1
(component/ascend-operator/pkg/controllers/v1/unconditaional_retry.go); MindCluster's plugin makes one for every
running job whose ``fault-scheduling`` is not ``off`` (internal/rescheduling/reschedule.go). The agent makes them
as jobs appear, drops them as they go or stop opting in, and keeps the ConfigMap's other keys. The value is read
back with plain ``json`` and compared with Go's ``encoding/json`` (testbed/mcencode).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from actions_support import make_job
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from support.polling import eventually
from test_recovery import _settings, running_agent
from test_recovery_bookkeeping import NPU_CM, _cm, _put_cm

from agent.core.cluster import JobKind
from testbed.encoder import shared

pytestmark = pytest.mark.integration
ASCEND = ("mindxdl.gitee.com", "v1", "ascendjobs")
MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}


@pytest.fixture
async def npu_cm(kube_client: k8s.ApiClient) -> AsyncIterator[None]:
    """volcano-system/vcjob-fault-npu-cm holding one unrelated key; deleted afterwards (another test's agent must
    not find our entries, nor take the ConfigMap for MindCluster's plugin)."""
    try:
        await k8s.CoreV1Api(kube_client).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NPU_CM[0])))
    except ApiException as e:
        if e.status != 409:
            raise
    await _put_cm(kube_client, NPU_CM, {"unrelated": "kept"})
    yield
    await _put_cm(kube_client, NPU_CM, None)


async def _entries(api: k8s.ApiClient) -> tuple[str, dict[str, str]]:
    data = await _cm(api, NPU_CM) or {}
    return data.get("remain-retry-times", ""), data


async def test_every_opted_in_job_has_its_entry_before_any_failure(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, npu_cm: None
) -> None:
    custom = k8s.CustomObjectsApi(kube_client)
    settings = _settings(testbed, namespace)
    async with running_agent(settings):
        a = await make_job(kube_client, namespace, "aj-a", JobKind.ASCEND,
                           labels={"fault-scheduling": "force", "fault-retry-times": "3"})  # fmt: skip
        b = await make_job(kube_client, namespace, "aj-b", JobKind.ASCEND, labels={"fault-scheduling": "grace"})
        await make_job(kube_client, namespace, "aj-off", JobKind.ASCEND, labels={"fault-retry-times": "2"})
        want = {
            f"{namespace}/aj-a-{a.uid}": {"UUID": a.uid, "Times": 3},
            f"{namespace}/aj-b-{b.uid}": {"UUID": b.uid, "Times": 0},
        }
        text, data = await eventually(
            lambda: _entries(kube_client), lambda got: got[0] and json.loads(got[0]) == want,
            what="an entry for each opted-in job", timeout_s=20,
        )  # fmt: skip
        assert text == shared().request("remain-retry-times", remain=want)  # Go's bytes
        assert data["unrelated"] == "kept"
        # b stops opting in, a is deleted: both entries go, the other key stays
        await custom.patch_namespaced_custom_object(
            *ASCEND[:2], namespace, ASCEND[2], "aj-b", {"metadata": {"labels": {"fault-scheduling": "off"}}}, **MERGE
        )
        await custom.delete_namespaced_custom_object(*ASCEND[:2], namespace, ASCEND[2], "aj-a")
        text, data = await eventually(
            lambda: _entries(kube_client), lambda got: got[0] == "", what="the entries dropped", timeout_s=20
        )
        assert data["unrelated"] == "kept"
