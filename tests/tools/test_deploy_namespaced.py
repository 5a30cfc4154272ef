"""Namespaced reads (issue 37, "Least reads"; deploy/README.md, "Least privilege reads"): deploy-namespaced/ builds
with `kubectl kustomize`, the chart renders the same RBAC from ``settings.kube.namespaces``, and, read by a small
RBAC evaluator over the rendered objects, that RBAC grants list and watch on every collection the agent watches
under the overlay's settings and no read of pods, ConfigMaps or jobs anywhere else.

The live counterpart (the token refused elsewhere, the agent restarting a job under this RBAC, a namespace it does
not grant stopping the agent at start): tests/integration/test_namespaced_reads.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

import pytest
import yaml
from chart_support import REPO, compare, helm_binary, helm_template, run

from agent.core.fault_source import FaultSource
from agent.settings import KubeSettings
from agent.sources.access_check import ReadGrant, denial_message, read_grants
from agent.sources.watchers import NAMESPACE_SETTINGS, resources

OVERLAY = REPO / "deploy-namespaced"
RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
AGENT = ("fault-agent", "fault-agent")  # the ServiceAccount's namespace and name


def _overlay() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not on PATH (it ships kustomize)"
    return [d for d in yaml.safe_load_all(run([kubectl, "kustomize", str(OVERLAY)])) if d]


def _overlay_settings() -> KubeSettings:
    """kube settings as the overlay's Deployment sets them (FAULT_AGENT_KUBE__* in its env)."""
    deployment = next(o for o in _overlay() if o["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    return KubeSettings.model_validate(
        {
            "namespaces": json.loads(env["FAULT_AGENT_KUBE__NAMESPACES"]),
            "public_fault_namespaces": json.loads(env["FAULT_AGENT_KUBE__PUBLIC_FAULT_NAMESPACES"]),
        }
    )


def _rbac(objs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] in RBAC_KINDS]


def allows(
    objs: Sequence[dict[str, Any]], verb: str, group: str, resource: str, namespace: str | None, name: str = ""
) -> bool:
    """Whether the rendered RBAC `objs` let the agent's ServiceAccount `verb` `resource` in `namespace` (None: all
    namespaces, or a cluster-scoped resource), as the RBAC authorizer reads ClusterRoleBindings and RoleBindings
    (a RoleBinding of a ClusterRole grants its rules in the binding's namespace only). `name`: the object's name
    (a rule with resourceNames matches only those; "" matches only rules without them, as for list/watch)."""
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objs}

    def bound(binding: dict[str, Any]) -> bool:
        return any(
            s["kind"] == "ServiceAccount" and (s.get("namespace"), s["name"]) == AGENT for s in binding["subjects"]
        )

    def rules_allow(role: dict[str, Any] | None) -> bool:
        for rule in (role or {}).get("rules", []):
            names = rule.get("resourceNames")
            if names and name not in names:
                continue
            if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
                return True
        return False

    for b in objs:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding") or not bound(b):
            continue
        if b["kind"] == "ClusterRoleBinding" and rules_allow(roles.get(("ClusterRole", "", b["roleRef"]["name"]))):
            return True
        if b["kind"] == "RoleBinding" and namespace == b["metadata"]["namespace"]:
            ref = b["roleRef"]
            role_key = (ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])
            if rules_allow(roles.get(role_key)):
                return True
    return False


def test_the_chart_renders_the_overlays_rbac_from_settings() -> None:
    chart = helm_template(
        "--set", "settings.kube.namespaces={training}", "--set", "settings.kube.public_fault_namespaces={mindx-dl}"
    )
    assert compare(_rbac(_overlay()), _rbac(chart)) == []


def test_the_chart_refuses_namespaced_reads_with_public_faults_read_everywhere() -> None:
    chart = subprocess.run(
        [helm_binary(), "template", "fault-agent", str(REPO / "deploy" / "chart"),
         "--set", "settings.kube.namespaces={training}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert chart.returncode != 0
    assert "set settings.kube.public_fault_namespaces too" in chart.stderr


@pytest.mark.parametrize("source", [FaultSource.PER_NODE, FaultSource.CLUSTERD], ids=lambda s: s.value)
def test_the_overlay_grants_every_watch_of_its_settings(source: FaultSource) -> None:
    objs = _rbac(_overlay())
    watched = resources(_overlay_settings(), records_namespace="fault-agent", fault_source=source)
    assert {r.namespace for r in watched if r.source == "pods"} == {"training"}
    refused = [
        g.describe()
        for g in read_grants(watched, NAMESPACE_SETTINGS)
        if not allows(objs, g.verb, g.resource.group, g.resource.plural, g.resource.namespace)
    ]
    assert refused == []
    # and what it reads by name: the plugin check and the bookkeeping, rings-config in a training namespace
    assert allows(objs, "get", "", "configmaps", "volcano-system", "vcjob-fault-npu-cm")
    assert allows(objs, "update", "", "configmaps", "mindx-dl", "job-reschedule-reason")
    assert allows(objs, "update", "", "configmaps", "training", "rings-config-job")


@pytest.mark.parametrize(
    ("group", "resource", "namespace", "expected"),
    [
        pytest.param("", "pods", "training", True, id="pods-training"),
        pytest.param("", "pods", "other", False, id="pods-other"),
        pytest.param("", "pods", None, False, id="pods-everywhere"),
        pytest.param("", "configmaps", "kube-system", True, id="configmaps-kube-system"),
        pytest.param("", "configmaps", "mindx-dl", True, id="configmaps-mindx-dl"),
        pytest.param("", "configmaps", "fault-agent", True, id="configmaps-own-namespace"),
        pytest.param("", "configmaps", "training", False, id="configmaps-training-not-listed"),
        pytest.param("", "configmaps", "volcano-system", False, id="configmaps-volcano-system-by-name-only"),
        pytest.param("", "configmaps", "other", False, id="configmaps-other"),
        pytest.param("", "configmaps", None, False, id="configmaps-everywhere"),
        pytest.param("batch.volcano.sh", "jobs", "other", False, id="vcjobs-other"),
        pytest.param("batch.volcano.sh", "jobs", None, False, id="vcjobs-everywhere"),
        pytest.param("coordination.k8s.io", "leases", None, False, id="leases-everywhere"),
        pytest.param("", "nodes", None, True, id="nodes-cluster-scoped"),
        pytest.param("", "secrets", "training", False, id="no-secrets"),
    ],
)
def test_what_the_overlays_token_may_list(group: str, resource: str, namespace: str | None, expected: bool) -> None:
    assert allows(_rbac(_overlay()), "list", group, resource, namespace) is expected


def test_the_base_grants_the_same_watches_cluster_wide() -> None:
    """The evaluator itself against the base: every watch of the default settings is granted (all namespaces)."""
    base = _rbac([d for d in yaml.safe_load_all(run(["kubectl", "kustomize", str(REPO / "deploy")])) if d])
    grants = read_grants(resources(KubeSettings(), records_namespace="fault-agent"), NAMESPACE_SETTINGS)
    assert [g.describe() for g in grants if not allows(base, g.verb, g.resource.group, g.resource.plural,
                                                          g.resource.namespace)] == []  # fmt: skip
    assert allows(base, "list", "", "pods", None)


def test_a_denial_names_each_grant_and_its_setting() -> None:
    watched = resources(
        KubeSettings.model_validate({"namespaces": ["a"], "public_fault_namespaces": []}),
        records_namespace="fault-agent",
        fault_source=FaultSource.PER_NODE,
    )
    by_source = {g.resource.source + ":" + g.verb: g for g in read_grants(watched, NAMESPACE_SETTINGS)}
    assert by_source["pods:list"].describe() == "list pods in namespace a (kube.namespaces)"
    assert by_source["vcjobs:watch"].describe() == "watch jobs.batch.volcano.sh in namespace a (kube.namespaces)"
    assert by_source["publicfault:list"].describe() == (
        "list configmaps in all namespaces (kube.public_fault_namespaces is empty)"
    )
    assert by_source["deviceinfo:watch"].describe() == (
        "watch configmaps in namespace kube-system (kube.device_info_namespace)"
    )
    assert by_source["jobrecords:list"].describe() == "list configmaps in namespace fault-agent (leader.namespace)"
    assert by_source["nodes:list"].describe() == "list nodes (cluster-scoped)"
    text = denial_message([by_source["pods:list"], by_source["publicfault:watch"]])
    assert text.startswith(
        "this identity may not list pods in namespace a (kube.namespaces); "
        "watch configmaps in all namespaces (kube.public_fault_namespaces is empty): "
    )
    assert isinstance(by_source["pods:list"], ReadGrant)
