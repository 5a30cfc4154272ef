"""deploy/chart/ against the testbed's real kube-apiserver (RBAC on, the Prometheus Operator's CRDs installed by
the testbed at start).

1. `helm template` output goes through `kubectl apply --dry-run=server`: the apiserver admits every object,
   the ServiceMonitor and PrometheusRule against the operator's real CRD schemas.
2. The upgrade path deploy/README.md describes, with the real helm: install, `helm upgrade` with a changed
   setting (the ConfigMap changes and the pod template's checksum rolls the pods), `helm rollback`,
   `helm uninstall`, which keeps the outbox claim and removes the cluster-scoped objects, and a second install
   that adopts the kept claim. The admission policy's resubmit-off binding follows settings.policy.resubmit_limit
   through the upgrade and the rollback.
3. Moving from the kustomize base: objects `kubectl apply` created from deploy/ are taken over by
   `helm install --take-ownership`.
4. Kafka over TLS (`kafkaTLS`): the apiserver admits the Deployment's Secret volume, and the agent.yaml the chart
   renders delivers over the testbed broker's mutual-TLS listener.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from testbed.cluster import Testbed

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _support() -> ModuleType:
    """tests/tools/chart_support.py: one renderer of the chart for unit and integration tests."""
    path = Path(__file__).resolve().parents[1] / "tools" / "chart_support.py"
    spec = importlib.util.spec_from_file_location("_chart_support", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cs = _support()


async def _require_operator_crds(api: client.ApiClient) -> None:
    groups = await client.ApisApi(api).get_api_versions()
    assert any(g.name == "monitoring.coreos.com" for g in groups.groups), (
        "the testbed's apiserver has no monitoring.coreos.com: the testbed installs the Prometheus Operator's "
        "CRDs at start (testbed/build.py prometheus_operator_crds); restart a testbed started by older code"
    )


def _kubectl(tb: Testbed, *args: str, stdin: str | None = None) -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not on PATH (see the README's prerequisites)"
    out: str = cs.run([kubectl, "--kubeconfig", str(tb.kubeconfig), *args], stdin=stdin)
    return out


def _helm(tb: Testbed, *args: str) -> str:
    out: str = cs.helm("--kubeconfig", str(tb.kubeconfig), *args)
    return out


async def test_rendered_chart_is_accepted_by_a_server_side_dry_run(
    testbed: Testbed, kube_client: client.ApiClient, namespace: str
) -> None:
    await _require_operator_crds(kube_client)
    # Into the test's namespace (it exists, so the Namespace object is a dry-run patch of it and every namespaced
    # object has its namespace); the cluster-scoped names as they are (a dry run persists nothing).
    objs = cs.helm_template("--set", f"namespace.name={namespace}")
    rendered = yaml.safe_dump_all(objs)
    out = _kubectl(testbed, "apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=rendered)
    doc = json.loads(out)
    items = doc["items"] if doc.get("kind") == "List" else [doc]
    accepted = sorted(cs.key(o) for o in items)
    assert accepted == sorted(cs.key(o) for o in objs)
    kinds = {o["kind"] for o in items}
    assert {"ServiceMonitor", "PrometheusRule", "FlowSchema", "Deployment", "Namespace"} <= kinds
    rule = next(o for o in items if o["kind"] == "PrometheusRule")
    assert rule["spec"]["groups"], "the server kept the rule groups"


async def test_chart_with_kafka_tls_is_accepted_and_its_settings_deliver_over_tls(
    testbed: Testbed, kube_client: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """Issue 41, 5: with kafkaTLS (CA and client certificate Secrets) the apiserver admits the Deployment (its
    projected Secret volume and read-only mount), and the agent.yaml the chart renders, its files laid out as the
    volume lays them out, makes the agent's publisher deliver over the testbed broker's mutual-TLS listener."""
    from agent.core.faults import ObjectRef
    from agent.settings import load_settings
    from agent.sinks import events as ev
    from agent.sinks.kafka import KafkaPublisher, wait_until
    from agent.sinks.outbox import Outbox

    objs = cs.helm_template(
        "--set", f"namespace.name={namespace}", "--set", "kafkaTLS.enabled=true",
        "--set", "kafkaTLS.caSecret.name=kafka-ca", "--set", "kafkaTLS.clientSecret.name=kafka-client",
    )  # fmt: skip
    dep = next(o for o in objs if o["kind"] == "Deployment")
    out = _kubectl(testbed, "apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=yaml.safe_dump(dep))
    admitted = json.loads(out)["spec"]["template"]["spec"]
    (volume,) = [v for v in admitted["volumes"] if v["name"] == "kafka-tls"]
    mount = next(m for m in admitted["containers"][0]["volumeMounts"] if m["name"] == "kafka-tls")
    assert mount["readOnly"] is True
    # the files the projected volume makes, at a folder of the test's instead of the pod's mount path
    pki = testbed.kafka_pki
    sources = {
        "kafka-ca": {"ca.crt": pki.ca_cert},
        "kafka-client": {"tls.crt": pki.client_cert, "tls.key": pki.client_key},
    }
    mounted = tmp_path / "kafka-tls"
    mounted.mkdir()
    for source in volume["projected"]["sources"]:
        for item in source["secret"]["items"]:
            (mounted / item["path"]).write_bytes(sources[source["secret"]["name"]][item["key"]].read_bytes())
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "fault-agent-config")
    config = tmp_path / "agent.yaml"
    config.write_text(cm["data"]["agent.yaml"].replace(mount["mountPath"], str(mounted)))
    kafka = load_settings(config).kafka.model_copy(
        update={
            "bootstrap_servers": testbed.kafka_tls_bootstrap,
            "faults_topic": f"{namespace}.faults",
            "recoveries_topic": f"{namespace}.recoveries",
            "create_topics": True,
            "topic_replication_factor": 1,
        }
    )
    assert (kafka.security_protocol, kafka.ssl_check_hostname) == ("SSL", True)
    pub = KafkaPublisher(kafka, outbox=Outbox(tmp_path / "outbox"))
    await pub.start()
    try:
        assert pub.connected, pub.last_error
        job = ObjectRef("vcjob", namespace, "llama", "uid-llama")
        await pub.publish(ev.recovery_started("inc-1", job, "restart-job", "test", cluster="chart", at=T0))
        assert await wait_until(lambda: pub.outbox.pending == 0, 30), pub.last_error
    finally:
        await pub.stop()


async def _policy_bindings(api: client.ApiClient, prefix: str) -> set[str]:
    """Names of the ValidatingAdmissionPolicyBindings on the server that start with `prefix`-."""
    bindings = await client.AdmissionregistrationV1Api(api).list_validating_admission_policy_binding()
    return {b.metadata.name for b in bindings.items if b.metadata.name.startswith(f"{prefix}-")}


async def _deployment(api: client.ApiClient, namespace: str, name: str) -> Any:
    return await client.AppsV1Api(api).read_namespaced_deployment(name, namespace)


async def test_install_upgrade_rollback_uninstall(
    testbed: Testbed, kube_client: client.ApiClient, namespace: str
) -> None:
    await _require_operator_crds(kube_client)
    release = "fa"
    name = f"fa-{namespace}"  # cluster-scoped objects (ClusterRole, FlowSchema) unique to this test
    base = ["--namespace", namespace, "--set", f"namespace.name={namespace}", "--set", "namespace.create=false"]
    base += ["--set", f"fullnameOverride={name}"]
    core = client.CoreV1Api(kube_client)
    try:
        _helm(testbed, "install", release, str(cs.CHART), *base)
        dep = await _deployment(kube_client, namespace, name)
        first = dep.spec.template.metadata.annotations["checksum/config"]
        assert dep.metadata.labels["helm.sh/chart"] == "fault-agent-0.3.0"
        opt_in = {f"{name}-opt-in-volcano", f"{name}-opt-in-ascend"}
        assert await _policy_bindings(kube_client, name) == {f"{name}-writes", f"{name}-resubmit-off", *opt_in}

        # Upgrade with the same values plus a changed setting (without --reuse-values helm starts again from the
        # chart's defaults: keep your values in a file and pass it to every upgrade, as deploy/README.md says).
        _helm(
            testbed,
            "upgrade",
            release,
            str(cs.CHART),
            *base,
            "--set",
            "settings.kafka.bootstrap_servers=kafka-2.kafka.svc:9092",
            "--set",
            "settings.policy.resubmit_limit=1",
            "--set",
            "rbac.resubmit=true",
        )
        # resubmission on in the agent's settings and RBAC: helm removes the resubmit-off binding from the cluster
        assert await _policy_bindings(kube_client, name) == {f"{name}-writes", *opt_in}
        cm = await core.read_namespaced_config_map(f"{name}-config", namespace)
        assert yaml.safe_load(cm.data["agent.yaml"])["kafka"]["bootstrap_servers"] == "kafka-2.kafka.svc:9092"
        second = (await _deployment(kube_client, namespace, name)).spec.template.metadata.annotations["checksum/config"]
        assert second != first, "a settings change must roll the pods"

        history = json.loads(_helm(testbed, "history", release, "--namespace", namespace, "-o", "json"))
        assert [h["revision"] for h in history] == [1, 2]

        _helm(testbed, "rollback", release, "1", "--namespace", namespace)
        cm = await core.read_namespaced_config_map(f"{name}-config", namespace)
        assert yaml.safe_load(cm.data["agent.yaml"])["kafka"]["bootstrap_servers"] == "kafka-bootstrap.kafka.svc:9092"
        back = (await _deployment(kube_client, namespace, name)).spec.template.metadata.annotations["checksum/config"]
        assert back == first
        opt_in = {f"{name}-opt-in-volcano", f"{name}-opt-in-ascend"}
        assert await _policy_bindings(kube_client, name) == {f"{name}-writes", f"{name}-resubmit-off", *opt_in}
    finally:
        _helm(testbed, "uninstall", release, "--namespace", namespace)
    # The outbox claim stays (helm.sh/resource-policy: keep); the cluster-scoped objects are gone.
    pvc = await core.read_namespaced_persistent_volume_claim(f"{name}-outbox", namespace)
    assert pvc.metadata.name == f"{name}-outbox"
    rbac = client.RbacAuthorizationV1Api(kube_client)
    with pytest.raises(ApiException) as gone:
        await rbac.read_cluster_role(name)
    assert gone.value.status == 404
    assert await _policy_bindings(kube_client, name) == set()
    # A new install of the same release in the same namespace adopts the kept claim (its release annotations match).
    try:
        _helm(testbed, "install", release, str(cs.CHART), *base)
        pvc = await core.read_namespaced_persistent_volume_claim(f"{name}-outbox", namespace)
        assert pvc.metadata.annotations["meta.helm.sh/release-name"] == release
    finally:
        _helm(testbed, "uninstall", release, "--namespace", namespace)


async def test_chart_takes_over_a_kustomize_install(
    testbed: Testbed, kube_client: client.ApiClient, namespace: str
) -> None:
    """The base's namespaced objects, applied with kubectl as `kubectl apply -k deploy/` would (moved into the
    test's namespace; cluster-scoped objects and RBAC left out, their names are shared with other tests), are
    refused by a plain `helm install` and adopted by `helm install --take-ownership`."""
    await _require_operator_crds(kube_client)
    skip = {"Namespace", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    skip |= {"FlowSchema", "PriorityLevelConfiguration"}
    skip |= {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    objs = [o for o in cs.kustomize_build() if o["kind"] not in skip]
    for o in objs:
        o["metadata"]["namespace"] = namespace
        if o["kind"] == "ServiceMonitor":
            o["spec"]["namespaceSelector"]["matchNames"] = [namespace]
    _kubectl(testbed, "apply", "-f", "-", stdin=yaml.safe_dump_all(objs))
    args = ["install", "fault-agent", str(cs.CHART), "--namespace", namespace, "--set", f"namespace.name={namespace}"]
    args += ["--set", "namespace.create=false", "--set", "rbac.create=false", "--set", "flowSchema.enabled=false"]
    args += ["--set", "admissionPolicy.enabled=false"]
    with pytest.raises(AssertionError, match="exists and cannot be imported into the current release"):
        _helm(testbed, *args)
    try:
        _helm(testbed, *args, "--take-ownership")
        dep = await _deployment(kube_client, namespace, "fault-agent")
        assert dep.metadata.annotations["meta.helm.sh/release-name"] == "fault-agent"
        assert dep.metadata.labels["app.kubernetes.io/managed-by"] == "Helm"
        assert "checksum/config" in dep.spec.template.metadata.annotations
        listed = _helm(testbed, "get", "manifest", "fault-agent", "--namespace", namespace)
        assert sorted(cs.key(o) for o in yaml.safe_load_all(listed) if o) == sorted(cs.key(o) for o in objs)
    finally:
        _helm(testbed, "uninstall", "fault-agent", "--namespace", namespace)
