"""Namespaced reads on the testbed apiserver (issue 37, "Least reads"; deploy/README.md, "Least privilege reads").

deploy-namespaced/ is built with `kubectl kustomize`; its RoleBinding for the example namespace ``training`` is
moved to this module's namespace A, and its Namespace, ServiceAccount, RBAC, admission policies and bindings are
created as they are (cluster-scoped names are shared with the other deploy tests: removed afterwards). With a
TokenRequest token of the ServiceAccount:

1. the token lists pods in A and ConfigMaps in kube-system, and is refused (403) pods and ConfigMaps in namespace
   B, ConfigMaps in A (rings-config is read by name only), and pods in all namespaces;
2. the agent with ``kube.namespaces=[A]`` and that token detects a chip fault of an opted-in job in A and restarts
   it (one RestartJob Command, no action failed), while the same fault under an opted-in job in B is not acted on
   (no Command there, no decision about that job);
3. ``fault-agent run`` with ``kube.namespaces=[A, B]`` and ``kube.public_fault_namespaces`` empty (all namespaces)
   exits 1 at start, naming both reads the RBAC refuses and their settings (agent.sources.access_check), instead of
   retrying 403 watches forever with those sources never synced.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from actions_support import (
    CommandRecorder,
    delete_device_info,
    delete_node,
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
from test_deploy_admission_policy import KINDS, PATHS, _agent, _collection, _failed_actions, _settled, _token, _wait

from agent.core.cluster import JobKind
from agent.settings import Settings
from agent.sources.admission_check import probe
from testbed.cluster import Testbed
from testbed.rest import RestError

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "deploy-namespaced"
EXAMPLE_NS = "training"


def _render(ns_a: str) -> list[dict[str, Any]]:
    """deploy-namespaced/ as `kubectl kustomize` builds it, the example RoleBinding moved to `ns_a`; only the
    objects of KINDS (no Deployment: the agent runs in this process)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl not found on PATH (it ships kustomize)")
    proc = subprocess.run([kubectl, "kustomize", str(OVERLAY)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    objs = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] in KINDS and d["kind"] != "ConfigMap"]
    moved = [o for o in objs if o["kind"] == "RoleBinding" and o["metadata"].get("namespace") == EXAMPLE_NS]
    assert len(moved) == 1, "deploy-namespaced/ has one example RoleBinding in namespace training"
    assert moved[0]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "fault-agent-namespaced",
    }
    moved[0]["metadata"]["namespace"] = ns_a
    return objs


@pytest.fixture(scope="module")
def namespaced(testbed: Testbed) -> Iterator[dict[str, str]]:
    """The overlay's RBAC and policies on the testbed, with namespaces A (granted) and B (not); yields
    {"agent_ns", "service_account", "a", "b"}."""
    rest = testbed.rest()
    tag = uuid.uuid4().hex[:6]
    ns_a, ns_b = f"t-nsa-{tag}", f"t-nsb-{tag}"
    objs = _render(ns_a)
    agent_ns = next(o for o in objs if o["kind"] == "Namespace")["metadata"]["name"]
    sa = next(o for o in objs if o["kind"] == "ServiceAccount")["metadata"]["name"]
    _wait(lambda: _settled(rest, agent_ns), f"namespace {agent_ns} not terminating", timeout_s=120)
    for ns in (ns_a, ns_b):
        rest.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    for obj in sorted(objs, key=lambda o: KINDS.index(o["kind"])):
        try:
            rest.request("POST", _collection(obj), obj)
        except RestError as e:
            if e.status != 409:
                raise
            rest.request("PUT", f"{_collection(obj)}/{obj['metadata']['name']}", obj)
    try:
        yield {"agent_ns": agent_ns, "service_account": sa, "a": ns_a, "b": ns_b}
    finally:
        for obj in reversed(objs):
            # cluster-scoped, or a Role in kube-system / MindCluster's / Volcano's namespaces (which stay)
            if not PATHS[obj["kind"]][2] or obj["metadata"].get("namespace") not in {agent_ns, ns_a, ns_b}:
                with contextlib.suppress(RestError):
                    rest.request("DELETE", f"{_collection(obj)}/{obj['metadata']['name']}")
        for ns in (ns_a, ns_b, agent_ns):
            with contextlib.suppress(RestError):
                rest.request("DELETE", f"/api/v1/namespaces/{ns}")


def _kubeconfig(testbed: Testbed, token: str, path: Path) -> Path:
    cluster = {"server": testbed.apiserver_url, "certificate-authority": str(testbed.ca_file)}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "t", "cluster": cluster}],
                "users": [{"name": "fault-agent", "user": {"token": token}}],
                "contexts": [{"name": "t", "context": {"cluster": "t", "user": "fault-agent"}}],
                "current-context": "t",
            }
        )
    )
    return path


@pytest.fixture
async def sa(testbed: Testbed, kube_client: k8s.ApiClient, namespaced: dict[str, str], tmp_path: Path) -> Any:
    """{"api": an ApiClient with the ServiceAccount's token, "kubeconfig": a file with it}, once the agent's own
    fail-closed probe is denied by the policy (the apiserver loads policies through informers: a second or so)."""
    token = await _token(kube_client, namespaced["agent_ns"], namespaced["service_account"])
    cfg = k8s.Configuration(
        host=testbed.apiserver_url, api_key={"BearerToken": token}, api_key_prefix={"BearerToken": "Bearer"}
    )
    cfg.ssl_ca_cert = str(testbed.ca_file)
    async with k8s.ApiClient(cfg) as api:
        await eventually(
            lambda: probe(api, namespaced["agent_ns"], 10), lambda v: v.in_force, what="the policy in force"
        )
        yield {"api": api, "kubeconfig": _kubeconfig(testbed, token, tmp_path / "agent-kubeconfig")}


async def _status(call: Callable[[], Awaitable[object]]) -> int:
    try:
        await call()
    except ApiException as e:
        return int(e.status)
    return 200


async def test_the_token_reads_pods_and_configmaps_only_where_the_agent_does(
    sa: dict[str, Any], namespaced: dict[str, str]
) -> None:
    core = k8s.CoreV1Api(sa["api"])
    a, b = namespaced["a"], namespaced["b"]
    got = {
        "pods in A": await _status(lambda: core.list_namespaced_pod(a, limit=1)),
        "configmaps in kube-system": await _status(lambda: core.list_namespaced_config_map("kube-system", limit=1)),
        "nodes": await _status(lambda: core.list_node(limit=1)),
        "pods in B": await _status(lambda: core.list_namespaced_pod(b, limit=1)),
        "configmaps in B": await _status(lambda: core.list_namespaced_config_map(b, limit=1)),
        "configmaps in A": await _status(lambda: core.list_namespaced_config_map(a, limit=1)),
        "pods everywhere": await _status(lambda: core.list_pod_for_all_namespaces(limit=1)),
        "configmaps everywhere": await _status(lambda: core.list_config_map_for_all_namespaces(limit=1)),
        "a rings-config in A by name": await _status(lambda: core.read_namespaced_config_map("rings-config-x", a)),
    }
    assert got == {
        "pods in A": 200,
        "configmaps in kube-system": 200,
        "nodes": 200,
        "pods in B": 403,
        "configmaps in B": 403,
        "configmaps in A": 403,
        "pods everywhere": 403,
        "configmaps everywhere": 403,
        "a rings-config in A by name": 404,  # get by name is granted; there is none
    }


async def _opted_in_job_with_pods(api: k8s.ApiClient, ns: str, name: str) -> tuple[Any, str]:
    node = await make_node(api)
    job = await make_job(api, ns, name, JobKind.VOLCANO, labels={"fault-scheduling": "force"})
    await make_rings_config(api, ns, job.name)
    for i in range(2):
        await make_job_pod(api, job, i, node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}")
    await eventually(
        lambda: pods_by_name(api, ns),
        lambda p: sum(1 for x in p.values() if x.status.phase == "Running") == 2,
        what=f"the pods of {ns}/{name} Running",
    )
    return job, node


async def test_the_agent_restarts_the_job_it_may_read_and_leaves_the_other_namespace_alone(
    kube_client: k8s.ApiClient, sa: dict[str, Any], namespaced: dict[str, str]
) -> None:
    a, b = namespaced["a"], namespaced["b"]
    settings = Settings.model_validate(
        {
            "cluster_name": f"nr-{uuid.uuid4().hex[:6]}",
            # as deploy-namespaced/deployment-patch.yaml, with this module's namespace for `training`
            "kube": {
                "kubeconfig": str(sa["kubeconfig"]),
                "namespaces": [a],
                "public_fault_namespaces": ["mindx-dl"],
                "fault_source": "per-node",  # other tests may leave ClusterD's ConfigMaps in mindx-dl
            },
            "kafka": {"enabled": False},
            "server": {"port": 0},
            "leader": {
                "namespace": namespaced["agent_ns"],
                "lease_duration_s": 3,
                "renew_deadline_s": 2,
                "retry_period_s": 0.2,
            },
            "policy": {
                "restart_burst": 20,
                "restart_rate_per_min": 600,
                "breaker_min_faulty_nodes": 1000,  # faults other tests leave on their nodes
            },
        }
    )
    nodes: list[str] = []
    try:
        job_a, node_a = await _opted_in_job_with_pods(kube_client, a, "nr")
        nodes.append(node_a)
        job_b, node_b = await _opted_in_job_with_pods(kube_client, b, "nr")
        nodes.append(node_b)
        async with (
            CommandRecorder(kube_client, a) as rec_a,
            CommandRecorder(kube_client, b) as rec_b,
            _agent(settings, "nr-agent") as engine,
        ):
            await eventually(lambda: asyncio.sleep(0, engine.is_leader()), bool, what="the agent leads")
            fault = {"Ascend910-1": ("SeparateNPU", "80E01801")}
            await put_device_info(kube_client, node_b, fault)
            await put_device_info(kube_client, node_a, fault)
            commands = await eventually(rec_a.count, lambda c: len(c) >= 1, what="the restart in A", timeout_s=30)
            assert [c["action"] for c in commands] == ["RestartJob"]
            assert commands[0]["target"]["uid"] == job_a.uid
            await asyncio.sleep(3)  # several ticks with B's fault standing
            assert rec_b.created == []
            assert len(rec_a.created) == 1
            decided = {j.uid for _, j, _ in engine.decisions}
            assert job_a.uid in decided
            assert job_b.uid not in decided
            assert _failed_actions(engine) == {}
    finally:
        for node in nodes:
            await delete_device_info(kube_client, node)
            await delete_node(kube_client, node)


def test_a_namespace_the_rbac_does_not_grant_stops_the_agent_at_start(
    sa: dict[str, Any], namespaced: dict[str, str]
) -> None:
    a, b = namespaced["a"], namespaced["b"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULT_AGENT_")}
    env.update(
        {
            "FAULT_AGENT_KUBE__KUBECONFIG": str(sa["kubeconfig"]),
            "FAULT_AGENT_KUBE__NAMESPACES": json.dumps([a, b]),
            "FAULT_AGENT_KUBE__FAULT_SOURCE": "per-node",
            # kube.public_fault_namespaces left empty: all namespaces, which the overlay does not grant
            "FAULT_AGENT_KAFKA__ENABLED": "false",
            "FAULT_AGENT_SERVER__PORT": "0",
            "FAULT_AGENT_LEADER__NAMESPACE": namespaced["agent_ns"],
            "FAULT_AGENT_LOG__FORMAT": "json",
        }
    )
    cli = str(Path(sys.executable).with_name("fault-agent"))
    proc = subprocess.run([cli, "run"], env=env, capture_output=True, text=True, timeout=90, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-2000:]
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    errors = [x for x in lines if x.get("event") == "agent cannot run"]
    assert len(errors) == 1, out[-2000:]
    message = errors[0]["error"]
    assert f"list pods in namespace {b} (kube.namespaces)" in message
    assert f"watch pods in namespace {b} (kube.namespaces)" in message
    assert "list configmaps in all namespaces (kube.public_fault_namespaces is empty)" in message
    assert f"namespace {a}" not in message  # what it may read is not reported
    assert not any(x.get("event") == "fault-agent starting" for x in lines)  # stopped before any watch
