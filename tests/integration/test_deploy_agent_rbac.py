"""deploy/'s RBAC is enough for the real agent, and no more: issue 7's proof on the testbed apiserver (RBAC on).

deploy/'s own Namespace, ServiceAccount, ClusterRole, ClusterRoleBinding, Role and RoleBinding (rendered from the
kustomize base, names unchanged) are created; a token for the ServiceAccount is minted with the TokenRequest API
and written into a kubeconfig with the testbed's CA. `fault-agent run` then runs as that ServiceAccount (its own
process, as in the Deployment) while a chip fault on the guide's Volcano Job goes all the way to a restart.
The objects are removed again at the end of the module (cluster-scoped names are shared with other tests).
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from support.polling import eventually

from testbed.agent_runner import AgentProcess
from testbed.cluster import Testbed
from testbed.inject import ChipFault, Injector
from testbed.rest import Rest, RestError
from testbed.service_account import service_account_token, write_token_kubeconfig

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RBAC_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# kind -> (API prefix, plural, namespaced)
PATHS = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
}
NODE_LABEL = "rbac.fault-agent.io/test"
NPU = "huawei.com/Ascend910"
VC = ("batch.volcano.sh", "v1alpha1", "jobs")


def _render_base() -> list[dict[str, Any]]:
    """tests/tools/test_deploy.py's render_base: what `kubectl apply -k deploy/` creates (one renderer for all)."""
    path = Path(__file__).resolve().parents[1] / "tools" / "test_deploy.py"
    spec = importlib.util.spec_from_file_location("_deploy_render_agent", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    objs: list[dict[str, Any]] = module.render_base()
    return objs


def _collection(obj: dict[str, Any]) -> str:
    prefix, plural, namespaced = PATHS[obj["kind"]]
    return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{plural}" if namespaced else f"{prefix}/{plural}"


def _wait(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


def _gone(rest: Rest, path: str) -> bool:
    try:
        rest.get(path)
    except RestError as e:
        if e.status == 404:
            return True
        raise
    return False


@pytest.fixture(scope="module")
def deploy_rbac(testbed: Testbed) -> Iterator[dict[str, Any]]:
    """deploy/'s RBAC objects created as they are; yields {"namespace", "service_account"}; removed afterwards
    (the namespace is waited for, so the deploy dry-run test can create it again)."""
    rest = testbed.rest()
    objs = [o for o in _render_base() if o["kind"] in RBAC_KINDS]
    ns = next(o for o in objs if o["kind"] == "Namespace")["metadata"]["name"]
    sa = next(o for o in objs if o["kind"] == "ServiceAccount")["metadata"]["name"]
    _wait(lambda: _gone(rest, f"/api/v1/namespaces/{ns}") or _active(rest, ns), f"namespace {ns} not terminating")
    for obj in sorted(objs, key=lambda o: RBAC_KINDS.index(o["kind"])):
        try:
            rest.request("POST", _collection(obj), obj)
        except RestError as e:
            if e.status != 409:
                raise
    try:
        yield {"namespace": ns, "service_account": sa}
    finally:
        for obj in objs:
            # the bookkeeping Roles live in MindCluster's namespaces, which stay
            bookkeeping = obj["metadata"].get("namespace") in {"volcano-system", "mindx-dl"}
            if obj["kind"] in {"ClusterRole", "ClusterRoleBinding", "Namespace"} or bookkeeping:
                path = f"{_collection(obj)}/{obj['metadata']['name']}"
                try:
                    rest.request("DELETE", path)
                except RestError as e:
                    if e.status != 404:
                        raise
        _wait(lambda: _gone(rest, f"/api/v1/namespaces/{ns}"), f"namespace {ns} deleted", timeout_s=120)


def _active(rest: Rest, ns: str) -> bool:
    return "deletionTimestamp" not in rest.get(f"/api/v1/namespaces/{ns}")["metadata"]


def _guide_vcjob(namespace: str, tag: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """tests/fixtures/seed-vcjob.yaml (rings-config + the guide's Job) moved to `namespace`, pods pinned to the
    nodes labelled NODE_LABEL=tag."""
    cm, job = copy.deepcopy([d for d in yaml.safe_load_all((FIXTURES / "seed-vcjob.yaml").read_text()) if d])
    cm["metadata"]["namespace"] = namespace
    job["metadata"]["namespace"] = namespace
    job["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"][NODE_LABEL] = tag
    return cm, job


async def _job_pods(api: k8s.ApiClient, namespace: str, name: str) -> list[Any]:
    pods = await k8s.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={name}")
    return [p for p in pods.items if p.metadata.deletion_timestamp is None]


async def _running(api: k8s.ApiClient, namespace: str, name: str, not_uids: set[str]) -> list[Any] | None:
    """The job's two pods once the job is Running and both are Running, annotated with chips, not in `not_uids`."""
    job = await k8s.CustomObjectsApi(api).get_namespaced_custom_object(*VC[:2], namespace, VC[2], name)
    if ((job.get("status") or {}).get("state") or {}).get("phase") != "Running":
        return None
    pods = await _job_pods(api, namespace, name)
    good = [
        p
        for p in pods
        if p.status.phase == "Running" and (p.metadata.annotations or {}).get(NPU) and p.metadata.uid not in not_uids
    ]
    return good if len(good) == 2 == len(pods) else None


@pytest.fixture
async def nodes(testbed: Testbed, kube_client: k8s.ApiClient, namespace: str) -> AsyncIterator[tuple[str, list[str]]]:
    """Four kwok nodes like the guide's, labelled for this test; yields (tag, names). At the end the test's
    jobs and pods go first (grace 0), then the nodes."""
    tag = uuid.uuid4().hex[:6]
    names = [f"rbac-{tag}-{i}" for i in range(4)]
    inj = Injector(testbed.rest())
    inj.add_nodes(names)
    core = k8s.CoreV1Api(kube_client)
    for name in names:
        await core.patch_node(name, {"metadata": {"labels": {NODE_LABEL: tag}}})

    async def ready() -> bool:
        for name in names:
            node = await core.read_node(name)
            if not any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
                return False
        return True

    await eventually(ready, what="kwok to make the nodes Ready")
    try:
        yield tag, names
    finally:
        await k8s.CustomObjectsApi(kube_client).delete_collection_namespaced_custom_object(*VC[:2], namespace, VC[2])
        await core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)

        async def no_pods() -> bool:
            return not (await core.list_namespaced_pod(namespace)).items

        await eventually(no_pods, what="the test's pods deleted", timeout_s=30)
        inj.delete_nodes(names)


async def test_agent_with_deploys_service_account_restarts_the_guides_job_without_a_403(
    testbed: Testbed,
    kube_client: k8s.ApiClient,
    namespace: str,
    deploy_rbac: dict[str, Any],
    nodes: tuple[str, list[str]],
    tmp_path: Path,
) -> None:
    tag, _ = nodes
    agent_ns = deploy_rbac["namespace"]
    token = await asyncio.to_thread(service_account_token, testbed.rest(), agent_ns, deploy_rbac["service_account"])
    kubeconfig = write_token_kubeconfig(tmp_path / "agent-kubeconfig", testbed, token)

    cm, job = _guide_vcjob(namespace, tag)
    await k8s.CoreV1Api(kube_client).create_namespaced_config_map(namespace, cm)  # type: ignore[arg-type]
    created = await k8s.CustomObjectsApi(kube_client).create_namespaced_custom_object(*VC[:2], namespace, VC[2], job)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await eventually(lambda: _running(kube_client, namespace, name, set()), what="the guide's job Running")

    agent = AgentProcess(
        testbed,
        tmp_path,
        settings={
            "KUBE__KUBECONFIG": str(kubeconfig),
            "LEADER__NAMESPACE": agent_ns,
            "KUBE__NAMESPACES": json.dumps([namespace]),
            "CLUSTER_NAME": f"rbac-{tag}",
            # faults other tests leave on their nodes must not trip this agent's breaker
            "POLICY__BREAKER_MIN_FAULTY_NODES": "1000",
        },
        name=f"rbac-{tag}",
    )
    await asyncio.to_thread(agent.start)  # /readyz: every watch listed with the ServiceAccount's token
    try:

        async def leads() -> bool:
            return agent.metric("fault_agent_leader") == 1

        await eventually(leads, what="the agent to take its Lease in " + agent_ns, timeout_s=30)

        bad = pods[0]
        chip = int(bad.metadata.annotations[NPU].split(",")[0].rsplit("-", 1)[1])
        Injector(testbed.rest()).chip_fault(bad.spec.node_name, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])

        async def restarted() -> bool:
            return agent.metric("fault_agent_actions_total", action="restart-job", result="done") >= 1

        await eventually(restarted, what="the restart done by the agent", timeout_s=60)
        old = {p.metadata.uid for p in pods}
        new_pods = await eventually(
            lambda: _running(kube_client, namespace, name, old), what="the job recovered with new pods", timeout_s=90
        )
        assert bad.spec.node_name not in {p.spec.node_name for p in new_pods}
        job_now = await k8s.CustomObjectsApi(kube_client).get_namespaced_custom_object(*VC[:2], namespace, VC[2], name)
        assert job_now["metadata"]["uid"] == uid
        assert int(job_now["status"].get("version", 0)) >= 1  # Volcano ran the RestartJob Command

        async def consumed() -> bool:  # the controller deletes each Command once it ran it
            cmds = await k8s.CustomObjectsApi(kube_client).list_namespaced_custom_object(
                "bus.volcano.sh", "v1alpha1", namespace, "commands"
            )
            return not cmds["items"]

        await eventually(consumed, what="the RestartJob Command consumed")

        async def recovered() -> bool:
            return agent.metric("fault_agent_recovery_seconds_count", outcome="recovered") >= 1

        await eventually(recovered, what="the agent to see the recovery", timeout_s=60)

        async def bookkept() -> bool:  # both of MindCluster's ConfigMaps, with deploy/bookkeeping-rbac.yaml
            # the remain-retry-times entry is written as soon as the job is seen (as MindCluster's plugin does, before
            # any failure), the reschedule record after the restart
            core = k8s.CoreV1Api(kube_client)
            try:
                npu = await core.read_namespaced_config_map("vcjob-fault-npu-cm", "volcano-system")
                reasons = await core.read_namespaced_config_map("job-reschedule-reason", "mindx-dl")
            except ApiException:
                return False
            entries = json.loads((npu.data or {}).get("remain-retry-times") or "{}")
            records = (reasons.data or {}).get("recent-reschedule-records") or ""
            return (entries.get(f"{namespace}/{name}-{uid}") or {}).get("UUID") == uid and name in records

        await eventually(bookkept, what="MindCluster's bookkeeping written", timeout_s=30)
        assert agent.metric("fault_agent_actions_total", action="bookkeeping", result="done") >= 1
        assert agent.metric("fault_agent_actions_total", result="failed") == 0
        lease = await k8s.CoordinationV1Api(kube_client).read_namespaced_lease("fault-agent-leader", agent_ns)
        assert lease.spec.holder_identity == agent.name  # the Role's leases rule, used for real
        # the apiserver denied the agent nothing: no 403 / Forbidden anywhere in its log
        log_text = agent.log.read_text(errors="replace")
        assert "forbidden" not in log_text.lower(), agent.tail(60)
        assert '"status": 403' not in log_text
        assert "403" not in [w.strip('",:') for w in log_text.split()], agent.tail(60)
    finally:
        agent.stop()


async def test_deploys_service_account_token_cannot_read_secrets_create_pods_or_delete_nodes(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, deploy_rbac: dict[str, Any]
) -> None:
    agent_ns = deploy_rbac["namespace"]
    token = await asyncio.to_thread(service_account_token, testbed.rest(), agent_ns, deploy_rbac["service_account"])
    cfg = k8s.Configuration(
        host=testbed.apiserver_url,
        api_key={"BearerToken": token},
        api_key_prefix={"BearerToken": "Bearer"},
    )
    cfg.ssl_ca_cert = str(testbed.ca_file)
    async with k8s.ApiClient(cfg) as sa:
        core = k8s.CoreV1Api(sa)
        review = await k8s.AuthenticationV1Api(sa).create_self_subject_review(k8s.V1SelfSubjectReview())
        assert review.status.user_info.username == f"system:serviceaccount:{agent_ns}:fault-agent"
        assert (await core.list_node(limit=1)).items is not None  # the token works: what it may do, it can

        some_node = f"rbac-{uuid.uuid4().hex[:6]}"
        Injector(testbed.rest()).add_nodes([some_node])
        pod = k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name="nope"),
            spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="c", image="busybox")]),
        )
        denied: dict[str, Callable[[], Awaitable[object]]] = {
            "get secret (own namespace)": lambda: core.read_namespaced_secret("anything", agent_ns),
            "get secret (kube-system)": lambda: core.read_namespaced_secret("anything", "kube-system"),
            "list secrets (namespace)": lambda: core.list_namespaced_secret(namespace),
            "list secrets (all)": lambda: core.list_secret_for_all_namespaces(),
            "create pod": lambda: core.create_namespaced_pod(namespace, pod),
            "delete node": lambda: core.delete_node(some_node),
        }
        statuses = {}
        try:
            for what, call in denied.items():
                try:
                    await call()
                    statuses[what] = 200
                except ApiException as e:
                    statuses[what] = e.status
            assert statuses == dict.fromkeys(denied, 403)
            # and nothing was done by the attempts
            assert (await k8s.CoreV1Api(kube_client).read_node(some_node)).metadata.name == some_node
            assert (await k8s.CoreV1Api(kube_client).list_namespaced_pod(namespace)).items == []
        finally:
            Injector(testbed.rest()).delete_nodes([some_node])
