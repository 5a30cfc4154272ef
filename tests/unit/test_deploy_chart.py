"""deploy/chart/: `helm lint`, `helm template`, and the chart with default values installs the same objects as the
kustomize base in deploy/ (generic over every object either renders: a new object in deploy/ fails this test
until the chart has it too). The apiserver's view of the rendered chart: tests/integration/test_deploy_chart.py.

helm is the testbed's (built from the Go module proxy and cached, like kwok); kubectl renders the base.
"""

from __future__ import annotations

import filecmp
import subprocess
from typing import Any

import pytest
import yaml
from chart_support import (
    CHART,
    DEPLOY,
    HELM_ONLY_LABELS,
    compare,
    helm,
    helm_binary,
    helm_template,
    kustomize_build,
    normalise,
    run,
)

from agent.settings import load_settings

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "FlowSchema", "PriorityLevelConfiguration"}


def _by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def _one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in _by_kind(objs, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def test_helm_lint_is_clean() -> None:
    out = helm("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    assert "[WARNING]" not in out, out
    assert "[ERROR]" not in out, out


def test_default_values_render_the_kustomize_base() -> None:
    """Normalised (tests/unit/chart_support.py: Helm's own labels and the settings checksum aside, ConfigMap
    files compared parsed), the two renderings are the same objects, field for field."""
    base = kustomize_build()
    chart = helm_template()
    assert compare(base, chart) == []
    assert len(normalise(chart)) == len(base)


def test_the_comparison_sees_a_difference() -> None:
    """The equality above can fail: a changed default, a missing object and an extra one are each reported."""
    base = kustomize_build()
    changed = helm_template("--set", "replicas=3", "--set", "podDisruptionBudget.enabled=false")
    lines = compare(base, changed)
    assert any("Deployment/fault-agent/fault-agent /spec/replicas: 2 != 3" in line for line in lines), lines
    assert any(line.startswith("only in deploy/ (kustomize): policy/v1/PodDisruptionBudget") for line in lines)
    extra = [*base, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "fault-agent"}}]
    assert compare(extra, helm_template()) == ["only in deploy/ (kustomize): v1/ConfigMap/fault-agent/x"]


def test_chart_files_are_copies_of_deploy() -> None:
    """The alert rules and the dashboard have one source, deploy/ (promtool and the e2e test check it there);
    the chart packages copies, refreshed by `make chart-files`."""
    names = ["prometheusrule.yaml", "fault-agent-dashboard.json"]
    match, mismatch, errors = filecmp.cmpfiles(DEPLOY, CHART / "files", names, shallow=False)
    assert (mismatch, errors) == ([], []), "deploy/chart/files/ is stale: run `make chart-files`"
    assert sorted(match) == sorted(names)


def test_every_object_carries_helms_standard_labels() -> None:
    for obj in helm_template():
        labels = obj["metadata"]["labels"]
        assert labels.keys() >= HELM_ONLY_LABELS, obj["metadata"]["name"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/name"] == "fault-agent"


def test_rendered_settings_are_valid_agent_settings(tmp_path: Any) -> None:
    cm = _one(helm_template("--set", "namespace.name=ops"), "ConfigMap", "fault-agent-config")
    path = tmp_path / "agent.yaml"
    path.write_text(cm["data"]["agent.yaml"])
    settings = load_settings(path)
    assert settings.leader.namespace == "ops"  # from namespace.name, unless settings.leader.namespace is given
    assert settings.kafka.bootstrap_servers == "kafka-bootstrap.kafka.svc:9092"
    assert settings.kafka.outbox_dir == "/var/lib/fault-agent/outbox"


def test_settings_values_reach_the_config_and_roll_the_pods() -> None:
    default = helm_template()
    changed = helm_template(
        "--set", "settings.kafka.bootstrap_servers=k1:9092", "--set", "settings.policy.resubmit_limit=2"
    )
    settings = yaml.safe_load(_one(changed, "ConfigMap", "fault-agent-config")["data"]["agent.yaml"])
    assert settings["kafka"]["bootstrap_servers"] == "k1:9092"
    assert settings["policy"] == {"resubmit_limit": 2}
    checksum = [
        _one(objs, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        for objs in (default, changed)
    ]
    assert checksum[0] != checksum[1]


@pytest.mark.parametrize(
    ("args", "image"),
    [
        pytest.param([], "ghcr.io/fault-agent/fault-agent:0.1.0", id="app-version"),
        pytest.param(["--set", "image.tag=0.2.0-rc1"], "ghcr.io/fault-agent/fault-agent:0.2.0-rc1", id="tag"),
        pytest.param(
            ["--set", "image.repository=registry.local/fa", "--set", "image.digest=sha256:" + "ab" * 32],
            "registry.local/fa@sha256:" + "ab" * 32,
            id="digest-wins",
        ),
    ],
)
def test_image(args: list[str], image: str) -> None:
    container = _one(helm_template(*args), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == image


def test_namespace_value_moves_every_object_and_reference() -> None:
    objs = helm_template("--set", "namespace.name=ops", "--set", "namespace.create=false")
    assert _by_kind(objs, "Namespace") == []
    for obj in objs:
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == "ops", obj["kind"]
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        assert _one(objs, kind)["subjects"] == [{"kind": "ServiceAccount", "name": "fault-agent", "namespace": "ops"}]
    subject = _one(objs, "FlowSchema")["spec"]["rules"][0]["subjects"][0]["serviceAccount"]
    assert subject == {"name": "fault-agent", "namespace": "ops"}
    assert _one(objs, "ServiceMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}


def test_release_name_names_the_objects_but_not_the_selector() -> None:
    objs = helm_template(release="fa-canary")
    dep = _one(objs, "Deployment")
    assert dep["metadata"]["name"] == "fa-canary-fault-agent"
    assert dep["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "fault-agent",
        "app.kubernetes.io/component": "agent",
    }
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "fa-canary-fault-agent-config"
    assert volumes["outbox"]["persistentVolumeClaim"]["claimName"] == "fa-canary-fault-agent-outbox"
    assert _one(objs, "ClusterRoleBinding")["roleRef"]["name"] == "fa-canary-fault-agent"


def test_rbac_resubmit_false_drops_create_and_delete_on_jobs() -> None:
    role = _one(helm_template("--set", "rbac.resubmit=false"), "ClusterRole")
    verbs = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in role["rules"]}
    assert verbs[("batch.volcano.sh", "jobs")] == {"get", "list", "watch", "patch"}
    assert verbs[("mindxdl.gitee.com", "ascendjobs")] == {"get", "list", "watch", "patch"}
    assert verbs[("bus.volcano.sh", "commands")] == {"create"}


@pytest.mark.parametrize(
    ("flag", "kinds"),
    [
        pytest.param("serviceMonitor.enabled", {"ServiceMonitor"}, id="servicemonitor"),
        pytest.param("prometheusRule.enabled", {"PrometheusRule"}, id="prometheusrule"),
        pytest.param("podDisruptionBudget.enabled", {"PodDisruptionBudget"}, id="pdb"),
        pytest.param("flowSchema.enabled", {"FlowSchema", "PriorityLevelConfiguration"}, id="flowschema"),
        pytest.param("namespace.create", {"Namespace"}, id="namespace"),
        pytest.param("serviceAccount.create", {"ServiceAccount"}, id="serviceaccount"),
        pytest.param("rbac.create", {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}, id="rbac"),
    ],
)
def test_switches_drop_exactly_their_objects(flag: str, kinds: set[str]) -> None:
    full = {(o["kind"], o["metadata"]["name"]) for o in helm_template()}
    without = {(o["kind"], o["metadata"]["name"]) for o in helm_template("--set", f"{flag}=false")}
    assert {kind for kind, _ in full - without} == kinds
    assert without < full


def test_dashboard_switch_drops_its_configmap_only() -> None:
    names = {o["metadata"]["name"] for o in helm_template("--set", "dashboard.enabled=false")}
    assert "fault-agent-dashboard" not in names
    assert "fault-agent-config" in names


def test_resources_replicas_and_extra_env() -> None:
    objs = helm_template(
        "--set", "replicas=1", "--set", "resources.limits.memory=2Gi",
        "--set", "extraEnv[0].name=FAULT_AGENT_KAFKA__SASL_PASSWORD",
        "--set", "extraEnv[0].valueFrom.secretKeyRef.name=kafka",
        "--set", "extraEnv[0].valueFrom.secretKeyRef.key=password",
    )  # fmt: skip
    dep = _one(objs, "Deployment")
    assert dep["spec"]["replicas"] == 1
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"memory": "2Gi"}
    assert container["env"][-1] == {
        "name": "FAULT_AGENT_KAFKA__SASL_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "kafka", "key": "password"}},
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--set", "replicas=two"], "at '/replicas'", id="replicas-not-a-number"),
        pytest.param(["--set", "image.digest=latest"], "at '/image/digest'", id="bad-digest"),
        pytest.param(["--set", "namespace.name=Ops"], "at '/namespace/name'", id="bad-namespace"),
        pytest.param(["--set", "serviceMonitr.enabled=false"], "'serviceMonitr' not allowed", id="misspelt-value"),
        pytest.param(["--set", "outbox.accessModes[0]=RWX"], "at '/outbox/accessModes/0'", id="bad-access-mode"),
    ],
)
def test_bad_values_are_refused_by_the_schema(args: list[str], message: str) -> None:
    """values.schema.json: a bad value stops `helm template/install` with a message naming it."""
    proc = subprocess.run(
        [helm_binary(), "template", "fault-agent", str(CHART), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert message in proc.stderr, proc.stderr


def test_package_contains_the_files(tmp_path: Any) -> None:
    """`helm package` makes an installable archive with the alert rules and the dashboard inside."""
    out = helm("package", str(CHART), "--destination", str(tmp_path))
    archive = tmp_path / "fault-agent-0.1.0.tgz"
    assert archive.is_file(), out
    listing = run(["tar", "tzf", str(archive)])
    for name in ("files/prometheusrule.yaml", "files/fault-agent-dashboard.json", "values.schema.json"):
        assert f"fault-agent/{name}" in listing.splitlines()
