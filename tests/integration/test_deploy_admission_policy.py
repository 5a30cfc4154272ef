"""deploy/admission-policy.yaml on the testbed apiserver (ValidatingAdmissionPolicy on): the second wall behind
RBAC for the agent's ServiceAccount (issue 20).

deploy/'s Namespace, ServiceAccount, ClusterRole/Role and bindings, the agent's settings ConfigMap and the two
policies with their bindings (rendered from the kustomize base, names unchanged) are created for the module;
tokens for the ServiceAccount come from the TokenRequest API. Resubmission is turned on for a test by deleting
the binding fault-agent-resubmit-off, as deploy/README.md says, and off again by creating it.

1. Writes that RBAC lets through but the agent never makes are denied (403) with the message of the rule that
   denies them: a kube-system ConfigMap, its own settings, a node label, another party's taint, a NoExecute
   taint, a cordon, a system pod, a job's spec or labels, a job create/delete with resubmission off, an
   AbortJob Command, another Lease; none of them changes anything.
2. The agent's own writer (agent.actions.ClusterWriter, agent.cli.breaker), called with the ServiceAccount's
   token, gets every write of the recovery loop through, resubmission once it is on.
3. The agent itself, running as the ServiceAccount under the policy, goes through chip fault → RestartJob
   Command and rings-config reset, node quarantine taint and untaint, and resubmission with it on,
   with no action failed; and the RBAC module's real-Volcano test (the agent as its own process, the guide's job
   restarted by the Volcano controller, no 403 anywhere in its log) runs again, under the policy.
4. SelfSubjectRulesReview with the token: no Secrets, no pods/exec or attach, no RBAC objects, no wildcard.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import test_deploy_agent_rbac as rbac_tests
from actions_support import (
    CommandRecorder,
    delete_device_info,
    delete_node,
    list_commands,
    make_job,
    make_job_pod,
    make_node,
    make_rings_config,
    pods_by_name,
    put_device_info,
)
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from support.polling import eventually
from test_deploy_agent_rbac import _render_base
from test_recovery_quarantine import _delete_node_info, _put_node_info

from agent.actions import ClusterWriter
from agent.actions.breaker_store import write_breaker_state
from agent.actions.results import Outcome
from agent.actions.writer import PodRef
from agent.core import resubmission
from agent.core.cluster import JobKind
from agent.core.incidents import RESUBMITTED_FROM_ANNOTATION
from agent.core.kube_events import KubeEvent, Regarding
from agent.core.policy import POD_STATUS_ANNOTATION as POD_STATUS
from agent.core.resetconfig import ResetConfigUpdate, initial_reset_config
from agent.runtime.app import run_agent
from agent.settings import Settings
from agent.sinks.kube_events import event_body
from testbed.cluster import Testbed
from testbed.rest import Rest, RestError
from testbed.service_account import write_token_kubeconfig

pytestmark = pytest.mark.integration

KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
# kind -> (API prefix, plural, namespaced)
PATHS = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicies",
        False,
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
}
SETTINGS_CM = "fault-agent-config"
RESUBMIT_OFF = "fault-agent-resubmit-off"
RULES = (
    "namespaces",
    "opt-in",
    "resubmit-records",
    "rings-config",
    "reset-config",
    "pod-uid",
    "configmaps",
    "node-taint",
    "pods",
    "job-writes",
    "job-resubmit",
    "commands",
    "leases",
    "events",
    "known-writes",
)
TAINT_KEY = "fault-agent.io/fault"
OTHER_TAINT = {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"}
VC = ("batch.volcano.sh", "v1alpha1", "jobs")
MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}


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


def _settled(rest: Rest, ns: str) -> bool:
    """The namespace is absent or active (not terminating: a previous module's is being removed)."""
    try:
        return "deletionTimestamp" not in rest.get(f"/api/v1/namespaces/{ns}")["metadata"]
    except RestError as e:
        if e.status == 404:
            return True
        raise


@pytest.fixture(scope="module")
def confined(testbed: Testbed) -> Iterator[dict[str, str]]:
    """deploy/'s RBAC, settings ConfigMap, admission policies and bindings, created as they are; yields
    {"namespace", "service_account"}; removed afterwards (cluster-scoped names are shared with other tests)."""
    rest = testbed.rest()
    objs = [
        o
        for o in _render_base()
        if o["kind"] in KINDS and (o["kind"] != "ConfigMap" or o["metadata"]["name"] == SETTINGS_CM)
    ]
    assert {o["kind"] for o in objs} == set(KINDS), "deploy/ lacks part of the policy"
    ns = next(o for o in objs if o["kind"] == "Namespace")["metadata"]["name"]
    sa = next(o for o in objs if o["kind"] == "ServiceAccount")["metadata"]["name"]
    _wait(lambda: _settled(rest, ns), f"namespace {ns} not terminating", timeout_s=120)
    for obj in sorted(objs, key=lambda o: KINDS.index(o["kind"])):
        try:
            rest.request("POST", _collection(obj), obj)
        except RestError as e:
            if e.status != 409:
                raise
            rest.request("PUT", f"{_collection(obj)}/{obj['metadata']['name']}", obj)
    try:
        yield {"namespace": ns, "service_account": sa}
    finally:
        for obj in reversed(objs):
            # cluster-scoped, or a bookkeeping Role in MindCluster's namespaces; the namespace takes the rest
            if not PATHS[obj["kind"]][2] or obj["metadata"].get("namespace") != ns:
                try:
                    rest.request("DELETE", f"{_collection(obj)}/{obj['metadata']['name']}")
                except RestError as e:
                    if e.status != 404:
                        raise
        _wait(lambda: _gone(rest, f"/api/v1/namespaces/{ns}"), f"namespace {ns} deleted", timeout_s=120)


async def _token(api: k8s.ApiClient, namespace: str, sa: str) -> str:
    tr = await k8s.CoreV1Api(api).create_namespaced_service_account_token(
        sa,
        namespace,
        k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)),
    )
    return str(tr.status.token)


def _message(e: ApiException) -> str:
    try:
        return str(json.loads(e.body).get("message", e.body))
    except (TypeError, ValueError):
        return str(e.body)


async def _denied(call: Callable[[], Awaitable[object]]) -> str:
    """The 403 message `call` gets; "ALLOWED" when it was let through, "HTTP <status>: ..." for another error."""
    try:
        await call()
    except ApiException as e:
        return _message(e) if e.status == 403 else f"HTTP {e.status}: {_message(e)}"
    return "ALLOWED"


@pytest.fixture
async def sa_api(
    testbed: Testbed, kube_client: k8s.ApiClient, confined: dict[str, str]
) -> AsyncIterator[k8s.ApiClient]:
    """An ApiClient with a token of the agent's ServiceAccount, once the policy is enforced for it."""
    token = await _token(kube_client, confined["namespace"], confined["service_account"])
    cfg = k8s.Configuration(
        host=testbed.apiserver_url, api_key={"BearerToken": token}, api_key_prefix={"BearerToken": "Bearer"}
    )
    cfg.ssl_ca_cert = str(testbed.ca_file)
    async with k8s.ApiClient(cfg) as api:
        probe = f"fault-agent-policy-probe-{uuid.uuid4().hex[:6]}"
        admin_core = k8s.CoreV1Api(kube_client)
        await admin_core.create_namespaced_config_map(
            "kube-system", k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=probe), data={"a": "b"})
        )
        try:

            async def enforced() -> str:
                try:
                    await k8s.CoreV1Api(api).patch_namespaced_config_map(
                        probe, "kube-system", {"data": {"a": "c"}}, dry_run="All"
                    )
                except ApiException as e:
                    return _message(e) if e.status == 403 else ""
                return ""

            # the apiserver loads policies and bindings through informers: a second or so
            await eventually(enforced, lambda m: "rule configmaps" in m, what="the policy enforced", timeout_s=30)
        finally:
            await admin_core.delete_namespaced_config_map(probe, "kube-system")
        await _set_resubmit(testbed, api, confined["namespace"], False)  # the default, enforced too
        yield api


async def _set_resubmit(testbed: Testbed, sa_api: k8s.ApiClient, agent_ns: str, on: bool) -> None:
    """Turn resubmission on (remove the binding fault-agent-resubmit-off, as a cluster admin) or off (create it
    from deploy/ again) and wait until the apiserver follows (a dry-run create of a resubmitted job as the
    ServiceAccount)."""
    rest = testbed.rest()
    binding = next(o for o in _render_base() if o["kind"] == KINDS[-1] and o["metadata"]["name"] == RESUBMIT_OFF)
    # RBAC as deploy/README.md's resubmission overlay has it: create and delete on jobs added to the ClusterRole
    role = next(o for o in _render_base() if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "fault-agent")
    if on:
        for rule in role["rules"]:
            if rule["resources"] in (["jobs"], ["ascendjobs"]):
                rule["verbs"] += ["create", "delete"]
    rest.request("PUT", f"{_collection(role)}/{role['metadata']['name']}", role)
    try:
        if on:
            rest.request("DELETE", f"{_collection(binding)}/{RESUBMIT_OFF}")
        else:
            rest.request("POST", _collection(binding), binding)
    except RestError as e:
        if e.status not in (404, 409):
            raise
    body = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": "probe",
            "labels": {"fault-scheduling": "force"},
            "annotations": {RESUBMITTED_FROM_ANNOTATION: "x"},
        },
        "spec": {"minAvailable": 1, "schedulerName": "volcano", "tasks": []},
    }

    async def allowed() -> bool:
        try:
            await k8s.CustomObjectsApi(sa_api).create_namespaced_custom_object(
                *VC[:2],
                "default",
                VC[2],
                body,
                dry_run="All",  # a namespace the agent acts in
            )
        except ApiException as e:
            if e.status != 403:
                raise
            return False
        return True

    await eventually(allowed, lambda a: a is on, what=f"resubmission {'on' if on else 'off'}", timeout_s=30)


@pytest.fixture
async def node(kube_client: k8s.ApiClient) -> AsyncIterator[str]:
    """A kwok node with another party's taint on it."""
    name = await make_node(kube_client)
    await k8s.CoreV1Api(kube_client).patch_node(name, {"spec": {"taints": [OTHER_TAINT]}})
    try:
        yield name
    finally:
        await delete_device_info(kube_client, name)
        await delete_node(kube_client, name)


def _own_taints(node: Any) -> list[tuple[str, str, str]]:
    """A node's taints other than the lifecycle controller's node.kubernetes.io/* (they follow kwok's readiness)."""
    return sorted(
        (t.key, t.value or "", t.effect) for t in node.spec.taints or [] if not t.key.startswith("node.kubernetes.io/")
    )


async def test_writes_the_agent_does_not_make_are_denied_with_the_rules_message(
    kube_client: k8s.ApiClient, sa_api: k8s.ApiClient, confined: dict[str, str], namespace: str, node: str
) -> None:
    agent_ns = confined["namespace"]
    tag = uuid.uuid4().hex[:6]
    admin, core, custom = k8s.CoreV1Api(kube_client), k8s.CoreV1Api(sa_api), k8s.CustomObjectsApi(sa_api)
    # objects RBAC lets the agent write, but that are none of its business
    system_cm = f"policy-test-{tag}"
    await admin.create_namespaced_config_map(
        "kube-system", k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=system_cm), data={"Corefile": ".:53"})
    )
    system_pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=f"system-{tag}", labels={"k8s-app": "kube-dns"}),
        spec=k8s.V1PodSpec(
            node_name=node,
            containers=[k8s.V1Container(name="c", image="fake/dns:1")],
            tolerations=[k8s.V1Toleration(operator="Exists")],
        ),
    )
    await admin.create_namespaced_pod("kube-system", system_pod)
    job = await make_job(kube_client, namespace, "train", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
    job_pod = await make_job_pod(kube_client, job, 0, node)
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job.name, "uid": job.uid}
    before_node = await admin.read_node(node)
    before_job = await k8s.CustomObjectsApi(kube_client).get_namespaced_custom_object(
        *VC[:2], namespace, VC[2], job.name
    )

    def command(action: str, target: dict[str, Any]) -> Callable[[], Awaitable[object]]:
        body = {
            "apiVersion": "bus.volcano.sh/v1alpha1",
            "kind": "Command",
            "metadata": {"name": f"c-{action.lower()}-{target['kind'].lower()}"},
            "action": action,
            "target": target,
        }
        return lambda: custom.create_namespaced_custom_object("bus.volcano.sh", "v1alpha1", namespace, "commands", body)

    def patch_node(patch: dict[str, Any]) -> Callable[[], Awaitable[object]]:
        return lambda: core.patch_node(node, patch, **MERGE)

    def patch_job(patch: dict[str, Any]) -> Callable[[], Awaitable[object]]:
        return lambda: custom.patch_namespaced_custom_object(*VC[:2], namespace, VC[2], job.name, patch, **MERGE)

    resubmitted = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "copy", "annotations": {RESUBMITTED_FROM_ANNOTATION: job.uid}},
        "spec": {"minAvailable": 2, "schedulerName": "volcano", "tasks": []},
    }
    lease = k8s.V1Lease(metadata=k8s.V1ObjectMeta(name="not-the-leader-lease"), spec=k8s.V1LeaseSpec())
    ours = {"key": TAINT_KEY, "value": "SeparateNPU", "effect": "NoSchedule"}
    cases: dict[str, tuple[Callable[[], Awaitable[object]], str]] = {
        "kube-system ConfigMap": (
            lambda: core.patch_namespaced_config_map(system_cm, "kube-system", {"data": {"Corefile": "evil"}}),
            "configmaps",
        ),
        "its own settings": (
            lambda: core.patch_namespaced_config_map(SETTINGS_CM, agent_ns, {"data": {"agent.yaml": "{}"}}),
            "configmaps",
        ),
        "another ConfigMap in its namespace": (
            lambda: core.create_namespaced_config_map(agent_ns, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="x"))),
            "configmaps",
        ),
        "delete of its own settings (delete is for resubmission records only)": (
            lambda: core.delete_namespaced_config_map(SETTINGS_CM, agent_ns, dry_run="All"),
            "configmaps",
        ),
        "node label": (
            patch_node({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}),
            "node-taint",
        ),
        "node annotation of another key": (
            patch_node({"metadata": {"annotations": {"kwok.x-k8s.io/node": None}}}),
            "node-taint",
        ),
        "another party's taint removed": (patch_node({"spec": {"taints": [ours]}}), "node-taint"),
        "own taint as NoExecute": (
            patch_node({"spec": {"taints": [OTHER_TAINT, {**ours, "effect": "NoExecute"}]}}),
            "node-taint",
        ),
        "node cordoned": (patch_node({"spec": {"unschedulable": True}}), "node-taint"),
        "system pod deleted": (lambda: core.delete_namespaced_pod(f"system-{tag}", "kube-system"), "namespaces"),
        "system pod marked huawei.com/pod-status": (
            lambda: core.patch_namespaced_pod(
                f"system-{tag}", "kube-system", {"metadata": {"annotations": {POD_STATUS: "Unhealthy-x"}}}, **MERGE
            ),
            "namespaces",
        ),
        "job pod: another annotation": (
            lambda: core.patch_namespaced_pod(
                job_pod.metadata.name, namespace, {"metadata": {"annotations": {"team": "x"}}}, **MERGE
            ),
            "pods",
        ),
        "job pod: a label beside the mark": (
            lambda: core.patch_namespaced_pod(
                job_pod.metadata.name,
                namespace,
                {"metadata": {"labels": {"x": "y"}, "annotations": {POD_STATUS: "Unhealthy-x"}}},
                **MERGE,
            ),
            "pods",
        ),
        # no write on a job at all (the job's controller's updates would conflict): RBAC grants no patch on jobs
        # any more, so these stop there, before the policy's rule job-writes (the second wall) is asked
        "job spec": (patch_job({"spec": {"minAvailable": 1}}), "rbac"),
        "job label": (patch_job({"metadata": {"labels": {"fault-scheduling": "off"}}}), "rbac"),
        "job annotation not the agent's": (patch_job({"metadata": {"annotations": {"team": "x"}}}), "rbac"),
        # what earlier versions wrote
        "the agent's own incident annotation on a job": (
            patch_job({"metadata": {"annotations": {"fault-agent.io/incident": "{}"}}}),
            "rbac",
        ),
        "job deleted, resubmission off": (
            lambda: custom.delete_namespaced_custom_object(*VC[:2], namespace, VC[2], job.name),
            "rbac",  # RBAC grants no delete on jobs while resubmission is off; the binding resubmit-off is behind it
        ),
        "job created, resubmission off": (
            lambda: custom.create_namespaced_custom_object(*VC[:2], namespace, VC[2], resubmitted),
            "rbac",
        ),
        "AbortJob Command": (command("AbortJob", owner), "commands"),
        "Command targeting a Pod": (
            command("RestartJob", {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "y"}),
            "commands",
        ),
        "another Lease": (
            lambda: k8s.CoordinationV1Api(sa_api).create_namespaced_lease(agent_ns, lease),
            "leases",
        ),
        "an Event in another controller's name": (
            lambda: k8s.EventsV1Api(sa_api).create_namespaced_event(
                namespace,
                {  # type: ignore[arg-type]
                    "metadata": {"name": f"forged-{tag}"},
                    "eventTime": "2026-01-01T00:00:00.000000Z",
                    "reportingController": "kubelet",
                    "reportingInstance": "x",
                    "action": "Kill",
                    "reason": "Killing",
                    "type": "Normal",
                    "regarding": {"kind": "Pod", "namespace": namespace, "name": "x"},
                },
            ),
            "events",
        ),
    }
    try:
        messages = {what: await _denied(call) for what, (call, _) in cases.items()}
        rbac = "is forbidden: User"  # RBAC's own denial (no policy rule reached)
        rules = {
            what: "rbac" if rbac in m else next((r for r in RULES if f"rule {r}:" in m), m)
            for what, m in messages.items()
        }
        assert rules == {what: rule for what, (_, rule) in cases.items()}
        assert all(m.count(" denied; ") == 1 for m in messages.values() if rbac not in m), messages  # request, why
        assert "UPDATE configmaps kube-system/" + system_cm in messages["kube-system ConfigMap"]
        assert "DELETE pods kube-system/system-" + tag in messages["system pod deleted"]
        assert "cannot create resource" in messages["job created, resubmission off"]
        # and nothing was changed by the attempts
        cm = await admin.read_namespaced_config_map(system_cm, "kube-system")
        assert cm.data == {"Corefile": ".:53"}
        assert (await admin.read_namespaced_config_map(SETTINGS_CM, agent_ns)).data["agent.yaml"] != "{}"
        now_node = await admin.read_node(node)
        assert now_node.metadata.labels == before_node.metadata.labels
        assert now_node.metadata.annotations.get("kwok.x-k8s.io/node") == "fake"
        assert _own_taints(now_node) == _own_taints(before_node) == [tuple(OTHER_TAINT.values())]
        assert not now_node.spec.unschedulable
        assert (await admin.read_namespaced_pod(f"system-{tag}", "kube-system")).metadata.deletion_timestamp is None
        assert POD_STATUS not in (
            (await admin.read_namespaced_pod(f"system-{tag}", "kube-system")).metadata.annotations or {}
        )
        marked = await admin.read_namespaced_pod(job_pod.metadata.name, namespace)
        assert not {"team", POD_STATUS} & set(marked.metadata.annotations or {})
        assert "x" not in (marked.metadata.labels or {})
        now_job = await k8s.CustomObjectsApi(kube_client).get_namespaced_custom_object(
            *VC[:2], namespace, VC[2], job.name
        )
        assert now_job["metadata"]["uid"] == job.uid
        assert now_job["spec"] == before_job["spec"]
        assert now_job["metadata"]["labels"] == before_job["metadata"]["labels"]
    finally:
        with contextlib.suppress(ApiException):  # 404 when a broken policy let the write through
            await admin.delete_namespaced_config_map(system_cm, "kube-system")
        with contextlib.suppress(ApiException):
            await admin.delete_namespaced_pod(f"system-{tag}", "kube-system", grace_period_seconds=0)


async def test_issue_37_writes_are_denied_with_the_rules_message(
    testbed: Testbed,
    kube_client: k8s.ApiClient,
    sa_api: k8s.ApiClient,
    confined: dict[str, str],
    namespace: str,
    node: str,
) -> None:
    """Issue 37 items 5-8, each attempt under the agent's token: opt-in (as the apiserver holds the job, through the
    pod's controller or the Command's target), namespaces, the shape of rings-config/reset-config, Commands and
    resubmission records, the UID precondition on pod deletes, and resubmission (turned on) only of a Failed,
    opted-in job in a namespace the agent acts in."""
    agent_ns = confined["namespace"]
    tag = uuid.uuid4().hex[:6]
    admin, admin_custom = k8s.CoreV1Api(kube_client), k8s.CustomObjectsApi(kube_client)
    core, custom = k8s.CoreV1Api(sa_api), k8s.CustomObjectsApi(sa_api)
    optin = await make_job(kube_client, namespace, "optin", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
    plain = await make_job(kube_client, namespace, "plain", JobKind.VOLCANO)
    off = await make_job(kube_client, namespace, "off", JobKind.VOLCANO, labels={"fault-scheduling": "off"})
    acplain = await make_job(kube_client, namespace, "acplain", JobKind.ASCEND)
    pods = {j.name: await make_job_pod(kube_client, j, 0, node) for j in (optin, plain, off, acplain)}
    for j in (optin, plain):
        await make_rings_config(kube_client, namespace, j.name)
        await admin.create_namespaced_config_map(namespace, initial_reset_config(j.name, namespace))
    # a pod that only carries Volcano's job-name label (no controller), in kube-system and in the jobs' namespace
    labelled = {"volcano.sh/job-name": optin.name}
    for ns in ("kube-system", namespace):
        await admin.create_namespaced_pod(
            ns,
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(name=f"labelled-{tag}", labels=labelled),
                spec=k8s.V1PodSpec(
                    node_name=node,
                    containers=[k8s.V1Container(name="c", image="fake/x:1")],
                    tolerations=[k8s.V1Toleration(operator="Exists")],
                ),
            ),
        )
    await make_rings_config(kube_client, "kube-system", f"evil-{tag}")
    before = {
        name: (await admin.read_namespaced_config_map(name, namespace)).to_dict()
        for name in (f"rings-config-{optin.name}", f"rings-config-{plain.name}", f"reset-config-{plain.name}")
    }

    def delete_pod(ns: str, name: str, uid: str | None) -> Callable[[], Awaitable[object]]:
        options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=uid)) if uid else None
        return lambda: core.delete_namespaced_pod(name, ns, body=options)

    def command(ns: str, job: Any, *, owned: bool = True) -> Callable[[], Awaitable[object]]:
        ref = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job.name, "uid": job.uid}
        meta: dict[str, Any] = {"name": f"c-{job.name}-{tag}"}
        if owned:
            meta["ownerReferences"] = [{**ref, "controller": True}]
        body = {"apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command", "metadata": meta}
        body |= {"action": "RestartJob", "target": ref}
        return lambda: custom.create_namespaced_custom_object("bus.volcano.sh", "v1alpha1", ns, "commands", body)

    def patch_cm(ns: str, name: str, patch: dict[str, Any]) -> Callable[[], Awaitable[object]]:
        return lambda: core.patch_namespaced_config_map(name, ns, patch, **MERGE)

    initializing = {"data": {"hccl.json": '{"status":"initializing"}'}}
    record = {
        "metadata": {
            "name": f"fault-agent-resubmit-{uuid.uuid4()}",
            "labels": {"fault-agent.io/resubmission": "true"},
        },
        "data": {"namespace": "kube-system", "name": "evil", "kind": "volcano", "body": "{}"},
    }
    cases: dict[str, tuple[Callable[[], Awaitable[object]], str]] = {
        # 5: opt-in, from the job as stored (its fault-scheduling label), through the pod's controller
        "pod of a job that did not opt in": (
            delete_pod(namespace, pods["plain"].metadata.name, pods["plain"].metadata.uid),
            "opt-in",
        ),
        "pod of a job labelled off": (
            delete_pod(namespace, pods["off"].metadata.name, pods["off"].metadata.uid),
            "opt-in",
        ),
        "pod of an AscendJob that did not opt in": (
            delete_pod(namespace, pods["acplain"].metadata.name, pods["acplain"].metadata.uid),
            "opt-in",
        ),
        "RestartJob Command for a job that did not opt in": (command(namespace, plain), "opt-in"),
        "RestartJob Command for a job labelled off": (command(namespace, off), "opt-in"),
        "rings-config of a job that did not opt in": (
            patch_cm(namespace, f"rings-config-{plain.name}", initializing),
            "opt-in",
        ),
        "reset-config of a job that did not opt in": (
            patch_cm(namespace, f"reset-config-{plain.name}", {"metadata": {"labels": {"reset": "true"}}}),
            "opt-in",
        ),
        # no write on any job at all: RBAC stops it before rule job-writes
        "annotation on a job that did not opt in": (
            lambda: custom.patch_namespaced_custom_object(
                *VC[:2], namespace, VC[2], plain.name, {"metadata": {"annotations": {"x": "y"}}}, **MERGE
            ),
            "rbac",
        ),
        # 6: a label anyone can set is no proof
        "kube-system pod carrying only volcano.sh/job-name": (
            delete_pod("kube-system", f"labelled-{tag}", None),
            "namespaces",
        ),
        "pod carrying only volcano.sh/job-name": (delete_pod(namespace, f"labelled-{tag}", None), "pods"),
        # 7: rings-config by more than its name; Commands owned by their job; the UID precondition
        "kube-system/rings-config-evil": (
            patch_cm("kube-system", f"rings-config-evil-{tag}", initializing),
            "namespaces",
        ),
        "a rank table into a real job's rings-config": (
            patch_cm(namespace, f"rings-config-{optin.name}", {"data": {"hccl.json": '{"status":"completed"}'}}),
            "rings-config",
        ),
        "a finalizer on a real job's rings-config": (
            patch_cm(namespace, f"rings-config-{optin.name}", {"metadata": {"finalizers": ["example.com/keep"]}}),
            "rings-config",
        ),
        "another key in a real job's reset-config": (
            patch_cm(namespace, f"reset-config-{optin.name}", {"data": {"evil": "1"}}),
            "reset-config",
        ),
        "RestartJob Command with no owner reference in kube-system": (
            command("kube-system", optin, owned=False),
            "namespaces",
        ),
        "RestartJob Command with no owner reference": (command(namespace, optin, owned=False), "commands"),
        "pod delete without the UID precondition": (
            delete_pod(namespace, pods["optin"].metadata.name, None),
            "pod-uid",
        ),
        # 8 (the record itself, whatever the switch): a record cannot stage a job in kube-system
        "a forged resubmission record for kube-system": (
            lambda: core.create_namespaced_config_map(agent_ns, record),
            "resubmit-records",
        ),
    }
    try:
        messages = {what: await _denied(call) for what, (call, _) in cases.items()}
        await _set_resubmit(testbed, sa_api, agent_ns, True)
        privileged = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {
                "name": f"evil-{tag}",
                "labels": {"fault-scheduling": "force"},
                "annotations": {RESUBMITTED_FROM_ANNOTATION: optin.uid},
            },
            "spec": {
                "minAvailable": 1,
                "schedulerName": "volcano",
                "tasks": [
                    {
                        "name": "t",
                        "replicas": 1,
                        "template": {
                            "spec": {
                                "hostPID": True,
                                "containers": [
                                    {
                                        "name": "c",
                                        "image": "fake/x:1",
                                        "securityContext": {"privileged": True},
                                        "volumeMounts": [{"name": "host", "mountPath": "/host"}],
                                    }
                                ],
                                "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
                            }
                        },
                    }
                ],
            },
        }
        unmarked_acjob = {
            "apiVersion": "mindxdl.gitee.com/v1",
            "kind": "AscendJob",
            "metadata": {"name": f"ac-{tag}", "labels": {"fault-scheduling": "force"}},
            "spec": {"runPolicy": {"backoffLimit": 1}, "replicaSpecs": {}},
        }
        not_opted = {**privileged, "metadata": {**privileged["metadata"], "labels": {}}}

        def delete_job(job: Any) -> Callable[[], Awaitable[object]]:
            options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=job.uid))
            return lambda: custom.delete_namespaced_custom_object(*VC[:2], namespace, VC[2], job.name, body=options)

        resubmission_on: dict[str, tuple[Callable[[], Awaitable[object]], str]] = {
            "privileged hostPID Volcano Job in kube-system": (
                lambda: custom.create_namespaced_custom_object(*VC[:2], "kube-system", VC[2], privileged),
                "namespaces",
            ),
            "a running job that did not opt in deleted": (delete_job(plain), "job-resubmit"),
            "a running opted-in job deleted (not Failed)": (delete_job(optin), "job-resubmit"),
            "an AscendJob created": (
                lambda: custom.create_namespaced_custom_object(
                    "mindxdl.gitee.com", "v1", namespace, "ascendjobs", unmarked_acjob
                ),
                "job-resubmit",
            ),
            "a resubmitted job that does not opt in": (
                lambda: custom.create_namespaced_custom_object(*VC[:2], namespace, VC[2], not_opted),
                "job-resubmit",
            ),
        }
        cases |= resubmission_on
        messages |= {what: await _denied(call) for what, (call, _) in resubmission_on.items()}
        # a record planted by someone else (here: the cluster admin) still cannot become a workload in kube-system:
        # the agent's own writer, finishing it, is refused the create
        planted = resubmission.PendingResubmission(
            JobKind.VOLCANO, "kube-system", f"evil-{tag}", str(uuid.uuid4()), "i-forged", 1, privileged
        )
        writer = ClusterWriter(sa_api, attempts=1, state_namespace=agent_ns)
        _, finished, _ = await writer.finish_resubmission(planted)

        rbac = "is forbidden: User"
        rules = {
            what: "rbac" if rbac in m else next((r for r in RULES if f"rule {r}:" in m), m)
            for what, m in messages.items()
        }
        assert rules == {what: rule for what, (_, rule) in cases.items()}
        assert all(m.count(" denied; ") == 1 for m in messages.values() if rbac not in m), messages
        assert (
            f"Volcano Job {namespace}/plain has not opted in (fault-scheduling absent)"
            in messages["pod of a job that did not opt in"]
        )
        assert "(fault-scheduling off)" in messages["RestartJob Command for a job labelled off"]
        assert f"AscendJob {namespace}/acplain has not opted in" in messages["pod of an AscendJob that did not opt in"]
        assert "precondition (got none)" in messages["pod delete without the UID precondition"]
        assert (finished.outcome, finished.status) == (Outcome.FAILED, 403), finished
        assert "rule namespaces:" in finished.detail

        # nothing changed
        for p in pods.values():
            now = await admin.read_namespaced_pod(p.metadata.name, namespace)
            assert (now.metadata.uid, now.metadata.deletion_timestamp) == (p.metadata.uid, None)
        for ns in ("kube-system", namespace):
            assert (await admin.read_namespaced_pod(f"labelled-{tag}", ns)).metadata.deletion_timestamp is None
        for name, was in before.items():
            assert (await admin.read_namespaced_config_map(name, namespace)).to_dict() == was
        evil = await admin.read_namespaced_config_map(f"rings-config-evil-{tag}", "kube-system")
        assert evil.data == {"hccl.json": '{"status":"completed","server_list":[]}'}
        assert await list_commands(kube_client, namespace) == []
        assert await list_commands(kube_client, "kube-system") == []
        for job in (optin, plain, off):
            obj = await admin_custom.get_namespaced_custom_object(*VC[:2], namespace, VC[2], job.name)
            assert (obj["metadata"]["uid"], obj["metadata"].get("annotations", {}).get("x")) == (job.uid, None)
        kube_system_jobs = await admin_custom.list_namespaced_custom_object(*VC[:2], "kube-system", VC[2])
        assert kube_system_jobs["items"] == []
        records = await admin.list_namespaced_config_map(agent_ns, label_selector="fault-agent.io/resubmission=true")
        assert records.items == []
    finally:
        await _set_resubmit(testbed, sa_api, agent_ns, False)
        for ns in ("kube-system", namespace):
            with contextlib.suppress(ApiException):
                await admin.delete_namespaced_pod(f"labelled-{tag}", ns, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            await admin.delete_namespaced_config_map(f"rings-config-evil-{tag}", "kube-system")
        with contextlib.suppress(ApiException):
            await admin_custom.delete_namespaced_custom_object(*VC[:2], "kube-system", VC[2], f"evil-{tag}")


async def test_the_agents_own_writes_pass_the_policy(
    testbed: Testbed,
    kube_client: k8s.ApiClient,
    sa_api: k8s.ApiClient,
    confined: dict[str, str],
    namespace: str,
    node: str,
) -> None:
    agent_ns = confined["namespace"]
    admin = k8s.CoreV1Api(kube_client)
    writer = ClusterWriter(sa_api, attempts=1, state_namespace=agent_ns)  # resubmission records in its namespace
    job = await make_job(kube_client, namespace, "train", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
    await make_rings_config(kube_client, namespace, job.name)
    pod = await make_job_pod(kube_client, job, 0, node)
    acjob = await make_job(kube_client, namespace, "ac", JobKind.ASCEND, labels={"fault-scheduling": "grace"})
    acpod = await make_job_pod(kube_client, acjob, 0, node)
    results = {}

    # a Kubernetes Event of the agent's own (reportingController fault-agent.io/agent), then its series
    when = datetime.now(UTC)
    regarding = Regarding("Job", "batch.volcano.sh/v1alpha1", namespace, job.name, job.uid)
    note = KubeEvent(regarding, "Warning", "RecoveryStarted", "restart-job", "restart-job: chip out")
    events_api = k8s.EventsV1Api(sa_api)
    body: Any = event_body(note, f"{job.name}.own", when, "it")
    await events_api.create_namespaced_event(namespace, body)
    series = {"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}}
    await events_api.patch_namespaced_event(f"{job.name}.own", namespace, series, **MERGE)
    results["reset rings-config"] = await writer.reset_rings_config(namespace, job.name, incident="i-1")
    cm = await admin.read_namespaced_config_map(f"rings-config-{job.name}", namespace)
    assert cm.data["hccl.json"] == '{"status":"initializing"}'
    await admin.create_namespaced_config_map(namespace, initial_reset_config(job.name, namespace))
    pod_level = ResetConfigUpdate(namespace, job.name, "pod-reschedule", pod_level=True, now_s=1_767_225_600)
    results["reset-config pod-level"] = await writer.update_reset_config(pod_level, incident="i-1")
    grace_exit = ResetConfigUpdate(namespace, job.name, "grace-exit-on")
    results["reset-config graceful exit"] = await writer.update_reset_config(grace_exit, incident="i-1")
    # the job records (agent.core.records), in the agent's namespace: claimed (create, then a replace at the
    # record's version), written, deleted; never a write on the job itself
    results["claim job (record created)"] = await writer.claim_record(
        job, {"actor": "a"}, resource_version="", incident="i-1"
    )
    record = await writer.read_record(job)
    assert record is not None
    results["claim job again (record replaced)"] = await writer.claim_record(
        job, {"actor": "a", "incident": "{}"}, resource_version=record.resource_version, incident="i-1"
    )
    results["write job record"] = await writer.write_record(job, {"ledger": "{}"}, incident="i-1")
    results["write AscendJob record (created)"] = await writer.write_record(acjob, {"ledger": "{}"}, incident="i-1")
    results["delete AscendJob record"] = await writer.delete_record(acjob.uid, incident="i-1")
    results["taint node"] = await writer.taint_node(node, key=TAINT_KEY, value="SeparateNPU", incident="i-1")
    results["hold annotation"] = await writer.annotate_node(node, {TAINT_KEY: '{"level":"SeparateNPU"}'})
    assert _own_taints(await admin.read_node(node)) == sorted(
        [tuple(OTHER_TAINT.values()), (TAINT_KEY, "SeparateNPU", "NoSchedule")]
    )
    results["untaint node"] = await writer.untaint_node(node, key=TAINT_KEY, incident="i-1")
    results["hold removed"] = await writer.annotate_node(node, {TAINT_KEY: None})
    now_node = await admin.read_node(node)
    assert _own_taints(now_node) == [tuple(OTHER_TAINT.values())]
    assert TAINT_KEY not in (now_node.metadata.annotations or {})
    # next to another party's NoExecute taint with its timeAdded (as the lifecycle controller's unreachable taint)
    drain = {"key": "example.com/drain", "effect": "NoExecute", "timeAdded": "2020-01-02T03:04:05Z"}
    await admin.patch_node(node, {"spec": {"taints": [OTHER_TAINT, drain]}})
    results["taint beside a NoExecute taint"] = await writer.taint_node(node, key=TAINT_KEY, value="x", incident="i-2")
    results["untaint beside a NoExecute taint"] = await writer.untaint_node(node, key=TAINT_KEY, incident="i-2")
    results["restart command"] = await writer.restart_command(job, incident="i-1", reason="test", message="chip")
    # fault-scheduling=external-*: the mark MindCluster's rescheduler sets, on each kind of job pod
    results["mark Volcano pod"] = await writer.annotate_pod(
        PodRef(namespace, pod.metadata.name, pod.metadata.uid), {POD_STATUS: "Unhealthy-CardUnhealthy"}, incident="i-1"
    )
    results["mark AscendJob pod"] = await writer.annotate_pod(
        PodRef(namespace, acpod.metadata.name, acpod.metadata.uid), {POD_STATUS: "Unhealthy-pod-failed"}, incident="i-1"
    )
    marks = [
        (await admin.read_namespaced_pod(p.metadata.name, namespace)).metadata.annotations.get(POD_STATUS)
        for p in (pod, acpod)
    ]
    assert marks == ["Unhealthy-CardUnhealthy", "Unhealthy-pod-failed"]
    results["delete Volcano pod"] = await writer.delete_pod(
        PodRef(namespace, pod.metadata.name, pod.metadata.uid), incident="i-1", grace_seconds=0
    )
    results["delete AscendJob pod"] = await writer.delete_pod(
        PodRef(namespace, acpod.metadata.name, acpod.metadata.uid), incident="i-1", grace_seconds=0
    )
    assert {r: v.outcome for r, v in results.items()} == dict.fromkeys(results, Outcome.DONE), results

    # the breaker state: created on the first trip, replaced afterwards, in the agent's namespace
    settings = Settings.model_validate({"leader": {"namespace": agent_ns}})
    with contextlib.suppress(ApiException):
        await admin.delete_namespaced_config_map(settings.policy.breaker_configmap, agent_ns)
    await write_breaker_state(k8s.CoreV1Api(sa_api), settings, {"state": "open"})
    await write_breaker_state(k8s.CoreV1Api(sa_api), settings, {"state": "open", "tripped_at": "x"})
    breaker = await admin.read_namespaced_config_map(settings.policy.breaker_configmap, agent_ns)
    assert breaker.data == {"state": "open", "tripped_at": "x"}

    # MindCluster's bookkeeping ConfigMap (issue 15): the agent may update it where the plugin keeps it
    # (a dry run: a real vcjob-fault-npu-cm left behind would look like MindCluster's plugin at work to other tests)
    made_ns = made_cm = False
    with contextlib.suppress(ApiException):
        await admin.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="volcano-system")))
        made_ns = True
    bookkeeping = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="vcjob-fault-npu-cm"), data={})
    with contextlib.suppress(ApiException):
        await admin.create_namespaced_config_map("volcano-system", bookkeeping)
        made_cm = True
    try:
        await k8s.CoreV1Api(sa_api).patch_namespaced_config_map(
            "vcjob-fault-npu-cm", "volcano-system", {"data": {"remain-retry-times": "{}"}}, dry_run="All"
        )
    finally:
        if made_cm:
            await admin.delete_namespaced_config_map("vcjob-fault-npu-cm", "volcano-system")
        if made_ns:
            await admin.delete_namespace("volcano-system")

    # resubmission off: the policy refuses the delete, so nothing is deleted and no record is left (kept, it made
    # the incident retry the refused delete on every tick)
    refused = await writer.resubmit_job(job, incident="i-0", count=1)
    assert (refused.outcome, refused.retriable, refused.status, refused.kept) == (Outcome.FAILED, False, 403, "")
    assert "delete refused" in refused.detail
    still = await k8s.CustomObjectsApi(kube_client).get_namespaced_custom_object(*VC[:2], namespace, VC[2], job.name)
    assert still["metadata"]["uid"] == job.uid
    left = await admin.list_namespaced_config_map(agent_ns, label_selector="fault-agent.io/resubmission=true")
    assert left.items == []

    # resubmission: denied while it is off (test above), done once it is on
    await _set_resubmit(testbed, sa_api, agent_ns, True)
    try:
        unmarked = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "unmarked"},
            "spec": {"minAvailable": 1, "schedulerName": "volcano", "tasks": []},
        }
        message = await _denied(
            lambda: k8s.CustomObjectsApi(sa_api).create_namespaced_custom_object(*VC[:2], namespace, VC[2], unmarked)
        )
        assert "rule job-resubmit:" in message
        assert "fault-agent.io/resubmitted-from" in message
        # the policy lets the agent delete only a job that has Failed (and opted in)
        await k8s.CustomObjectsApi(kube_client).patch_namespaced_custom_object_status(
            *VC[:2], namespace, VC[2], job.name, {"status": {"state": {"phase": "Failed"}}}, **MERGE
        )
        result = await writer.resubmit_job(job, incident="i-1", count=1)
        assert result.outcome is Outcome.DONE, result
        assert result.uid
        assert result.uid != job.uid
        # its record was created before the delete and deleted after the create, both under the policy
        listed = await admin.list_namespaced_config_map(agent_ns, label_selector="fault-agent.io/resubmission=true")
        assert listed.items == []
    finally:
        await _set_resubmit(testbed, sa_api, agent_ns, False)


def _failed_actions(engine: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in engine.ctx.metrics.registry.collect():
        for s in family.samples:
            if s.name == "fault_agent_actions_total" and s.labels.get("result") == "failed" and s.value:
                out[s.labels["action"]] = s.value
    return out


@contextlib.asynccontextmanager
async def _agent(settings: Settings, identity: str) -> AsyncIterator[Any]:
    """The agent in this process until the block ends; yields its engine once its caches are synced."""
    stop = asyncio.Event()
    engines: list[Any] = []
    task = asyncio.create_task(run_agent(settings, stop, identity=identity, on_engine=engines.append), name=identity)

    async def synced() -> bool:
        if task.done():
            task.result()  # surface a crash at once
        return bool(engines) and engines[0].state.ready

    await eventually(synced, bool, what=f"{identity} synced", timeout_s=30)
    try:
        yield engines[0]
    finally:
        stop.set()
        if not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=20)


async def test_the_recovery_loop_runs_under_the_policy(
    testbed: Testbed,
    kube_client: k8s.ApiClient,
    sa_api: k8s.ApiClient,
    confined: dict[str, str],
    namespace: str,
    tmp_path: Path,
) -> None:
    agent_ns = confined["namespace"]
    admin, admin_custom = k8s.CoreV1Api(kube_client), k8s.CustomObjectsApi(kube_client)
    token = await _token(kube_client, agent_ns, confined["service_account"])
    kubeconfig = tmp_path / "agent-kubeconfig"
    write_token_kubeconfig(kubeconfig, testbed, token)
    settings = Settings.model_validate(
        {
            "cluster_name": f"vap-{uuid.uuid4().hex[:6]}",
            "kube": {"kubeconfig": str(kubeconfig), "namespaces": [namespace]},
            "kafka": {"enabled": False},
            "server": {"port": 0},
            "leader": {"namespace": agent_ns, "lease_duration_s": 3, "renew_deadline_s": 2, "retry_period_s": 0.2},
            "policy": {
                "restart_burst": 20,
                "restart_rate_per_min": 600,
                "resubmit_limit": 1,
                # faults other tests leave on their nodes must not trip this agent's breaker
                "breaker_min_faulty_nodes": 1000,
            },
        }
    )
    nodes = [await make_node(kube_client) for _ in range(3)]
    restart_node, quarantine_node, resubmit_node = nodes
    await _set_resubmit(testbed, sa_api, agent_ns, True)
    try:
        job = await make_job(kube_client, namespace, "vc", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
        await make_rings_config(kube_client, namespace, job.name)
        for i in range(2):
            await make_job_pod(kube_client, job, i, restart_node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}")
        failed = await make_job(kube_client, namespace, "rs", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
        for i in range(2):
            await make_job_pod(kube_client, failed, i, resubmit_node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}")
        await admin_custom.patch_namespaced_custom_object_status(
            *VC[:2], namespace, VC[2], "rs", {"status": {"state": {"phase": "Failed"}}}, **MERGE
        )
        await eventually(
            lambda: pods_by_name(kube_client, namespace),
            lambda p: sum(1 for x in p.values() if x.status.phase == "Running") == 4,
            what="the jobs' pods Running",
        )

        async with CommandRecorder(kube_client, namespace) as rec, _agent(settings, "vap-agent") as engine:

            async def leader() -> str | None:  # None until the Lease exists (a loaded machine: after sync)
                try:
                    found = await k8s.CoordinationV1Api(kube_client).read_namespaced_lease(
                        "fault-agent-leader", agent_ns
                    )
                except ApiException as e:
                    if e.status != 404:
                        raise
                    return None
                return str(found.spec.holder_identity)

            holder = await eventually(
                leader, lambda h: h == "vap-agent", what="the agent leads (its Lease, written by the ServiceAccount)"
            )
            assert holder == "vap-agent"

            # chip fault → RestartJob Command and rings-config back to initializing
            await put_device_info(kube_client, restart_node, {"Ascend910-1": ("SeparateNPU", "80E01801")})
            commands = await eventually(rec.count, lambda c: len(c) >= 1, what="a RestartJob Command", timeout_s=30)
            assert commands[0]["action"] == "RestartJob"
            assert commands[0]["target"]["uid"] == job.uid

            async def rings() -> str:
                cm = await admin.read_namespaced_config_map(f"rings-config-{job.name}", namespace)
                return str(cm.data["hccl.json"])

            await eventually(rings, lambda v: v == '{"status":"initializing"}', what="rings-config reset")

            # a NodeD SeparateFault quarantines the node (taint), and its end lifts it (untaint)
            async def taints() -> list[tuple[str, str, str]]:
                return _own_taints(await admin.read_node(quarantine_node))

            await _put_node_info(kube_client, quarantine_node)
            quarantined = await eventually(taints, lambda t: len(t) == 1, what="quarantine taint")
            assert quarantined[0][0] == TAINT_KEY
            assert quarantined[0][2] == "NoSchedule"
            await _delete_node_info(kube_client, quarantine_node)
            await eventually(taints, lambda t: t == [], what="quarantine taint removed")

            # a job Failed on its hardware is resubmitted (deleted and created again) with resubmission on
            await put_device_info(kube_client, resubmit_node, {"Ascend910-0": ("SeparateNPU", "80E01802")})

            async def rs() -> dict[str, Any] | None:
                try:
                    obj: dict[str, Any] = await admin_custom.get_namespaced_custom_object(
                        *VC[:2], namespace, VC[2], "rs"
                    )
                except ApiException as e:
                    if e.status == 404:
                        return None
                    raise
                return obj

            new = await eventually(
                rs, lambda o: o is not None and o["metadata"]["uid"] != failed.uid, what="resubmitted", timeout_s=30
            )
            assert new["metadata"]["annotations"][RESUBMITTED_FROM_ANNOTATION] == failed.uid
            assert _failed_actions(engine) == {}
    finally:
        await _set_resubmit(testbed, sa_api, agent_ns, False)
        await admin.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        for name in nodes:
            await delete_device_info(kube_client, name)
            await _delete_node_info(kube_client, name)
            await delete_node(kube_client, name)


async def test_service_account_has_no_secrets_exec_rbac_or_wildcard(
    sa_api: k8s.ApiClient, confined: dict[str, str], namespace: str
) -> None:
    agent_ns = confined["namespace"]
    authz = k8s.AuthorizationV1Api(sa_api)
    seen_writes: dict[str, set[tuple[str, str, str]]] = {}
    for ns in (agent_ns, "kube-system", namespace):
        review = await authz.create_self_subject_rules_review(
            k8s.V1SelfSubjectRulesReview(spec=k8s.V1SelfSubjectRulesReviewSpec(namespace=ns))
        )
        assert not review.status.incomplete, review.status.evaluation_error
        rules = review.status.resource_rules
        assert rules, f"no rules listed in {ns}"
        for rule in rules:
            groups, resources, verbs = rule.api_groups or [], rule.resources or [], rule.verbs or []
            where = f"{ns}: {groups} {resources} {verbs}"
            assert "*" not in groups, f"wildcard group: {where}"
            assert "*" not in verbs, f"wildcard verb: {where}"
            assert not any("*" in r for r in resources), f"wildcard resource: {where}"
            assert "secrets" not in resources, f"Secrets: {where}"
            assert not {"pods/exec", "pods/attach", "pods/portforward", "pods/proxy"} & set(resources), where
            assert "rbac.authorization.k8s.io" not in groups, f"RBAC objects: {where}"
            assert "serviceaccounts/token" not in resources, f"token minting: {where}"
            assert not {"escalate", "bind", "impersonate"} & set(verbs), where
            writes = set(verbs) - {"get", "list", "watch"}
            for group in groups:
                for resource in resources:
                    for verb in writes:
                        seen_writes.setdefault(ns, set()).add((group, resource, verb))
        for rule in review.status.non_resource_rules or []:
            assert rule.verbs == ["get"], f"non-resource {rule.non_resource_ur_ls} {rule.verbs}"
    # the writes are the agent's (deploy/clusterrole.yaml, role.yaml) plus the reviews every identity may create
    reviews = {
        ("authorization.k8s.io", "selfsubjectaccessreviews", "create"),
        ("authorization.k8s.io", "selfsubjectrulesreviews", "create"),
        ("authentication.k8s.io", "selfsubjectreviews", "create"),
    }
    cluster_writes = {
        ("", "pods", "delete"),
        ("", "pods", "patch"),  # huawei.com/pod-status for fault-scheduling=external-* (the policy: that key only)
        ("", "nodes", "patch"),
        ("", "configmaps", "update"),
        ("", "configmaps", "patch"),
        ("bus.volcano.sh", "commands", "create"),
        ("events.k8s.io", "events", "create"),  # Kubernetes Events of its own (rule events)
        ("events.k8s.io", "events", "patch"),
        # /metrics behind authentication (server.metrics_auth: kubernetes): reviews write nothing, not matched
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
    own_ns = {
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
        ("", "configmaps", "create"),
        ("", "configmaps", "update"),
        ("", "configmaps", "patch"),
        ("", "configmaps", "delete"),  # its resubmission and job records (the policy allows no other delete)
    }
    assert seen_writes["kube-system"] - reviews == cluster_writes
    assert seen_writes[namespace] - reviews == cluster_writes
    assert seen_writes[agent_ns] - reviews == cluster_writes | own_ns


# tests/integration/test_deploy_agent_rbac.py's end-to-end check (real Volcano controller, the agent as its own
# process, no 403 in its log), collected here again so that it runs with the policy enforced
nodes = rbac_tests.nodes


@pytest.fixture
def deploy_rbac(confined: dict[str, str], sa_api: k8s.ApiClient) -> dict[str, str]:
    """deploy/'s RBAC with the admission policy enforced (sa_api waits for it)."""
    return confined


test_guides_job_restarts_under_the_policy_without_a_403 = (
    rbac_tests.test_agent_with_deploys_service_account_restarts_the_guides_job_without_a_403
)


async def test_the_cli_run_as_the_agent_reads_and_resets_the_breaker_and_cannot_release_a_quarantine(
    testbed: Testbed, kube_client: k8s.ApiClient, confined: dict[str, str], sa_api: k8s.ApiClient, tmp_path: Path
) -> None:
    """deploy/README.md's `kubectl exec deploy/fault-agent -- fault-agent …` recipe (issue 41, 6): in the agent's
    pod the command line has the agent's ServiceAccount, under its RBAC and the admission policy. `status`,
    `breaker show|reset` and `quarantine list|show` work there; `quarantine release` is refused by the policy (the
    agent may not write the release annotation), as the README says, and changes nothing."""
    from test_operator_rbac import _cli

    from agent.core.quarantine import RELEASE_ANNOTATION
    from testbed.inject import Injector
    from testbed.service_account import write_token_kubeconfig

    token = await _token(kube_client, confined["namespace"], confined["service_account"])
    kubeconfig = write_token_kubeconfig(tmp_path / "agent-kubeconfig", testbed, token, user="fault-agent")
    node = f"exec-{uuid.uuid4().hex[:6]}"
    inj = Injector(testbed.rest())
    inj.add_nodes([node])
    try:
        testbed.rest().request(
            "PATCH", f"/api/v1/nodes/{node}",
            {"spec": {"taints": [{"key": "fault-agent.io/fault", "value": "SeparateNPU", "effect": "NoSchedule"}]}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        agent_ns = confined["namespace"]
        # no breaker state of an earlier test (one of this module leaves it open with tripped_at "x": `breaker show`
        # exits 1 while the breaker is open)
        with contextlib.suppress(ApiException):
            breaker_cm = Settings.model_validate({"leader": {"namespace": agent_ns}}).policy.breaker_configmap
            await k8s.CoreV1Api(kube_client).delete_namespaced_config_map(breaker_cm, agent_ns)
        for args in (
            ("status",),
            ("breaker", "show"),
            ("breaker", "reset", "--by", "ops", "--reason", "drill"),
            ("quarantine", "list"),
            ("quarantine", "show", node),
        ):
            code, out = await _cli(kubeconfig, agent_ns, *args)
            assert code == 0, (args, out)
        code, out = await _cli(kubeconfig, agent_ns, "quarantine", "release", node, "--reason", "replaced")
        assert code == 1, out
        assert "403" in out, out
        assert "fault-agent policy" in out, out
        annotations = testbed.rest().request("GET", f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}
        assert RELEASE_ANNOTATION not in annotations
    finally:
        inj.delete_nodes([node])


async def test_the_agent_may_delete_a_jobsets_pods_and_write_nothing_on_the_jobset(
    kube_client: k8s.ApiClient, sa_api: k8s.ApiClient, namespace: str, node: str
) -> None:
    """JobSets (docs/jobset.md), under the agent's token: a pod of a JobSet (its controller the child batch/v1 Job
    JobSet made, labelled with the JobSet's UID) may be deleted with its UID as precondition, as the agent's
    restart does; a pod of a plain batch Job may not (rule pods); the JobSet itself is never written (no RBAC
    verb, and rule known-writes behind it), and stays as it was."""
    from agent.core.jobset import JOBSET_NAME_LABEL, JOBSET_UID_LABEL
    from agent.platform.builders import JobSetTrainingSpec, build_jobset

    js = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
    admin, admin_custom = k8s.CoreV1Api(kube_client), k8s.CustomObjectsApi(kube_client)
    core, custom = k8s.CoreV1Api(sa_api), k8s.CustomObjectsApi(sa_api)
    body = build_jobset(JobSetTrainingSpec(name="js", namespace=namespace, image="fake/x:1", workers=1, accelerators=0))
    created = await admin_custom.create_namespaced_custom_object(js[0], js[1], namespace, js[2], body)

    async def pod() -> k8s.V1Pod | None:
        items = (await admin.list_namespaced_pod(namespace, label_selector=f"{JOBSET_NAME_LABEL}=js")).items
        return items[0] if items else None

    jobset_pod = await eventually(pod, what="JobSet's controller and the Job controller to make the pod")
    assert jobset_pod.metadata.labels[JOBSET_UID_LABEL] == created["metadata"]["uid"]
    plain_job = await k8s.BatchV1Api(kube_client).create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "plain"},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeName": node,
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "c", "image": "fake/x:1"}],
                    }
                }
            },
        },
    )

    async def plain_pod() -> k8s.V1Pod | None:
        items = (await admin.list_namespaced_pod(namespace, label_selector="job-name=plain")).items
        return items[0] if items else None

    batch_pod = await eventually(plain_pod, what="the Job controller to make the plain Job's pod")
    assert batch_pod.metadata.owner_references[0].uid == plain_job.metadata.uid

    def delete(p: k8s.V1Pod) -> Callable[[], Awaitable[object]]:
        options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=p.metadata.uid))
        return lambda: core.delete_namespaced_pod(p.metadata.name, namespace, body=options)

    assert "rule pods" in await _denied(delete(batch_pod))
    patch = {"metadata": {"labels": {"fault-scheduling": "off"}}}
    refused = await _denied(
        lambda: custom.patch_namespaced_custom_object(js[0], js[1], namespace, js[2], "js", patch, **MERGE)
    )
    assert refused != "ALLOWED"
    assert refused.startswith("jobsets.jobset.x-k8s.io") or "rule known-writes" in refused, refused
    assert await _denied(delete(jobset_pod)) == "ALLOWED"
    after = await admin_custom.get_namespaced_custom_object(js[0], js[1], namespace, js[2], "js")
    assert after["metadata"]["labels"] == created["metadata"]["labels"]
    await admin_custom.delete_namespaced_custom_object(js[0], js[1], namespace, js[2], "js")
    await k8s.BatchV1Api(kube_client).delete_namespaced_job("plain", namespace, propagation_policy="Background")
