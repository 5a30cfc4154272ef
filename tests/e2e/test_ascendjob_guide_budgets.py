"""The guide's AscendJob (config/examples/acjob-default-test-pytorch.yaml) survives a business failure and three chip
faults within its budgets, under the testbed's Ascend Operator stand-in, with the agent (issue 35).

The budgets: the job's `fault-retry-times: "3"` allows three business retries (MindCluster's
``remain-retry-times``), and the Ascend Operator counts **every** restart (a deleted pod of the current version
bumps the pods' ``version``) against ``spec.runPolicy.backoffLimit``, which the guide's job leaves unset, so the
operator takes it from ``fault-retry-times``: 3 (component/ascend-operator/pkg/controllers/v1/
ascendjob_controller.go ``setFaultRetryTimesToBackoffLimits``). It fails the job at ``version > backoffLimit``:
the job as shipped survives three restarts in all, so a business failure and three chip faults (four restarts)
fail it at the fourth (the agent says ``budget-exhausted`` then; conformance scenario e shows the same on the real
operator with a limit of 2). The smallest change that survives all four: ``backoffLimit: 4`` (business retries stay
3). This test runs the job with that one line added and checks that the agent's budgets say so at each restart.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Scenario, for_job
from helpers import AC, acjob_running, chip_of, for_the_stand_in, submit, watch_operator
from kubernetes_asyncio import client as k8s
from support.polling import eventually

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "examples" / "acjob-default-test-pytorch.yaml"


def example_acjob(namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped example and its ConfigMap in `namespace`, the Worker on the testbed's 8-chip nodes."""
    cm, job = (copy.deepcopy(d) for d in yaml.safe_load_all(EXAMPLE.read_text()) if d)
    for doc in (cm, job):
        doc["metadata"]["namespace"] = namespace
    job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"]["accelerator-type"] = "module-910b-8"
    return cm, job


async def _remain_retry_times(api: k8s.ApiClient, key: str) -> int | None:
    try:
        cm = await k8s.CoreV1Api(api).read_namespaced_config_map("vcjob-fault-npu-cm", "volcano-system")
    except k8s.ApiException:
        return None
    entry = json.loads((cm.data or {}).get("remain-retry-times") or "{}").get(key)
    return None if entry is None else int(entry["Times"])


async def test_the_guides_ascendjob_with_backoff_limit_4_survives_a_business_failure_and_three_chip_faults(
    scenario: Scenario,
) -> None:
    sc = scenario
    await sc.add_nodes(4)
    cm, job = example_acjob(sc.namespace)
    assert job["metadata"]["labels"]["fault-retry-times"] == "3"
    assert "backoffLimit" not in job["spec"]["runPolicy"]  # as shipped: the operator's limit is 3
    job["spec"]["runPolicy"]["backoffLimit"] = 4
    await for_the_stand_in(sc, job)
    async with watch_operator(sc.api, sc.namespace, job["metadata"]["name"]) as operator:
        created = await submit(sc.api, (cm, job), AC)
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]
        key = f"{sc.namespace}/{name}-{uid}"
        pods = await acjob_running(sc, name)
        await sc.start_agent()
        # the business retry entry is there before any failure (else the operator fails the job at once)
        await eventually(lambda: _remain_retry_times(sc.api, key), lambda t: t == 3, what="remain-retry-times 3")

        worker = next(p for p in pods if p.metadata.name.endswith("-worker-0"))
        sc.injector.pod_failed(sc.namespace, worker.metadata.name)
        await sc.wait_events("recovery.succeeded", for_job(uid), count=1, timeout_s=60)
        pods = await acjob_running(sc, name, not_uids={p.metadata.uid for p in pods})
        await eventually(lambda: _remain_retry_times(sc.api, key), lambda t: t == 2, what="remain-retry-times 2")

        for round_ in range(2, 5):  # three chip faults, each on the master's chip: the whole job restarts
            master = next(p for p in pods if p.metadata.name.endswith("-master-0"))
            node = master.spec.node_name
            sc.injector.chip_fault(node, [ChipFault(chip_of(master), ("80E3A201",), "SeparateNPU")])
            await sc.wait_events("recovery.succeeded", for_job(uid), count=round_, timeout_s=60)
            pods = await acjob_running(sc, name, not_uids={p.metadata.uid for p in pods})
            assert {p.metadata.labels["version"] for p in pods} == {str(round_)}
            sc.injector.chip_healthy(node)

        started = sc.events("recovery.started", for_job(uid))
        assert [e["data"]["action"] for e in started] == ["restart-job"] * 4
        # never a promise the operator would refuse: 4 restarts allowed, the last leaves none
        assert [e["data"]["budget_left"] for e in started] == [2, 2, 1, 0]
        assert sc.events("recovery.failed", for_job(uid)) == []
        assert operator.version == 4
        acjob = await k8s.CustomObjectsApi(sc.api).get_namespaced_custom_object(*AC[:2], sc.namespace, AC[2], name)
        true = {c["type"] for c in acjob["status"]["conditions"] if c["status"] == "True"}
        assert "Failed" not in true
        assert "Running" in true
