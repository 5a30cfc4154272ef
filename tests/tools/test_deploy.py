"""deploy/: manifests parse, the kustomization lists every file, RBAC is exactly as intended, Deployment is hardened.

The kustomize build is checked with `kubectl kustomize` (kubectl ships kustomize); kubectl missing is a failure.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from agent.settings import load_settings
from agent.sinks.metrics import AgentMetrics

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
NAMESPACE = "fault-agent"
SA = f"system:serviceaccount:{NAMESPACE}:fault-agent"

# (apiGroup, resource) -> verbs. Exactly what the agent uses; see the comments in clusterrole.yaml.
EXPECTED_CLUSTER_RULES: dict[tuple[str, str], set[str]] = {
    ("", "pods"): {"get", "list", "watch", "delete", "patch"},  # patch: huawei.com/pod-status (external-force)
    ("", "nodes"): {"get", "list", "watch", "patch"},
    ("", "configmaps"): {"get", "list", "watch", "update", "patch"},
    # no patch/update on jobs: the agent writes nothing on a job (agent.core.records);
    # no create/delete on jobs: resubmission is off by default, its overlay adds them (deploy/README.md)
    ("batch.volcano.sh", "jobs"): {"get", "list", "watch"},
    ("bus.volcano.sh", "commands"): {"create"},
    ("mindxdl.gitee.com", "ascendjobs"): {"get", "list", "watch"},
    # read only: JobSets are restarted through their pods, never written (kube.jobsets_enabled, docs/jobset.md)
    ("jobset.x-k8s.io", "jobsets"): {"get", "list", "watch"},
    # read only: the ProcessRecoverStrategy annotation (kube.podgroup_info_enabled)
    ("scheduling.volcano.sh", "podgroups"): {"get", "list", "watch"},
    # read only: the training-progress heartbeat Leases (kube.progress_leases_enabled, agent.core.progress)
    ("coordination.k8s.io", "leases"): {"get", "list", "watch"},
    # read only: DRA, which device is which and which pod holds it (kube.dra, agent.core.dra)
    ("resource.k8s.io", "resourceslices"): {"get", "list", "watch"},
    ("resource.k8s.io", "resourceclaims"): {"get", "list", "watch"},
    # Kubernetes Events on jobs, pods and nodes (agent.core.kube_events): create, patch a repeat's series
    ("events.k8s.io", "events"): {"create", "patch"},
    # /metrics behind authentication (server.metrics_auth: kubernetes, agent.kube.metrics_auth)
    ("authentication.k8s.io", "tokenreviews"): {"create"},
    ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
}
EXPECTED_NAMESPACE_RULES: dict[tuple[str, str], set[str]] = {
    ("coordination.k8s.io", "leases"): {"get", "create", "update"},
    # breaker (create); resubmission records (create, delete); job records (all: agent.core.records)
    ("", "configmaps"): {"get", "list", "watch", "create", "update", "patch", "delete"},
}
# The bookkeeping Roles (deploy/bookkeeping-rbac.yaml): create of MindCluster's ConfigMaps, in their namespaces.
BOOKKEEPING_NAMESPACES = {"volcano-system", "mindx-dl"}
BOOKKEEPING = "fault-agent-bookkeeping"


def _home(obj: dict[str, Any]) -> str:
    """The namespace an object of the base belongs in: the agent's, or a bookkeeping Role's own."""
    if obj["kind"] in {"Role", "RoleBinding"} and obj["metadata"]["name"] == BOOKKEEPING:
        assert obj["metadata"]["namespace"] in BOOKKEEPING_NAMESPACES
        return str(obj["metadata"]["namespace"])
    return NAMESPACE


CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def _kustomization() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    return data


def render_base() -> list[dict[str, Any]]:
    """The objects `kubectl apply -k deploy/` creates, built without kustomize (this base uses only resources,
    configMapGenerator without hash suffix, common labels and one image override)."""
    k = _kustomization()
    objs: list[dict[str, Any]] = []
    for rel in k["resources"]:
        objs += [d for d in yaml.safe_load_all((DEPLOY / rel).read_text()) if d]
    for gen in k["configMapGenerator"]:
        labels = dict(gen.get("options", {}).get("labels", {}))
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": gen["name"], "namespace": gen["namespace"], "labels": labels},
                "data": {Path(f).name: (DEPLOY / f).read_text() for f in gen["files"]},
            }
        )
    return objs


def _one(objs: list[dict[str, Any]], kind: str, name: str = "fault-agent") -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _rules(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


@pytest.fixture(scope="module")
def objs() -> list[dict[str, Any]]:
    return render_base()


@pytest.mark.parametrize("path", sorted(DEPLOY.glob("*.yaml")), ids=lambda p: p.name)
def test_every_manifest_parses(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs, f"{path.name} is empty"
    if path.name not in {"kustomization.yaml", "agent.yaml"}:
        for doc in docs:
            assert {"apiVersion", "kind", "metadata"} <= set(doc), path.name


def test_kustomization_lists_every_file() -> None:
    k = _kustomization()
    listed = set(k["resources"]) | {f for g in k["configMapGenerator"] for f in g["files"]}
    on_disk = {p.name for p in DEPLOY.iterdir() if p.suffix in {".yaml", ".json"}} - {"kustomization.yaml"}
    assert sorted(on_disk - listed) == [], "files in deploy/ not in kustomization.yaml"
    assert sorted(listed - on_disk) == [], "kustomization.yaml lists missing files"


def test_kubectl_kustomize_builds_the_same_objects(objs: list[dict[str, Any]]) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl not found on PATH (it ships kustomize)")
    proc = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    built = [d for d in yaml.safe_load_all(proc.stdout) if d]
    key = sorted((o["kind"], o["metadata"]["name"]) for o in built)
    assert key == sorted((o["kind"], o["metadata"]["name"]) for o in objs)
    for o in built:
        if o["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in o["metadata"], f"{o['kind']}/{o['metadata']['name']}"
        else:
            assert o["metadata"]["namespace"] == _home(o), o["metadata"]["name"]
        assert o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "fault-agent"
    deploy = next(o for o in built if o["kind"] == "Deployment")
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"].startswith("ghcr.io/fault-agent/fault-agent:")


def test_namespaced_objects_are_in_the_agent_namespace(objs: list[dict[str, Any]]) -> None:
    wrong = [
        f"{o['kind']}/{o['metadata']['name']}"
        for o in objs
        if o["kind"] not in CLUSTER_SCOPED and o["metadata"].get("namespace") != _home(o)
    ]
    assert wrong == []


def test_bookkeeping_roles_grant_only_create_of_configmaps_in_their_namespaces(objs: list[dict[str, Any]]) -> None:
    """MindCluster's bookkeeping ConfigMaps are created by the agent when missing (policy.bookkeeping); create
    cannot be limited by resourceNames, so it is granted only in volcano-system and mindx-dl (the admission
    policy narrows it to the two names); get/update come from the ClusterRole's configmap rule."""
    roles = [o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == BOOKKEEPING]
    assert {r["metadata"]["namespace"] for r in roles} == BOOKKEEPING_NAMESPACES
    for role in roles:
        assert _rules(role) == {("", "configmaps"): {"create"}}
    bindings = [o for o in objs if o["kind"] == "RoleBinding" and o["metadata"]["name"] == BOOKKEEPING]
    assert {b["metadata"]["namespace"] for b in bindings} == BOOKKEEPING_NAMESPACES
    for b in bindings:
        assert b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": BOOKKEEPING}
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "fault-agent", "namespace": NAMESPACE}]


def test_agent_requests_have_their_own_priority_level(objs: list[dict[str, Any]]) -> None:
    """API Priority and Fairness: the agent's ServiceAccount matches a FlowSchema ahead of the built-in
    "service-accounts" (9000) and "kube-system-service-accounts" (900) schemas, into a Limited level that lends
    none of its seats."""
    schema = _one(objs, "FlowSchema")
    level = _one(objs, "PriorityLevelConfiguration")
    assert schema["spec"]["priorityLevelConfiguration"]["name"] == level["metadata"]["name"]
    assert 800 < schema["spec"]["matchingPrecedence"] < 900
    (rule,) = schema["spec"]["rules"]
    assert rule["subjects"] == [
        {"kind": "ServiceAccount", "serviceAccount": {"name": "fault-agent", "namespace": NAMESPACE}}
    ]
    sa = _one(objs, "ServiceAccount")
    assert (sa["metadata"]["name"], sa["metadata"]["namespace"]) == ("fault-agent", NAMESPACE)
    assert rule["resourceRules"][0]["clusterScope"] is True
    assert level["spec"]["type"] == "Limited"
    assert level["spec"]["limited"]["lendablePercent"] == 0
    assert level["spec"]["limited"]["limitResponse"]["type"] == "Queue"


def test_cluster_role_has_exactly_the_intended_verbs(objs: list[dict[str, Any]]) -> None:
    assert _rules(_one(objs, "ClusterRole")) == EXPECTED_CLUSTER_RULES


def test_namespace_role_has_exactly_the_intended_verbs(objs: list[dict[str, Any]]) -> None:
    role = _one(objs, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert _rules(role) == EXPECTED_NAMESPACE_RULES


@pytest.mark.parametrize("kind", ["ClusterRole", "Role"])
def test_no_secrets_no_wildcards_no_escalation(objs: list[dict[str, Any]], kind: str) -> None:
    for rule in _one(objs, kind)["rules"]:
        assert "secrets" not in rule["resources"]
        assert "*" not in rule["resources"] + rule["verbs"] + rule["apiGroups"]
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
        assert not any(r.startswith("pods/") for r in rule["resources"])  # no exec, attach, portforward


def test_every_rule_is_commented() -> None:
    for name in ("clusterrole.yaml", "role.yaml"):
        lines = (DEPLOY / name).read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("- apiGroups:"):
                assert lines[i - 1].strip().startswith("#"), f"{name}:{i + 1} rule without a comment"


@pytest.mark.parametrize(("kind", "role_kind"), [("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")])
def test_bindings_point_at_the_agent_service_account(objs: list[dict[str, Any]], kind: str, role_kind: str) -> None:
    binding = _one(objs, kind)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": "fault-agent"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fault-agent", "namespace": NAMESPACE}]


def test_deployment_is_hardened_and_wired(objs: list[dict[str, Any]]) -> None:
    dep = _one(objs, "Deployment")
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert pod["serviceAccountName"] == _one(objs, "ServiceAccount")["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert {"cpu", "memory"} <= set(c["resources"]["requests"])
    assert "memory" in c["resources"]["limits"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["args"] == ["run"]
    env = {e["name"]: e for e in c["env"]}
    assert env["FAULT_AGENT_LEADER__IDENTITY"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    settings = load_settings(DEPLOY / "agent.yaml")
    # the outbox directory of the settings is the PVC mount
    assert (
        volumes[mounts[settings.kafka.outbox_dir]]["persistentVolumeClaim"]["claimName"]
        == _one(objs, "PersistentVolumeClaim", "fault-agent-outbox")["metadata"]["name"]
    )
    # the config file the env names is the ConfigMap's agent.yaml
    config_path = Path(env["FAULT_AGENT_CONFIG"]["value"])
    cm_name = volumes[mounts[str(config_path.parent)]]["configMap"]["name"]
    assert config_path.name in _one(objs, "ConfigMap", cm_name)["data"]
    # the container port is the server port, and the Service and probes use it by name
    (port,) = c["ports"]
    assert port["containerPort"] == settings.server.port
    svc = _one(objs, "Service")
    assert svc["spec"]["ports"][0]["targetPort"] == port["name"]
    assert svc["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert settings.leader.namespace == NAMESPACE


def test_pdb_and_service_monitor_select_the_agent(objs: list[dict[str, Any]]) -> None:
    labels = _one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    pdb = _one(objs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    sm = _one(objs, "ServiceMonitor")
    svc = _one(objs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"


def test_network_policy_confines_the_agents_pods(objs: list[dict[str, Any]]) -> None:
    """Issue 37, 10: ingress only to the metrics port (named as the container's), egress only to DNS, the
    apiserver, Kafka and (issue 38, the progress source) Prometheus' 9090 in `monitoring`, for exactly the agent's
    pods."""
    deployment = _one(objs, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    policy = _one(objs, "NetworkPolicy")
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"].items() <= labels.items()
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = spec["ingress"]
    (container_port,) = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert ingress["ports"] == [{"protocol": "TCP", "port": container_port["name"]}]
    assert ingress["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    anywhere = [rule for rule in spec["egress"] if "to" not in rule]  # ports only: the apiserver has no selector
    egress = sorted((p["protocol"], p["port"]) for rule in anywhere for p in rule["ports"])
    assert egress == [("TCP", 53), ("TCP", 443), ("TCP", 6443), ("TCP", 9092), ("TCP", 9093), ("UDP", 53)]
    (prometheus,) = [rule for rule in spec["egress"] if "to" in rule]
    assert prometheus == {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
        "ports": [{"protocol": "TCP", "port": 9090}],
    }


def test_deploy_agent_yaml_is_valid_settings() -> None:
    settings = load_settings(DEPLOY / "agent.yaml")
    assert settings.log.format == "json"
    assert settings.leader.enabled is True


def _exported() -> set[str]:
    reg = CollectorRegistry()
    AgentMetrics(reg)
    names: set[str] = set()
    for fam in reg.collect():
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"], "info": ["_info"]}
        names |= {fam.name + s for s in suffixes.get(fam.type, [""])}
    return names


def test_dashboard_covers_the_issue_and_uses_exported_metrics(objs: list[dict[str, Any]]) -> None:
    cm = _one(objs, "ConfigMap", "fault-agent-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["fault-agent-dashboard.json"])
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    text = "\n".join(exprs)
    for needed in (
        "fault_agent_recovery_seconds_bucket",  # recovery time distribution
        "sum by (level) (increase(fault_agent_faults_total",  # faults by level
        "fault_agent_incidents_open",
        "fault_agent_actions_total",
        "fault_agent_detection_lag_seconds_bucket",  # lag
        "rate(fault_agent_events_published_total",  # publish rate
    ):
        assert needed in text, needed
    used = set(re.findall(r"\bfault_agent_[a-z_]+", text))
    assert sorted(used - _exported()) == []
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


# A metric selector of ours: the name, then its matchers if any.
_SELECTOR = re.compile(r"\b(fault_agent_[a-z_]+)(\{[^}]*\})?")


def test_dashboard_shows_one_cluster_chosen_by_a_variable() -> None:
    """On a Prometheus shared by many clusters (issue 41, 4), every selector of every panel keeps to the cluster
    chosen in the `cluster` variable; without it "Leader replicas, should be exactly 1" summed every cluster's."""
    dash = json.loads((REPO / "deploy" / "fault-agent-dashboard.json").read_text())
    (var,) = [v for v in dash["templating"]["list"] if v["name"] == "cluster"]
    assert var["type"] == "query"
    assert var["query"]["query"] == "label_values(fault_agent_build_info, cluster)"
    assert not var["multi"]
    assert not var["includeAll"]
    unscoped = [
        f"{p['title']}: {m[0]}"
        for p in dash["panels"]
        for t in p.get("targets", [])
        for m in _SELECTOR.finditer(t["expr"])
        if 'cluster="$cluster"' not in (m[2] or "")
    ]
    assert unscoped == []
    assert sum(1 for p in dash["panels"] for _ in p.get("targets", [])) > 20


def test_dashboard_shows_the_incidents_the_breaker_holds() -> None:
    """Issue 41, 3: a job hit while the breaker is open sits in state held-by-breaker; the state row shows how
    many beside the breaker itself, so "what did the agent do to my job" is answered without the logs."""
    dash = json.loads((REPO / "deploy" / "fault-agent-dashboard.json").read_text())
    state_row = [p for p in dash["panels"] if p["type"] == "stat" and p["gridPos"]["y"] == 1]
    exprs = {p["title"]: [t["expr"] for t in p["targets"]] for p in state_row}
    assert exprs.get("Held by breaker") == ['max(fault_agent_incidents_held{cluster="$cluster"})'], exprs
    # the row still fits one line of Grafana's 24 columns, no panel over another
    spans = sorted((p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"]) for p in state_row)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert spans[-1][1] <= 24


def _counts_bytes(expr: str) -> bool:
    """Whether a dashboard expression's values are bytes (the unit is in the metric's name)."""
    return any(n.endswith("_bytes") for n in re.findall(r"\bfault_agent_[a-z_]+", expr))


def test_dashboard_panels_put_each_unit_on_its_own_axis() -> None:
    """A panel's series are drawn in the panel's unit unless an override gives their legend another one: a
    byte count must not share the axis of an event count (the Outbox panel did)."""
    dash = json.loads((REPO / "deploy" / "fault-agent-dashboard.json").read_text())
    wrong = []
    for panel in dash["panels"]:
        default = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        overrides = {
            o["matcher"]["options"]: {p["id"]: p["value"] for p in o["properties"]}
            for o in panel.get("fieldConfig", {}).get("overrides", [])
            if o["matcher"]["id"] == "byName"
        }
        for target in panel.get("targets", []):
            shown = overrides.get(target.get("legendFormat", ""), {}).get("unit", default)
            if _counts_bytes(target["expr"]) and shown != "bytes":
                wrong.append(f"{panel['title']}: {target['legendFormat']} shown as {shown}")
        units = {overrides.get(t.get("legendFormat", ""), {}).get("unit", default) for t in panel.get("targets", [])}
        placements = {
            overrides.get(t.get("legendFormat", ""), {}).get("custom.axisPlacement", "auto")
            for t in panel.get("targets", [])
        }
        if len(units) > 1 and len(placements) < len(units):
            wrong.append(f"{panel['title']}: units {sorted(units)} on {len(placements)} axis")
    assert wrong == []


def _final_stage(dockerfile: str) -> str:
    return dockerfile.split("\nFROM ")[-1]


def test_dockerfile_is_multistage_slim_pinned_non_root() -> None:
    text = (REPO / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE)
    assert len(froms) >= 2, "multi-stage"
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)", text, flags=re.MULTILINE)
    assert base is not None
    # pinned by digest (issue 37, 10): a tag can be pushed again
    assert re.fullmatch(r"docker\.io/library/python:\d+\.\d+\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base.group(1)), (
        base.group(1)
    )
    final = _final_stage(text)
    user = re.findall(r"^USER\s+(\S+)", final, flags=re.MULTILINE)
    assert user, "final stage sets USER"
    assert user[-1].split(":")[0] not in {"0", "root"}
    for tool in ("gcc", "build-essential", "apt-get install"):
        assert tool not in final, tool
    assert re.search(r'^ENTRYPOINT \["fault-agent"\]', final, flags=re.MULTILINE)
    assert re.search(r'^CMD \["run"\]', final, flags=re.MULTILINE)
    assert "docker build" in text  # documented


def test_dockerignore_keeps_the_context_small() -> None:
    lines = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()}
    assert {".git", ".venv", "tests/"} <= lines


POLICY_RULES = (
    "namespaces",
    "configmaps",
    "resubmit-records",
    "rings-config",
    "reset-config",
    "node-taint",
    "pods",
    "pod-uid",
    "job-writes",
    "job-resubmit",
    "commands",
    "leases",
    "events",
    "known-writes",
)


def _by_name(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def test_admission_policies_confine_only_the_agents_service_account(objs: list[dict[str, Any]]) -> None:
    policies = _by_name(objs, "ValidatingAdmissionPolicy")
    bindings = _by_name(objs, "ValidatingAdmissionPolicyBinding")
    opt_in = {"fault-agent-opt-in-volcano": ("batch.volcano.sh/v1alpha1", "Job"),
              "fault-agent-opt-in-ascend": ("mindxdl.gitee.com/v1", "AscendJob")}  # fmt: skip
    assert set(policies) == {"fault-agent-writes", "fault-agent-resubmit-off", *opt_in}
    assert {b["spec"]["policyName"] for b in bindings.values()} == set(policies)
    for binding in bindings.values():
        assert binding["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in binding["spec"]  # the policy's own constraints, nothing narrower
        if binding["spec"]["policyName"] in opt_in:
            # the params: the request namespace's jobs that did not opt in; none there, nothing to deny
            assert binding["spec"]["paramRef"] == {
                "selector": {
                    "matchExpressions": [
                        {
                            "key": "fault-scheduling",
                            "operator": "NotIn",
                            "values": ["force", "grace", "external-force", "external-grace"],
                        }
                    ]
                },
                "parameterNotFoundAction": "Allow",
            }
        else:
            assert "paramRef" not in binding["spec"]
    for name, policy in policies.items():
        spec = policy["spec"]
        assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert spec["failurePolicy"] == "Fail"
        # no ConfigMap paramKind: a built-in param informer can freeze with stale values (kubernetes/kubernetes#130887);
        # the opt-in policies' params are the jobs themselves, custom resources
        if name in opt_in:
            assert (spec["paramKind"]["apiVersion"], spec["paramKind"]["kind"]) == opt_in[name]
        else:
            assert "paramKind" not in spec
        assert spec["matchConditions"][0] == {
            "name": "agent-service-account",
            "expression": f"request.userInfo.username == '{SA}'",
        }
        assert len(spec["matchConditions"]) == (2 if name in opt_in else 1)
        for validation in spec["validations"]:
            assert re.match(r"^'fault-agent policy, rule [a-z-]+: ' \+ ", validation["messageExpression"])
            assert validation["reason"] == "Forbidden"
    writes = policies["fault-agent-writes"]["spec"]
    rules = [re.search(r"rule ([a-z-]+):", v["messageExpression"]).group(1) for v in writes["validations"]]  # type: ignore[union-attr]
    assert tuple(rules) == POLICY_RULES
    # every write of every resource and subresource is matched; what no rule names is denied by known-writes
    (match,) = writes["matchConstraints"]["resourceRules"]
    assert match == {
        "apiGroups": ["*"],
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE", "DELETE", "CONNECT"],
        "resources": ["*/*"],
    }
    assert [g for r in writes["matchConstraints"]["excludeResourceRules"] for g in r["apiGroups"]] == [
        "authentication.k8s.io",
        "authorization.k8s.io",
    ]


def test_admission_policy_literals_match_the_agents_settings(objs: list[dict[str, Any]]) -> None:
    settings = load_settings(DEPLOY / "agent.yaml")
    spec = _by_name(objs, "ValidatingAdmissionPolicy")["fault-agent-writes"]["spec"]
    literals = {v["name"]: v["expression"] for v in spec["variables"]}
    assert literals["taintKey"] == f"'{settings.policy.taint_key}'"
    assert literals["breakerConfigMap"] == f"'{settings.policy.breaker_configmap}'"
    assert literals["leaseName"] == f"'{settings.leader.name}'"
    assert settings.leader.namespace == NAMESPACE  # the breaker and the Lease live in the ServiceAccount's namespace
    # resubmission off in the agent (resubmit_limit 0) and in the policy (the resubmit-off binding present)
    assert settings.policy.resubmit_limit == 0
    assert "fault-agent-resubmit-off" in _by_name(objs, "ValidatingAdmissionPolicyBinding")


def _build_readme_overlay(tmp_path: Path, title: str) -> list[dict[str, Any]]:
    """Build the overlay of deploy/README.md whose code block starts with `# kustomization.yaml of an overlay
    <title>`, placed in a folder next to (a link to) deploy/ as the README says."""
    readme = (DEPLOY / "README.md").read_text()
    block = re.search(r"```yaml\n(# kustomization\.yaml of an overlay " + re.escape(title) + r".*?)```", readme, re.S)
    assert block is not None, f"README lacks the overlay {title}"
    (tmp_path / "deploy").symlink_to(DEPLOY)
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text(block.group(1))
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl not found on PATH (it ships kustomize)")
    proc = subprocess.run(
        [kubectl, "kustomize", str(tmp_path / "overlay")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _names(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs}


def test_readme_overlay_turns_resubmission_on(tmp_path: Path) -> None:
    built = _build_readme_overlay(tmp_path, "that turns resubmission on")
    assert _names(render_base()) - _names(built) == {("ValidatingAdmissionPolicyBinding", "fault-agent-resubmit-off")}
    role = next(d for d in built if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "fault-agent")
    verbs = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in role["rules"]}
    assert (
        verbs[("batch.volcano.sh", "jobs")]
        == verbs[("mindxdl.gitee.com", "ascendjobs")]
        == {"get", "list", "watch", "create", "delete"}
    )
    deploy = next(d for d in built if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert int(env["FAULT_AGENT_POLICY__RESUBMIT_LIMIT"]) > 0
    assert "FAULT_AGENT_CONFIG" in env  # the base's variables kept


def test_readme_overlay_for_clusters_older_than_1_30_drops_only_the_policies(tmp_path: Path) -> None:
    built = _build_readme_overlay(tmp_path, "for clusters older than 1.30")
    dropped = _names(render_base()) - _names(built)
    assert dropped == {
        (kind, name)
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        for name in (
            "fault-agent-writes",
            "fault-agent-resubmit-off",
            "fault-agent-opt-in-volcano",
            "fault-agent-opt-in-ascend",
        )
    }


def test_readme_overlay_moves_the_agent_and_retargets_the_policies(tmp_path: Path) -> None:
    """Issue 37, 9: the documented overlay builds (the bookkeeping Roles no longer collide) and the policies
    confine the ServiceAccount in the new namespace, the one every RBAC binding names."""
    built = _build_readme_overlay(tmp_path, "that moves the agent to another namespace")
    assert _names(built) - {("Namespace", "ml-ops")} == _names(render_base()) - {("Namespace", NAMESPACE)}
    assert not [o for o in built if o["metadata"].get("namespace") == NAMESPACE]
    assert {o["metadata"]["name"] for o in built if o["kind"] == "Namespace"} == {"ml-ops"}
    sa = next(o for o in built if o["kind"] == "ServiceAccount")
    assert sa["metadata"]["namespace"] == "ml-ops"
    user = "system:serviceaccount:ml-ops:fault-agent"
    policies = [o for o in built if o["kind"] == "ValidatingAdmissionPolicy"]
    assert len(policies) == 4  # writes, resubmit-off, opt-in-volcano, opt-in-ascend
    for policy in policies:
        conditions = {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}
        assert conditions["agent-service-account"] == f"request.userInfo.username == '{user}'"
    bindings = [o for o in built if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert {(o["metadata"].get("namespace"), s["namespace"]) for o in bindings for s in o["subjects"]} == {
        (None, "ml-ops"),
        ("ml-ops", "ml-ops"),
        ("volcano-system", "ml-ops"),
        ("mindx-dl", "ml-ops"),
    }
    flow = next(o for o in built if o["kind"] == "FlowSchema")
    assert flow["spec"]["rules"][0]["subjects"][0]["serviceAccount"]["namespace"] == "ml-ops"
    monitor = next(o for o in built if o["kind"] == "ServiceMonitor")
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["ml-ops"]
