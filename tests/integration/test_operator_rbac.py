"""deploy/operator/rbac.yaml is enough for the operators' command line and no more than it uses (issue 41, 6:
nothing said how to run `status` and `breaker reset` against a real cluster, or with which access). Each command
runs as a ServiceAccount bound to exactly those rules, against the testbed's apiserver."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cluster import Testbed
from testbed.inject import Injector
from testbed.rest import RestError
from testbed.service_account import service_account_token, write_token_kubeconfig

pytestmark = pytest.mark.integration
RBAC = Path(__file__).resolve().parents[2] / "deploy" / "operator" / "rbac.yaml"


def _apply(rest: Any, path: str, obj: dict[str, Any]) -> None:
    try:
        rest.request("POST", path, obj)
    except RestError as e:
        if e.status != 409:
            raise
        rest.request("PUT", f"{path}/{obj['metadata']['name']}", obj)


@pytest.fixture
def operator_kubeconfig(testbed: Testbed, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig of a ServiceAccount bound to deploy/operator/rbac.yaml's roles (the Role in `namespace`, the
    ClusterRole under a name of this test's own); removed afterwards."""
    rest = testbed.rest()
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    cluster_role = next(d for d in docs if d["kind"] == "ClusterRole")
    role = next(d for d in docs if d["kind"] == "Role")
    suffix = uuid.uuid4().hex[:6]
    cluster_role["metadata"]["name"] = f"fault-agent-operator-{suffix}"
    role["metadata"]["namespace"] = namespace
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ops", "namespace": namespace}}
    subject = [{"kind": "ServiceAccount", "name": "ops", "namespace": namespace}]
    crb = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": cluster_role["metadata"]["name"]}, "subjects": subject,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": cluster_role["metadata"]["name"]},
    }  # fmt: skip
    rb = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "fault-agent-operator", "namespace": namespace}, "subjects": subject,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fault-agent-operator"},
    }  # fmt: skip
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    _apply(rest, f"{rbac}/clusterroles", cluster_role)
    _apply(rest, f"{rbac}/namespaces/{namespace}/roles", role)
    _apply(rest, f"/api/v1/namespaces/{namespace}/serviceaccounts", sa)
    _apply(rest, f"{rbac}/clusterrolebindings", crb)
    _apply(rest, f"{rbac}/namespaces/{namespace}/rolebindings", rb)
    token = service_account_token(rest, namespace, "ops")
    try:
        yield write_token_kubeconfig(tmp_path / "ops-kubeconfig", testbed, token, user="ops")
    finally:
        for path in (f"{rbac}/clusterrolebindings/{crb['metadata']['name']}",
                     f"{rbac}/clusterroles/{cluster_role['metadata']['name']}"):  # fmt: skip
            try:
                rest.request("DELETE", path)
            except RestError as e:
                if e.status != 404:
                    raise


async def _cli(kubeconfig: Path, namespace: str, *args: str) -> tuple[int, str]:
    env = os.environ | {
        "FAULT_AGENT_KUBE__KUBECONFIG": str(kubeconfig),  # breaker, quarantine: the agent's settings
        "KUBECONFIG": str(kubeconfig),  # status: as kubectl
        "FAULT_AGENT_LEADER__NAMESPACE": namespace,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_each_operator_command_runs_with_the_operator_roles_alone(
    testbed: Testbed, namespace: str, operator_kubeconfig: Path
) -> None:
    inj = Injector(testbed.rest())
    node = f"ops-{uuid.uuid4().hex[:6]}"
    inj.add_nodes([node])
    try:
        key = "fault-agent.io/fault"
        testbed.rest().request(
            "PATCH", f"/api/v1/nodes/{node}",
            {"spec": {"taints": [{"key": key, "value": "SeparateNPU", "effect": "NoSchedule"}]}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        for args, code in (
            (("breaker", "show"), 0),
            (("breaker", "reset", "--by", "ops", "--reason", "drill"), 0),
            (("quarantine", "list"), 0),
            (("quarantine", "show", node), 0),
            (("quarantine", "release", node, "--reason", "checked"), 0),
            (("status",), 0),
        ):
            got, out = await _cli(operator_kubeconfig, namespace, *args)
            assert (got, "403" in out or "forbidden" in out.lower()) == (code, False), (args, out)
    finally:
        inj.delete_nodes([node])


async def test_without_the_roles_the_commands_name_the_refusal(
    testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    rest = testbed.rest()
    rest.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody", "namespace": namespace}},
    )  # fmt: skip
    kubeconfig = write_token_kubeconfig(
        tmp_path / "nobody", testbed, service_account_token(rest, namespace, "nobody"), user="nobody"
    )
    code, out = await _cli(kubeconfig, namespace, "quarantine", "list")
    assert code == 1
    assert "HTTP 403" in out
