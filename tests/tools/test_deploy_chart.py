"""deploy/chart/: `helm lint`, `helm template`, and the chart with default values installs the same objects as the
kustomize base in deploy/ (generic over every object either renders: a new object in deploy/ fails this test
until the chart has it too). The apiserver's view of the rendered chart: tests/integration/test_deploy_chart_install.py.

helm is the testbed's (built from the Go module proxy and cached, like kwok); kubectl renders the base.
"""

from __future__ import annotations

import filecmp
import json
import subprocess
from typing import Any

import jsonschema
import pytest
import yaml
from chart_support import (
    CHART,
    DEPLOY,
    HELM_ONLY_LABELS,
    REPO,
    compare,
    helm,
    helm_binary,
    helm_template,
    kustomize_build,
    normalise,
    run,
)

from agent.settings import load_settings
from testbed.tools import gen_chart_schema

CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def _by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def _one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in _by_kind(objs, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _refusal(args: list[str]) -> str:
    proc = subprocess.run(
        [helm_binary(), "template", "fault-agent", str(CHART), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0, proc.stdout[:500]
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    return proc.stderr


def test_helm_lint_is_clean() -> None:
    out = helm("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    assert "[WARNING]" not in out, out
    assert "[ERROR]" not in out, out


def test_default_values_render_the_kustomize_base() -> None:
    """Normalised (tests/tools/chart_support.py: Helm's own labels and the settings checksum aside, ConfigMap
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
        "--set",
        "settings.kafka.bootstrap_servers=k1:9092",
        "--set",
        "settings.policy.resubmit_limit=2",
        "--set",
        "rbac.resubmit=true",
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
        if obj["kind"] not in CLUSTER_SCOPED and not obj["metadata"]["name"].endswith("-bookkeeping"):
            assert obj["metadata"]["namespace"] == "ops", obj["kind"]
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        assert _one(objs, kind, "fault-agent")["subjects"] == [
            {"kind": "ServiceAccount", "name": "fault-agent", "namespace": "ops"}
        ]
    # the bookkeeping Roles stay in MindCluster's namespaces; their bindings name the moved ServiceAccount
    bookkeeping = [o for o in objs if o["metadata"]["name"] == "fault-agent-bookkeeping"]
    assert sorted((o["kind"], o["metadata"]["namespace"]) for o in bookkeeping) == [
        ("Role", "mindx-dl"), ("Role", "volcano-system"), ("RoleBinding", "mindx-dl"), ("RoleBinding", "volcano-system")
    ]  # fmt: skip
    for binding in (o for o in bookkeeping if o["kind"] == "RoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fault-agent", "namespace": "ops"}]
    subject = _one(objs, "FlowSchema")["spec"]["rules"][0]["subjects"][0]["serviceAccount"]
    assert subject == {"name": "fault-agent", "namespace": "ops"}
    assert _one(objs, "ServiceMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}


def test_bookkeeping_off_renders_no_bookkeeping_roles() -> None:
    objs = helm_template("--set", "settings.policy.bookkeeping=false")
    assert [o for o in objs if o["metadata"]["name"].endswith("-bookkeeping")] == []
    assert len(_by_kind(objs, "Role")) == 1


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
    assert verbs[("batch.volcano.sh", "jobs")] == {"get", "list", "watch"}  # no write on a job at all
    assert verbs[("mindxdl.gitee.com", "ascendjobs")] == {"get", "list", "watch"}
    assert verbs[("bus.volcano.sh", "commands")] == {"create"}


POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def _policies(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs if o["kind"] in POLICY_KINDS}


def test_admission_policy_off_renders_no_policy_object() -> None:
    """Clusters older than 1.30 have no admissionregistration.k8s.io/v1 policies: admissionPolicy.enabled=false."""
    assert len(_policies(helm_template())) == 8
    objs = helm_template("--set", "admissionPolicy.enabled=false")
    assert [o for o in objs if o["apiVersion"].startswith("admissionregistration.k8s.io/")] == []


@pytest.mark.parametrize(
    ("args", "resubmit_off_bound", "job_verbs"),
    [
        pytest.param([], True, {"get", "list", "watch"}, id="default-off"),  # rbac.resubmit false, as the base
        pytest.param(["--set", "settings.policy.resubmit_limit=0"], True, None, id="limit-0"),
        pytest.param(
            ["--set", "settings.policy.resubmit_limit=2", "--set", "rbac.resubmit=true"],
            False,
            {"get", "list", "watch", "create", "delete"},
            id="limit-2-on",
        ),
        pytest.param(["--set", "rbac.resubmit=true"], True, {"get", "list", "watch", "create", "delete"}, id="rbac-on"),
        pytest.param(
            ["--set", "settings.policy.resubmit_limit=1", "--set", "rbac.create=false"], False, None, id="own-rbac"
        ),
    ],
)
def test_resubmission_switch_drops_only_the_resubmit_off_binding(
    args: list[str], resubmit_off_bound: bool, job_verbs: set[str] | None
) -> None:
    """settings.policy.resubmit_limit is the switch the agent reads; the chart binds fault-agent-resubmit-off
    exactly while it is 0, and keeps both policies and the main binding either way."""
    objs = helm_template(*args)
    policies = _policies(objs)
    expected = {
        (kind, f"fault-agent-{name}") for kind in POLICY_KINDS for name in ("writes", "opt-in-volcano", "opt-in-ascend")
    } | {("ValidatingAdmissionPolicy", "fault-agent-resubmit-off")}
    if resubmit_off_bound:
        expected.add(("ValidatingAdmissionPolicyBinding", "fault-agent-resubmit-off"))
    assert set(policies) == expected
    settings = yaml.safe_load(_one(objs, "ConfigMap", "fault-agent-config")["data"]["agent.yaml"])
    assert (settings.get("policy", {}).get("resubmit_limit", 0) == 0) is resubmit_off_bound
    if job_verbs is not None:
        rules = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in _one(objs, "ClusterRole")["rules"]}
        assert rules[("batch.volcano.sh", "jobs")] == rules[("mindxdl.gitee.com", "ascendjobs")] == job_verbs


def _username_condition(username: str) -> list[dict[str, str]]:
    return [{"name": "agent-service-account", "expression": f"request.userInfo.username == '{username}'"}]


@pytest.mark.parametrize(
    ("args", "release", "username", "policy_prefix"),
    [
        pytest.param([], "fault-agent", "system:serviceaccount:fault-agent:fault-agent", "fault-agent", id="default"),
        pytest.param(
            ["--set", "namespace.name=ops"], "fault-agent", "system:serviceaccount:ops:fault-agent", "fault-agent",
            id="namespace",
        ),
        pytest.param(
            ["--set", "serviceAccount.name=agent-sa", "--set", "serviceAccount.create=false"], "fault-agent",
            "system:serviceaccount:fault-agent:agent-sa", "fault-agent", id="own-service-account",
        ),
        pytest.param(
            [], "fa-canary", "system:serviceaccount:fault-agent:fa-canary-fault-agent", "fa-canary-fault-agent",
            id="release-name",
        ),
    ],
)  # fmt: skip
def test_policies_confine_the_charts_service_account(
    args: list[str], release: str, username: str, policy_prefix: str
) -> None:
    """Both policies match the user the agent's pods run as: the ServiceAccount RBAC binds (namespace.name and
    serviceAccount.name, else the release's full name); policy names follow the release like the ClusterRole."""
    objs = helm_template(*args, release=release)
    (subject,) = _one(objs, "ClusterRoleBinding")["subjects"]
    assert username == f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
    dep = _one(objs, "Deployment")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == subject["name"]
    assert dep["metadata"]["namespace"] == subject["namespace"]
    policies = _policies(objs)
    for suffix in ("writes", "resubmit-off", "opt-in-volcano", "opt-in-ascend"):
        name = f"{policy_prefix}-{suffix}"
        spec = policies[("ValidatingAdmissionPolicy", name)]["spec"]
        assert spec["matchConditions"][:1] == _username_condition(username)
        assert policies[("ValidatingAdmissionPolicyBinding", name)]["spec"]["policyName"] == name
    assert len(policies) == 8


@pytest.mark.parametrize(
    ("args", "literals"),
    [
        pytest.param([], ("fault-agent.io/fault", "fault-agent-breaker", "fault-agent-leader"), id="defaults"),
        pytest.param(
            ["--set", "settings.policy.taint_key=example.com/bad-chip"],
            ("example.com/bad-chip", "fault-agent-breaker", "fault-agent-leader"),
            id="taint-key",
        ),
        pytest.param(
            ["--set", "settings.policy.breaker_configmap=fa-breaker", "--set", "settings.leader.name=fa-leader"],
            ("fault-agent.io/fault", "fa-breaker", "fa-leader"),
            id="breaker-and-lease",
        ),
    ],
)
def test_policy_literals_follow_the_rendered_settings(
    tmp_path: Any, args: list[str], literals: tuple[str, str, str]
) -> None:
    """The taint key, breaker ConfigMap and Lease name in the policy are what the agent reads from the rendered
    agent.yaml (config/agent.yaml's defaults where settings leaves them out)."""
    objs = helm_template(*args)
    path = tmp_path / "agent.yaml"
    path.write_text(_one(objs, "ConfigMap", "fault-agent-config")["data"]["agent.yaml"])
    settings = load_settings(path)
    assert (settings.policy.taint_key, settings.policy.breaker_configmap, settings.leader.name) == literals
    spec = _one(objs, "ValidatingAdmissionPolicy", "fault-agent-writes")["spec"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert (variables["taintKey"], variables["breakerConfigMap"], variables["leaseName"]) == tuple(
        f"'{v}'" for v in literals
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--set", "settings.policy.taint_key=x'||true"],
            'settings.policy.taint_key "x\'||true" is not a taint key',
            id="taint-key-breaks-cel",
        ),
        pytest.param(
            ["--set", "settings.leader.name=Leader"],
            'settings.leader.name "Leader" is not a Kubernetes object name',
            id="bad-lease-name",
        ),
        pytest.param(
            ["--set", "settings.leader.namespace=elsewhere"],
            'settings.leader.namespace "elsewhere" differs from namespace.name "fault-agent"',
            id="lease-elsewhere",
        ),
        pytest.param(
            ["--set", "settings.policy.resubmit_limit=2", "--set", "rbac.resubmit=false"],
            "settings.policy.resubmit_limit is 2 but rbac.resubmit is false",
            id="resubmit-without-rbac",
        ),
        pytest.param(
            ["--kube-version", "1.29.4"],
            "Kubernetes v1.29.4 has no admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy",
            id="cluster-older-than-1.30",
        ),
    ],
)
def test_values_the_policy_cannot_follow_are_refused(args: list[str], message: str) -> None:
    proc = subprocess.run(
        [helm_binary(), "template", "fault-agent", str(CHART), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_policy_off_renders_on_clusters_older_than_1_30() -> None:
    """Without the policy its checks do not apply (RBAC alone confines the agent)."""
    objs = helm_template("--set", "admissionPolicy.enabled=false", "--kube-version", "1.29.4")
    assert _policies(objs) == {}
    assert _one(objs, "FlowSchema")  # the chart's own floor is 1.29


@pytest.mark.parametrize(
    ("flag", "kinds"),
    [
        pytest.param("serviceMonitor.enabled", {"ServiceMonitor"}, id="servicemonitor"),
        pytest.param("prometheusRule.enabled", {"PrometheusRule"}, id="prometheusrule"),
        pytest.param("podDisruptionBudget.enabled", {"PodDisruptionBudget"}, id="pdb"),
        pytest.param("networkPolicy.enabled", {"NetworkPolicy"}, id="networkpolicy"),
        pytest.param("flowSchema.enabled", {"FlowSchema", "PriorityLevelConfiguration"}, id="flowschema"),
        pytest.param("namespace.create", {"Namespace"}, id="namespace"),
        pytest.param("serviceAccount.create", {"ServiceAccount"}, id="serviceaccount"),
        pytest.param("rbac.create", {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}, id="rbac"),
        pytest.param(
            "admissionPolicy.enabled",
            {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
            id="admission-policy",
        ),
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
        pytest.param(
            ["--set", "admissionPolicy.enabled=yes"], "at '/admissionPolicy/enabled'", id="policy-switch-not-a-bool"
        ),
    ],
)
def test_bad_values_are_refused_by_the_schema(args: list[str], message: str) -> None:
    """values.schema.json: a bad value stops `helm template/install` with a message naming it."""
    stderr = _refusal(args)
    assert message in stderr, stderr


def test_settings_schema_is_generated_from_the_agents_model() -> None:
    """values.schema.json's `settings` is agent.settings.Settings' schema (testbed/tools/gen_chart_schema.py),
    so a new or changed setting fails this test until `make chart-files` is run."""
    text = (CHART / "values.schema.json").read_text()
    assert text == gen_chart_schema.render(text), "deploy/chart/values.schema.json is stale: run `make chart-files`"
    settings = json.loads(text)["properties"]["settings"]
    jsonschema.Draft7Validator.check_schema(settings)
    assert "$defs" not in json.dumps(settings)
    assert "$ref" not in json.dumps(settings)
    assert settings["additionalProperties"] is False
    assert settings["properties"]["kube"]["properties"]["watch_timeout_s"]["minimum"] == 10


def test_settings_schema_accepts_every_setting_of_config_agent_yaml() -> None:
    """config/agent.yaml (every setting at its default, null ones like leader.identity included) passes; so
    the chart's own defaults do."""
    settings = json.loads((CHART / "values.schema.json").read_text())["properties"]["settings"]
    validator = jsonschema.Draft7Validator(settings)
    full = yaml.safe_load((REPO / "config" / "agent.yaml").read_text())
    assert full["leader"]["identity"] is None
    assert [e.message for e in validator.iter_errors(full)] == []
    chart_defaults = yaml.safe_load((CHART / "values.yaml").read_text())["settings"]
    assert [e.message for e in validator.iter_errors(chart_defaults)] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--set", "settings.bogus=1"], "at '/settings': additional properties 'bogus'", id="unknown"),
        pytest.param(
            ["--set", "settings.kube.watch_timeoutt_s=30"],
            "at '/settings/kube': additional properties 'watch_timeoutt_s'",
            id="misspelt-in-group",
        ),
        pytest.param(
            ["--set", "settings.kube.watch_timeout_s=5"],
            "at '/settings/kube/watch_timeout_s': minimum: got 5, want 10",
            id="below-minimum",
        ),
        pytest.param(["--set", "settings.log.level=loud"], "at '/settings/log/level'", id="bad-enum"),
        pytest.param(["--set", "settings.leader.enabled=maybe"], "at '/settings/leader/enabled'", id="not-a-bool"),
        pytest.param(["--set", "settings.server.port=http"], "at '/settings/server/port'", id="not-a-number"),
    ],
)
def test_bad_settings_are_refused_by_the_schema(args: list[str], message: str) -> None:
    """A setting the agent would refuse at start stops `helm template/install` instead of crash-looping pods."""
    stderr = _refusal(args)
    assert message in stderr, stderr


def test_valid_settings_overrides_are_accepted(tmp_path: Any) -> None:
    """Partial settings pass the schema, including a null (environment-computed) one, and the agent loads them."""
    objs = helm_template(
        "--set", "settings.kube.watch_timeout_s=30", "--set", "settings.log.level=debug",
        "--set", "settings.detect.check_code_mismatch=ignore", "--set", "settings.leader.identity=null",
    )  # fmt: skip
    path = tmp_path / "agent.yaml"
    path.write_text(_one(objs, "ConfigMap", "fault-agent-config")["data"]["agent.yaml"])
    settings = load_settings(path)
    assert (settings.kube.watch_timeout_s, settings.log.level) == (30, "debug")
    assert settings.detect.check_code_mismatch == "ignore"


def test_package_contains_the_files(tmp_path: Any) -> None:
    """`helm package` makes an installable archive with the alert rules and the dashboard inside."""
    out = helm("package", str(CHART), "--destination", str(tmp_path))
    archive = tmp_path / "fault-agent-0.3.0.tgz"
    assert archive.is_file(), out
    listing = run(["tar", "tzf", str(archive)])
    for name in ("files/prometheusrule.yaml", "files/fault-agent-dashboard.json", "values.schema.json"):
        assert f"fault-agent/{name}" in listing.splitlines()


def test_namespace_lists_and_ascend_switch_reach_the_policy() -> None:
    """admissionPolicy.excludeNamespaces/includeNamespaces become the policy's CEL lists; ascendJobs=false drops
    only the AscendJob opt-in policy and its binding (a cluster without the AscendJob CRD)."""
    objs = helm_template(
        "--set", "admissionPolicy.excludeNamespaces={kube-system,infra}",
        "--set", "admissionPolicy.includeNamespaces={ml}",
        "--set", "admissionPolicy.ascendJobs=false",
    )  # fmt: skip
    policies = _policies(objs)
    writes = policies[("ValidatingAdmissionPolicy", "fault-agent-writes")]["spec"]
    variables = {v["name"]: v["expression"] for v in writes["variables"]}
    assert (variables["excludedNamespaces"], variables["includedNamespaces"]) == ("['kube-system', 'infra']", "['ml']")
    assert {n for _, n in policies} == {"fault-agent-writes", "fault-agent-resubmit-off", "fault-agent-opt-in-volcano"}


def test_a_namespace_that_is_no_name_is_refused() -> None:
    with pytest.raises(AssertionError, match="does not match pattern"):
        helm_template("--set", "admissionPolicy.includeNamespaces={ml'}")


def test_network_policy_values_reach_the_policy() -> None:
    policy = _one(
        helm_template(
            "--set", "networkPolicy.metricsNamespaces={prom,obs}", "--set", "networkPolicy.kafkaPorts={9094}"
        ),
        "NetworkPolicy",
    )
    spec = policy["spec"]
    names = [p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in spec["ingress"][0]["from"]]
    assert names == ["prom", "obs"]
    assert spec["egress"][2]["ports"] == [{"protocol": "TCP", "port": 9094}]
    assert spec["egress"][3] == {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
        "ports": [{"protocol": "TCP", "port": 9090}],
    }  # Prometheus' HTTP API, the progress source (issue 38)
    policy = _one(
        helm_template(
            "--set", "networkPolicy.prometheusNamespaces={obs}", "--set-json", "networkPolicy.prometheusPorts=[]"
        ),
        "NetworkPolicy",
    )
    assert all("to" not in rule for rule in policy["spec"]["egress"])  # no Prometheus port: no rule for it


def _rules(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: sorted(v) for k, v in rule.items()} for rule in obj["rules"]]


def test_operator_roles_are_deploy_operators_rules_and_opt_in() -> None:
    """Issue 41, 6: deploy/operator/rbac.yaml (the operators' CLI's least access) had no chart counterpart. With
    operatorRBAC.create the chart renders the same ClusterRole and Role (rules equal, same names with the default
    release, the Role in namespace.name), bound to nobody; off by default (the kustomize base has neither)."""
    assert {o["metadata"]["name"] for o in helm_template() if o["metadata"]["name"].endswith("-operator")} == set()
    files = {o["kind"]: o for o in yaml.safe_load_all((DEPLOY / "operator" / "rbac.yaml").read_text()) if o}
    assert set(files) == {"ClusterRole", "Role"}
    objs = helm_template("--set", "operatorRBAC.create=true", "--set", "namespace.name=ops")
    rendered = {o["kind"]: o for o in objs if o["metadata"]["name"] == "fault-agent-operator"}
    assert set(rendered) == {"ClusterRole", "Role"}  # no binding without subjects
    for kind, want in files.items():
        assert rendered[kind]["metadata"]["name"] == want["metadata"]["name"]
        assert _rules(rendered[kind]) == _rules(want), kind
    assert rendered["Role"]["metadata"]["namespace"] == "ops"


def test_operator_subjects_bind_both_roles() -> None:
    group = {"kind": "Group", "name": "sre", "apiGroup": "rbac.authorization.k8s.io"}
    objs = helm_template(
        "--set", "operatorRBAC.create=true", "--set", "namespace.name=ops",
        "--set", "operatorRBAC.subjects[0].kind=Group", "--set", "operatorRBAC.subjects[0].name=sre",
        "--set", "operatorRBAC.subjects[0].apiGroup=rbac.authorization.k8s.io",
        release="fa",
    )  # fmt: skip
    bindings = {o["kind"]: o for o in objs if o["metadata"]["name"] == "fa-fault-agent-operator"}
    assert set(bindings) == {"ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"}
    assert bindings["ClusterRoleBinding"]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "fa-fault-agent-operator"
    }  # fmt: skip
    assert bindings["RoleBinding"]["roleRef"]["kind"] == "Role"
    assert bindings["RoleBinding"]["metadata"]["namespace"] == "ops"
    assert bindings["ClusterRoleBinding"]["subjects"] == bindings["RoleBinding"]["subjects"] == [group]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--set", "operatorRBAC.subjects[0].kind=Team", "--set", "operatorRBAC.subjects[0].name=a"],
                     "at '/operatorRBAC/subjects/0/kind'", id="unknown-kind"),
        pytest.param(["--set", "operatorRBAC.subjects[0].kind=ServiceAccount", "--set",
                      "operatorRBAC.subjects[0].name=ci"], "missing property 'namespace'", id="sa-without-namespace"),
        pytest.param(["--set", "operatorRBAC.create=yes"], "at '/operatorRBAC/create'", id="switch-not-a-bool"),
    ],
)  # fmt: skip
def test_bad_operator_subjects_are_refused_by_the_schema(args: list[str], message: str) -> None:
    stderr = _refusal(["--set", "operatorRBAC.create=true", *args])
    assert message in stderr, stderr
