"""deploy/ against the testbed's real kube-apiserver (RBAC on).

1. Every manifest of the kustomize base is accepted by a server-side dry-run, the ServiceMonitor and
   PrometheusRule against the Prometheus Operator's own CRDs (the testbed installs them at start).
2. The RBAC objects are created for real (in the test's fresh namespace, ClusterRole/Binding renamed per test),
   and SubjectAccessReviews show the ServiceAccount can do what the agent needs and nothing it does not.
3. A real token for that ServiceAccount (TokenRequest API) can list pods and create a Volcano Command, and gets
   403 on Secrets and on creating pods.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException


def _load_renderer() -> Callable[[], list[dict[str, Any]]]:
    """tests/tools/test_deploy.py's render_base: one renderer of the kustomize base for unit and integration tests."""
    path = Path(__file__).resolve().parents[1] / "tools" / "test_deploy.py"
    spec = importlib.util.spec_from_file_location("_deploy_render", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    render: Callable[[], list[dict[str, Any]]] = module.render_base
    return render


render_base = _load_renderer()

pytestmark = pytest.mark.integration

# kind -> (plural, namespaced)
PLURALS: dict[str, tuple[str, bool]] = {
    "Namespace": ("namespaces", False),
    "ServiceAccount": ("serviceaccounts", True),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "ConfigMap": ("configmaps", True),
    "PersistentVolumeClaim": ("persistentvolumeclaims", True),
    "Deployment": ("deployments", True),
    "Service": ("services", True),
    "PodDisruptionBudget": ("poddisruptionbudgets", True),
    "NetworkPolicy": ("networkpolicies", True),
    "ServiceMonitor": ("servicemonitors", True),
    "PrometheusRule": ("prometheusrules", True),
    "FlowSchema": ("flowschemas", False),
    "PriorityLevelConfiguration": ("prioritylevelconfigurations", False),
    "ValidatingAdmissionPolicy": ("validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("validatingadmissionpolicybindings", False),
}


def _path(obj: dict[str, Any], namespace: str) -> str:
    gv = obj["apiVersion"]
    prefix = "/api/v1" if gv == "v1" else f"/apis/{gv}"
    plural, namespaced = PLURALS[obj["kind"]]
    namespace = obj["metadata"].get("namespace") or namespace  # the bookkeeping Roles keep theirs
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"


async def _post(api: client.ApiClient, obj: dict[str, Any], namespace: str, *, dry_run: bool) -> dict[str, Any]:
    result: dict[str, Any] = await api.call_api(
        _path(obj, namespace),
        "POST",
        query_params=[("dryRun", "All")] if dry_run else [],
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=obj,
        response_types_map={200: "object", 201: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    return result


BOOKKEEPING = "fault-agent-bookkeeping"  # deploy/bookkeeping-rbac.yaml, in volcano-system and mindx-dl


def _retarget(objs: list[dict[str, Any]], namespace: str, suffix: str) -> list[dict[str, Any]]:
    """The base moved into `namespace`; cluster-scoped RBAC names get `suffix` so tests do not collide."""
    out = []
    for original in objs:
        o = copy.deepcopy(original)
        kind = o["kind"]
        if kind == "Namespace":
            continue
        if o["metadata"]["name"] == BOOKKEEPING:  # stays in MindCluster's namespace, named per test
            o["metadata"]["name"] += suffix
            if kind == "RoleBinding":
                o["roleRef"]["name"] += suffix
                for s in o["subjects"]:
                    s["namespace"] = namespace
            out.append(o)
            continue
        if kind in {
            "ClusterRole",
            "ClusterRoleBinding",
            "FlowSchema",
            "PriorityLevelConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        }:
            o["metadata"]["name"] += suffix
        else:
            o["metadata"]["namespace"] = namespace
        if kind == "FlowSchema":
            o["spec"]["priorityLevelConfiguration"]["name"] += suffix
            for rule in o["spec"]["rules"]:
                for subject in rule["subjects"]:
                    subject["serviceAccount"]["namespace"] = namespace
        if kind == "ValidatingAdmissionPolicyBinding":
            o["spec"]["policyName"] += suffix
        if kind in {"RoleBinding", "ClusterRoleBinding"}:
            for s in o["subjects"]:
                s["namespace"] = namespace
            if o["roleRef"]["kind"] == "ClusterRole":
                o["roleRef"]["name"] += suffix
        out.append(o)
    return out


async def _require_operator_crds(api: client.ApiClient) -> None:
    groups = await client.ApisApi(api).get_api_versions()
    assert any(g.name == "monitoring.coreos.com" for g in groups.groups), (
        "the testbed's apiserver has no monitoring.coreos.com: the testbed installs the Prometheus Operator's "
        "CRDs at start (testbed/build.py prometheus_operator_crds); restart a testbed started by older code"
    )


async def test_every_manifest_is_accepted_by_the_apiserver(kube_client: client.ApiClient, namespace: str) -> None:
    objs = render_base()
    # The Namespace object itself, as written (dry-run: nothing is created).
    ns_obj = next(o for o in objs if o["kind"] == "Namespace")
    got = await _post(kube_client, ns_obj, "", dry_run=True)
    assert got["metadata"]["name"] == "fault-agent"
    assert got["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"

    await _require_operator_crds(kube_client)
    accepted = []
    for obj in _retarget(objs, namespace, f"-{namespace}"):
        got = await _post(kube_client, obj, namespace, dry_run=True)
        assert got["kind"] == obj["kind"]
        accepted.append(obj["kind"])
    assert sorted(accepted) == sorted(k for k in (o["kind"] for o in objs) if k != "Namespace")


@pytest.fixture
async def agent_rbac(kube_client: client.ApiClient, namespace: str) -> AsyncIterator[str]:
    """The base's ServiceAccount, Role(Binding) and ClusterRole(Binding) created in `namespace`; yields the SA user."""
    suffix = f"-{namespace}"
    objs = [
        o
        for o in _retarget(render_base(), namespace, suffix)
        if o["kind"] in {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    ]
    for obj in objs:
        await _post(kube_client, obj, namespace, dry_run=False)
    rbac = client.RbacAuthorizationV1Api(kube_client)
    try:
        yield f"system:serviceaccount:{namespace}:fault-agent"
    finally:
        for call, name in (
            (rbac.delete_cluster_role_binding, "fault-agent" + suffix),
            (rbac.delete_cluster_role, "fault-agent" + suffix),
        ):
            try:
                await call(name)
            except ApiException as e:
                if e.status != 404:
                    raise
        for ns in ("volcano-system", "mindx-dl"):
            for delete in (rbac.delete_namespaced_role_binding, rbac.delete_namespaced_role):
                try:
                    await delete(BOOKKEEPING + suffix, ns)
                except ApiException as e:
                    if e.status != 404:
                        raise


def _cases(ns: str) -> list[tuple[str, str, str, str, str, str, bool]]:
    # (verb, group, resource, subresource, namespace, name, allowed); "" namespace = all namespaces
    other = "kube-system"
    return [
        ("watch", "", "pods", "", "", "", True),
        ("list", "", "pods", "", "", "", True),
        ("delete", "", "pods", "", "team-a", "", True),
        ("patch", "", "pods", "", "team-a", "", True),  # huawei.com/pod-status (fault-scheduling=external-*)
        ("watch", "", "nodes", "", "", "", True),
        ("patch", "", "nodes", "", "", "node-1", True),
        ("watch", "", "configmaps", "", "", "", True),
        ("update", "", "configmaps", "", "team-a", "rings-config-llama", True),
        ("watch", "batch.volcano.sh", "jobs", "", "", "", True),
        ("get", "batch.volcano.sh", "jobs", "", "team-a", "", True),
        ("watch", "mindxdl.gitee.com", "ascendjobs", "", "", "", True),
        ("get", "mindxdl.gitee.com", "ascendjobs", "", "team-a", "", True),
        ("create", "bus.volcano.sh", "commands", "", "team-a", "", True),
        ("create", "coordination.k8s.io", "leases", "", ns, "", True),
        ("update", "coordination.k8s.io", "leases", "", ns, "fault-agent-leader", True),
        ("create", "", "configmaps", "", ns, "", True),
        # resubmission records in its own namespace (agent.core.resubmission): listed, created, deleted
        ("list", "", "configmaps", "", ns, "", True),
        ("delete", "", "configmaps", "", ns, "fault-agent-resubmit-0d9c7b62-uid", True),
        # job records in its own namespace (agent.core.records): watched, claimed, patched, deleted
        ("watch", "", "configmaps", "", ns, "", True),
        ("update", "", "configmaps", "", ns, "fault-agent-job-0d9c7b62-uid", True),
        ("patch", "", "configmaps", "", ns, "fault-agent-job-0d9c7b62-uid", True),
        ("delete", "", "configmaps", "", ns, "fault-agent-job-0d9c7b62-uid", True),
        # MindCluster's bookkeeping ConfigMaps, created when missing (deploy/bookkeeping-rbac.yaml)
        ("create", "", "configmaps", "", "volcano-system", "", True),
        ("create", "", "configmaps", "", "mindx-dl", "", True),
        ("update", "", "configmaps", "", "volcano-system", "vcjob-fault-npu-cm", True),
        ("patch", "", "configmaps", "", "mindx-dl", "job-reschedule-reason", True),
        # nothing unneeded
        ("list", "bus.volcano.sh", "commands", "", "team-a", "", False),
        ("get", "", "secrets", "", ns, "", False),
        ("list", "", "secrets", "", "", "", False),
        ("get", "", "secrets", "", other, "", False),
        ("create", "", "pods", "", "team-a", "", False),
        ("create", "", "pods", "exec", "team-a", "", False),
        ("delete", "", "nodes", "", "", "node-1", False),
        ("create", "", "configmaps", "", "team-a", "", False),
        ("delete", "", "configmaps", "", "team-a", "", False),
        # resubmission is off in the base: the README's resubmission overlay adds these verbs (issue 37 item 8)
        ("create", "batch.volcano.sh", "jobs", "", "team-a", "", False),
        ("delete", "batch.volcano.sh", "jobs", "", "team-a", "", False),
        ("delete", "mindxdl.gitee.com", "ascendjobs", "", "team-a", "", False),
        ("delete", "bus.volcano.sh", "commands", "", "team-a", "", False),
        ("create", "coordination.k8s.io", "leases", "", other, "", False),
        ("update", "", "pods", "", "team-a", "", False),
        # nothing written on a job: its controller's read-modify-write updates would conflict (agent.core.records)
        ("patch", "batch.volcano.sh", "jobs", "", "team-a", "", False),
        ("update", "batch.volcano.sh", "jobs", "", "team-a", "", False),
        ("patch", "mindxdl.gitee.com", "ascendjobs", "", "team-a", "", False),
        ("update", "mindxdl.gitee.com", "ascendjobs", "", "team-a", "", False),
        ("escalate", "rbac.authorization.k8s.io", "clusterroles", "", "", "", False),
        ("create", "rbac.authorization.k8s.io", "rolebindings", "", ns, "", False),
    ]


async def test_service_account_permissions_by_subject_access_review(
    kube_client: client.ApiClient, namespace: str, agent_rbac: str
) -> None:
    authz = client.AuthorizationV1Api(kube_client)
    wrong = []
    for verb, group, resource, sub, ns, name, allowed in _cases(namespace):
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=agent_rbac,
                groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb,
                    group=group,
                    resource=resource,
                    subresource=sub or None,
                    namespace=ns or None,
                    name=name or None,
                ),
            )
        )
        result = await authz.create_subject_access_review(review)
        if bool(result.status.allowed) is not allowed:
            wrong.append(
                f"{verb} {group or 'core'}/{resource}{'/' + sub if sub else ''} in {ns or '*'}: "
                f"allowed={result.status.allowed}, want {allowed}"
            )
    assert wrong == []


async def _sa_client(kube_client: client.ApiClient, namespace: str) -> client.ApiClient:
    core = client.CoreV1Api(kube_client)
    tr = await core.create_namespaced_service_account_token(
        "fault-agent",
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)  # [] = the apiserver's audience
        ),
    )
    admin = kube_client.configuration
    cfg = client.Configuration(
        host=admin.host,
        api_key={"BearerToken": tr.status.token},
        api_key_prefix={"BearerToken": "Bearer"},
    )
    cfg.ssl_ca_cert = admin.ssl_ca_cert
    cfg.verify_ssl = admin.verify_ssl
    return client.ApiClient(configuration=cfg)


async def test_service_account_token_is_least_privilege(
    kube_client: client.ApiClient, namespace: str, agent_rbac: str
) -> None:
    sa = await _sa_client(kube_client, namespace)
    try:
        # who am I: the token authenticates as the ServiceAccount, not as the admin
        review = await client.AuthenticationV1Api(sa).create_self_subject_review(client.V1SelfSubjectReview())
        assert review.status.user_info.username == agent_rbac

        core = client.CoreV1Api(sa)
        pods = await core.list_pod_for_all_namespaces(limit=1)
        assert pods.items is not None
        cms = await core.list_namespaced_config_map("kube-system", limit=1)
        assert cms.items is not None

        command = await client.CustomObjectsApi(sa).create_namespaced_custom_object(
            "bus.volcano.sh",
            "v1alpha1",
            namespace,
            "commands",
            {
                "apiVersion": "bus.volcano.sh/v1alpha1",
                "kind": "Command",
                "metadata": {"generateName": "llama-restartjob-"},
                "action": "RestartJob",
                "reason": "rbac-test",
                "message": "created with the agent's token",
                "target": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "llama", "uid": "0"},
            },
        )
        assert command["metadata"]["name"].startswith("llama-restartjob-")

        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name="nope"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
        )
        forbidden: list[Callable[[], Awaitable[object]]] = [
            lambda: core.list_namespaced_secret(namespace),
            lambda: core.list_secret_for_all_namespaces(),
            lambda: core.read_namespaced_secret("anything", "kube-system"),
            lambda: core.create_namespaced_pod(namespace, pod),
        ]
        statuses = []
        for call in forbidden:
            try:
                await call()
                statuses.append(200)
            except ApiException as e:
                statuses.append(e.status)
        assert statuses == [403, 403, 403, 403]
    finally:
        await sa.close()
