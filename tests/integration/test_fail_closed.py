"""Fail closed (issue 37, 9): the agent, as deploy/'s ServiceAccount on the testbed apiserver (ValidatingAdmission
Policy on), refuses to act while its admission policy is not in force for it, and acts again once it is.

deploy/'s RBAC, settings ConfigMap, policies and bindings come from test_deploy_admission_policy's module fixture.
The agent runs in this process with a TokenRequest token of the ServiceAccount and the default
``policy.admission_check: refuse`` (probe every second here). With the binding ``fault-agent-writes`` deleted (as
a cluster admin) a chip fault on an opted-in job is decided ``refused: admission policy not in force``, no Command
is created, ``fault_agent_admission_policy_in_force`` is 0 and the refusal is counted; with the binding created
again the gauge is 1 and the held-back fault restarts the job (one RestartJob Command). The check's answers are
read from the real apiserver: denied by the policy, admitted, refused by RBAC.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
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
from support.polling import eventually
from test_deploy_admission_policy import (  # noqa: F401 (fixtures)
    KINDS,
    _agent,
    _collection,
    _render_base,
    _token,
    confined,
    sa_api,
)

from agent.core.cluster import JobKind
from agent.settings import Settings
from agent.sources.admission_check import PROBE_NAME, probe
from testbed.cluster import Testbed
from testbed.rest import RestError
from testbed.service_account import write_token_kubeconfig

pytestmark = pytest.mark.integration

WRITES = "fault-agent-writes"


def _gauge(engine: Any, name: str, **labels: str) -> float | None:
    for family in engine.ctx.metrics.registry.collect():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def _binding() -> dict[str, Any]:
    return next(o for o in _render_base() if o["kind"] == KINDS[-1] and o["metadata"]["name"] == WRITES)


def _set_binding(testbed: Testbed, present: bool) -> None:
    rest = testbed.rest()
    binding = _binding()
    try:
        if present:
            rest.request("POST", _collection(binding), binding)
        else:
            rest.request("DELETE", f"{_collection(binding)}/{WRITES}")
    except RestError as e:
        if e.status not in (404, 409):
            raise


@pytest.fixture
async def agent_kubeconfig(
    testbed: Testbed,
    kube_client: k8s.ApiClient,
    confined: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> Path:
    token = await _token(kube_client, confined["namespace"], confined["service_account"])
    path = tmp_path / "agent-kubeconfig"
    write_token_kubeconfig(path, testbed, token)
    return path


@pytest.fixture
async def binding_restored(testbed: Testbed) -> AsyncIterator[None]:
    """Whatever the test does to the binding fault-agent-writes, it is there again afterwards."""
    try:
        yield
    finally:
        _set_binding(testbed, True)


async def test_the_probe_reads_denied_admitted_and_refused_from_the_apiserver(
    testbed: Testbed,
    kube_client: k8s.ApiClient,
    sa_api: k8s.ApiClient,  # noqa: F811
    confined: dict[str, str],  # noqa: F811
    binding_restored: None,
) -> None:
    agent_ns = confined["namespace"]
    denied = await probe(sa_api, agent_ns, 10)
    assert (denied.in_force, denied.answered) == (True, True), denied
    # a namespace where RBAC grants no create: refused before admission, not verified
    rbac = await probe(sa_api, "default", 10)
    assert (rbac.in_force, rbac.answered) == (False, True), rbac
    assert "before the admission policy" in rbac.detail
    # as the cluster admin (whom the policy does not match): admitted
    admin = await probe(kube_client, agent_ns, 10)
    assert (admin.in_force, admin.answered) == (False, True), admin
    assert "was admitted" in admin.detail
    # the binding gone: the ServiceAccount's probe is admitted too (and, a dry run, stored nowhere)
    _set_binding(testbed, False)
    await eventually(lambda: probe(sa_api, agent_ns, 10), lambda v: not v.in_force, what="the binding unenforced")
    gone = await probe(sa_api, agent_ns, 10)
    assert "was admitted" in gone.detail, gone
    listed = await k8s.CoreV1Api(kube_client).list_namespaced_config_map(
        agent_ns, field_selector=f"metadata.name={PROBE_NAME}"
    )
    assert listed.items == []


async def test_without_its_binding_the_agent_refuses_to_act_and_acts_once_it_is_back(
    testbed: Testbed,
    kube_client: k8s.ApiClient,
    sa_api: k8s.ApiClient,  # noqa: F811
    confined: dict[str, str],  # noqa: F811
    agent_kubeconfig: Path,
    namespace: str,
    binding_restored: None,
) -> None:
    agent_ns = confined["namespace"]
    settings = Settings.model_validate(
        {
            "cluster_name": f"fc-{uuid.uuid4().hex[:6]}",
            "kube": {"kubeconfig": str(agent_kubeconfig), "namespaces": [namespace]},
            "kafka": {"enabled": False},
            "server": {"port": 0},
            "leader": {"namespace": agent_ns, "lease_duration_s": 3, "renew_deadline_s": 2, "retry_period_s": 0.2},
            "policy": {
                "restart_burst": 20,
                "restart_rate_per_min": 600,
                "breaker_min_faulty_nodes": 1000,  # faults other tests leave on their nodes
                "bookkeeping": False,
                "admission_check_interval_s": 1,
            },
        }
    )
    assert settings.policy.admission_check == "refuse"  # the default
    node = await make_node(kube_client)
    try:
        job = await make_job(kube_client, namespace, "fc", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
        await make_rings_config(kube_client, namespace, job.name)
        for i in range(2):
            await make_job_pod(kube_client, job, i, node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}")
        await eventually(
            lambda: pods_by_name(kube_client, namespace),
            lambda p: sum(1 for x in p.values() if x.status.phase == "Running") == 2,
            what="the job's pods Running",
        )
        async with CommandRecorder(kube_client, namespace) as rec, _agent(settings, "fc-agent") as engine:
            gauge = "fault_agent_admission_policy_in_force"
            await eventually(lambda: asyncio.sleep(0, _gauge(engine, gauge, check="refuse")), lambda v: v == 1,
                             what="the policy seen in force")  # fmt: skip
            await eventually(lambda: asyncio.sleep(0, engine.is_leader()), bool, what="the agent leads")

            _set_binding(testbed, False)  # as a cluster admin
            await eventually(lambda: asyncio.sleep(0, _gauge(engine, gauge, check="refuse")), lambda v: v == 0,
                             what="the agent sees the binding gone", timeout_s=30)  # fmt: skip

            await put_device_info(kube_client, node, {"Ascend910-1": ("SeparateNPU", "80E01801")})
            refused = await eventually(
                lambda: asyncio.sleep(0, [d for _, j, d in engine.decisions if j.uid == job.uid]),
                bool,
                what="a decision for the job",
            )
            assert refused[0].action.value == "none", refused
            assert refused[0].reason.startswith("refused: admission policy not in force ("), refused[0].reason
            assert "would restart-job" in refused[0].reason
            counted = _gauge(engine, "fault_agent_actions_total", action="restart-job", result="policy_not_in_force")
            assert counted == 1
            await asyncio.sleep(3)  # several probes and ticks: still nothing written
            assert rec.created == []
            assert engine.store.incident(job.uid) is None

            _set_binding(testbed, True)
            await eventually(lambda: asyncio.sleep(0, _gauge(engine, gauge, check="refuse")), lambda v: v == 1,
                             what="the agent sees the binding back", timeout_s=30)  # fmt: skip
            commands = await eventually(rec.count, lambda c: len(c) >= 1, what="the held-back restart", timeout_s=30)
            assert [c["action"] for c in commands] == ["RestartJob"]
            assert commands[0]["target"]["uid"] == job.uid
            acted = [d for _, j, d in engine.decisions if j.uid == job.uid]
            assert acted[-1].action.value == "restart-job", acted
    finally:
        await delete_device_info(kube_client, node)
        await delete_node(kube_client, node)
