"""The overlay of deploy/README.md that moves the agent to another namespace, on the testbed apiserver (issue 37, 9):
its admission policy applies to the moved ServiceAccount. The README's block is built with `kubectl kustomize`
for a namespace of this test's own; its Namespace, ServiceAccount, Role and RoleBinding and the policy
``fault-agent-writes`` with its binding (renamed with a suffix: cluster-scoped names are shared) are created; the
agent's own fail-closed probe (agent.sources.admission_check), sent with the moved ServiceAccount's token, is
denied by the policy, whose message names the new namespace."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as k8s
from support.polling import eventually

from agent.sources.admission_check import probe
from testbed.cluster import Testbed
from testbed.rest import RestError

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
TITLE = "that moves the agent to another namespace"


def _overlay(tmp_path: Path, namespace: str) -> list[dict[str, Any]]:
    readme = (DEPLOY / "README.md").read_text()
    block = re.search(r"```yaml\n(# kustomization\.yaml of an overlay " + re.escape(TITLE) + r".*?)```", readme, re.S)
    assert block is not None, f"deploy/README.md lacks the overlay {TITLE}"
    text = block.group(1).replace("value: ml-ops # NAMESPACE", f"value: {namespace} # NAMESPACE")
    assert namespace in text
    (tmp_path / "deploy").symlink_to(DEPLOY)
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text(text)
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl not found on PATH (it ships kustomize)")
    proc = subprocess.run(
        [kubectl, "kustomize", str(tmp_path / "overlay")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.fixture
async def moved(testbed: Testbed, tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    tag = uuid.uuid4().hex[:6]
    ns = f"fa-moved-{tag}"
    objs = _overlay(tmp_path, ns)
    rest = testbed.rest()
    pick = {
        ("Namespace", ns): "/api/v1/namespaces",
        ("ServiceAccount", "fault-agent"): f"/api/v1/namespaces/{ns}/serviceaccounts",
        ("Role", "fault-agent"): f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        ("RoleBinding", "fault-agent"): f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    }
    vap = "/apis/admissionregistration.k8s.io/v1"
    policy = next(
        o for o in objs if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == "fault-agent-writes"
    )
    name = f"fault-agent-writes-{tag}"
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    created: list[str] = []
    try:
        for obj in objs:
            path = pick.get((obj["kind"], obj["metadata"]["name"]))
            if path is not None and obj["metadata"].get("namespace", ns) == ns:
                rest.request("POST", path, obj)
                created.append(f"{path}/{obj['metadata']['name']}")
        rest.request("POST", f"{vap}/validatingadmissionpolicies", {**policy, "metadata": {"name": name}})
        created.append(f"{vap}/validatingadmissionpolicies/{name}")
        rest.request("POST", f"{vap}/validatingadmissionpolicybindings", binding)
        created.append(f"{vap}/validatingadmissionpolicybindings/{name}")
        yield {"namespace": ns, "policy": policy["spec"]["matchConditions"][0]["expression"]}
    finally:
        for path in reversed(created):
            if path.startswith(f"/api/v1/namespaces/{ns}/") or f"/namespaces/{ns}/" in path:
                continue  # deleted with the namespace
            with contextlib.suppress(RestError):
                rest.request("DELETE", path)


async def test_the_moved_service_account_is_confined_by_the_retargeted_policy(
    testbed: Testbed, kube_client: k8s.ApiClient, moved: dict[str, str]
) -> None:
    ns = moved["namespace"]
    assert moved["policy"] == f"request.userInfo.username == 'system:serviceaccount:{ns}:fault-agent'"
    core = k8s.CoreV1Api(kube_client)
    token = await core.create_namespaced_service_account_token(
        "fault-agent", ns, k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(audiences=[]))
    )
    cfg = k8s.Configuration(
        host=testbed.apiserver_url,
        api_key={"BearerToken": token.status.token},
        api_key_prefix={"BearerToken": "Bearer"},
    )
    cfg.ssl_ca_cert = str(testbed.ca_file)
    async with k8s.ApiClient(cfg) as sa_api:
        # the apiserver loads the policy and its binding through informers: a second or so
        verdict = await eventually(lambda: probe(sa_api, ns, 10), lambda v: v.in_force, what="the policy in force")
    assert verdict.detail == "the admission policy denied the probe write (dry run)"
    # the Role lets the probe through RBAC: the same write as the admin is admitted (the policy names the SA only)
    admitted = await probe(kube_client, ns, 10)
    assert not admitted.in_force
    assert "was admitted" in admitted.detail
