"""A restart the apiserver refuses ends as a failed incident an operator is alerted to, not an incident retried
for good: the real agent, as a ServiceAccount whose ClusterRole is deploy/'s with only its read verbs (so the
claim (a create of the job's record in the agent's namespace, whose Role keeps only its Lease verbs and reads),
the rings-config reset and the Command create all get 403), on the testbed apiserver.

The incident stays ``acting`` while the agent retries the claim every tick, and fails at
``policy.recovery_deadline_s`` (here 10 s) with ``recovery.failed`` reason ``action-error`` (alert
FaultAgentRecoveryActionFailed), its detail naming the deadline and the 403; no Command is created and nothing is
written on the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from actions_support import (
    CommandRecorder,
    delete_device_info,
    delete_node,
    job_record,
    make_job,
    make_job_pod,
    make_node,
    make_rings_config,
    pods_by_name,
    put_device_info,
)
from kubernetes_asyncio import client as k8s
from support.polling import eventually
from test_deploy_agent_rbac import _render_base
from test_recovery import running_agent

from agent.core.cluster import JobKind
from agent.core.incidents import INCIDENT_ANNOTATION, Incident, Phase
from agent.settings import Settings
from testbed.cluster import Testbed
from testbed.rest import RestError
from testbed.service_account import service_account_token, write_token_kubeconfig

pytestmark = pytest.mark.integration

READ = {"get", "list", "watch"}
VC = ("batch.volcano.sh", "v1alpha1", "jobs")


@pytest.fixture
def read_only_agent(testbed: Testbed) -> Iterator[dict[str, str]]:
    """A namespace with deploy/'s ServiceAccount, Role (its Lease; of its ConfigMap verbs only get/list/watch) and
    RoleBinding, bound to a copy of deploy/'s ClusterRole that keeps only get/list/watch; yields {"namespace",
    "service_account"}; removed afterwards."""
    rest = testbed.rest()
    tag = uuid.uuid4().hex[:6]
    ns = f"fa-ro-{tag}"
    objs = _render_base()
    sa = next(o for o in objs if o["kind"] == "ServiceAccount")["metadata"]["name"]
    role = next(o for o in objs if o["kind"] == "Role" and o["metadata"]["namespace"] == "fault-agent")
    role = {**role, "rules": [
        {**r, "verbs": sorted(set(r["verbs"]) & READ)} if "configmaps" in r["resources"] else r for r in role["rules"]
    ]}  # fmt: skip
    cluster_role = next(o for o in objs if o["kind"] == "ClusterRole")
    rules = [{**r, "verbs": sorted(set(r["verbs"]) & READ)} for r in cluster_role["rules"]]
    rules = [r for r in rules if r["verbs"]]
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    subject = [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    created: list[str] = []

    def post(collection: str, body: dict[str, Any]) -> None:
        rest.request("POST", collection, body)
        created.append(f"{collection}/{body['metadata']['name']}")

    post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    post(f"/api/v1/namespaces/{ns}/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                                       "metadata": {"name": sa}})  # fmt: skip
    post(f"{rbac}/namespaces/{ns}/roles", {**role, "metadata": {"name": role["metadata"]["name"]}})
    post(f"{rbac}/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "fault-agent"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
        "subjects": subject,
    })  # fmt: skip
    name = f"fault-agent-read-only-{tag}"
    post(f"{rbac}/clusterroles", {**cluster_role, "metadata": {"name": name}, "rules": rules})
    post(f"{rbac}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": subject,
    })  # fmt: skip
    try:
        yield {"namespace": ns, "service_account": sa}
    finally:
        for path in reversed(created):
            if path.startswith((f"/api/v1/namespaces/{ns}/", f"{rbac}/namespaces/")):
                continue  # deleted with the namespace
            with contextlib.suppress(RestError):
                rest.request("DELETE", path)


async def _leads(engine: Any) -> bool:
    return bool(engine.is_leader)


def _failures(engine: Any, reason: str) -> float:
    for family in engine.ctx.metrics.registry.collect():
        for s in family.samples:
            if s.name == "fault_agent_recovery_failures_total" and s.labels.get("reason") == reason:
                return float(s.value)
    return 0.0


async def test_a_restart_the_apiserver_refuses_fails_its_incident_at_the_recovery_deadline(
    testbed: Testbed,
    kube_client: k8s.ApiClient,
    read_only_agent: dict[str, str],
    namespace: str,
    tmp_path: Path,
) -> None:
    agent_ns = read_only_agent["namespace"]
    token = await asyncio.to_thread(service_account_token, testbed.rest(), agent_ns, read_only_agent["service_account"])
    kubeconfig = write_token_kubeconfig(tmp_path / "agent-kubeconfig", testbed, token)
    settings = Settings.model_validate(
        {
            "cluster_name": f"ro-{uuid.uuid4().hex[:6]}",
            "kube": {"kubeconfig": str(kubeconfig), "namespaces": [namespace]},
            "kafka": {"enabled": False},
            "server": {"port": 0},
            "leader": {"namespace": agent_ns, "lease_duration_s": 3, "renew_deadline_s": 2, "retry_period_s": 0.2},
            "policy": {
                "recovery_deadline_s": 10,
                # faults other tests leave on their nodes must not trip this agent's breaker
                "breaker_min_faulty_nodes": 1000,
                "bookkeeping": False,
            },
        }
    )
    node = await make_node(kube_client)
    try:
        job = await make_job(kube_client, namespace, "ro", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
        await make_rings_config(kube_client, namespace, job.name)
        for i in range(2):
            await make_job_pod(kube_client, job, i, node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}")
        await eventually(
            lambda: pods_by_name(kube_client, namespace),
            lambda p: sum(1 for x in p.values() if x.status.phase == "Running") == 2,
            what="the job's pods Running",
        )
        async with CommandRecorder(kube_client, namespace) as rec, running_agent(settings, "ro-agent") as (engine, _):
            await eventually(lambda: _leads(engine), bool, what="the agent leads", timeout_s=30)
            await put_device_info(kube_client, node, {"Ascend910-1": ("SeparateNPU", "80E01801")})

            async def incident() -> Incident | None:
                found: Incident | None = engine.store.incident(job.uid)
                return found

            acting = await eventually(incident, lambda i: i is not None, what="the incident opened", timeout_s=20)
            assert acting is not None
            assert acting.phase is Phase.ACTING  # its claim got 403: not restarting, retried every tick

            async def reported() -> Incident | None:  # failed in the store first; reported once its PATCH answered
                return await incident() if _failures(engine, "action-error") else None

            failed = await eventually(
                reported,
                lambda i: i is not None and i.phase is Phase.FAILED,
                what="the incident failed at its 10 s deadline and reported",
                timeout_s=30,
            )
            assert failed is not None
            assert failed.detail.startswith("not restarted within 10 s of the fault: claim failed: HTTP 403")
            assert _failures(engine, "action-error") == 1
            assert rec.created == []  # the Command create was refused too
        custom = k8s.CustomObjectsApi(kube_client)
        obj = await custom.get_namespaced_custom_object(*VC[:2], namespace, VC[2], job.name)
        assert INCIDENT_ANNOTATION not in (obj["metadata"].get("annotations") or {})  # nothing written on it
        assert await job_record(kube_client, agent_ns, job) == {}  # nor a record: its create was refused
    finally:
        await k8s.CoreV1Api(kube_client).delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        await delete_device_info(kube_client, node)
        await delete_node(kube_client, node)
