"""The guide's AscendJob (tests/fixtures/seed-acjob.yaml) under the testbed's Ascend Operator stand-in
(testbed/ascend_operator.py: MindCluster's operator as its source behaves, checked against the real binary in
docs/mindcluster-conformance.md), recovering from a chip fault with the agent.

Here (as in tests/e2e/test_ascendjob.py) the stand-in makes the Volcano PodGroup and the pods (gang-scheduled by
Volcano) and recreates deleted pods at the next ``version``, on the pods only, as the real operator does. The test
labels its namespace for the stand-in before it submits the job and watches the job's pods.

Regression (issue 35, 3): after a restart the operator re-appends ``Created`` (reason ``PodGroupPending``) after
``Running``, keeping Created's creation time; when the job ran in the second it was created, both carry the same
time and the agent, reading the True condition with the newest time (the later in the list on a tie), read the
job as ``Created`` and never reported the recovery as succeeded (2 of 3 runs). It reads the phase by kubeflow's
rules and the recovery from the pods now.
"""

from __future__ import annotations

import pytest
from conftest import Scenario, for_job
from helpers import AC, acjob_running, chip_of, for_the_stand_in, guide_acjob, submit, watch_operator
from kubernetes_asyncio import client as k8s

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e


async def test_the_guides_ascendjob_under_the_stand_in_recovers_from_a_chip_fault(scenario: Scenario) -> None:
    sc = scenario
    await sc.add_nodes(4)
    cm, job = guide_acjob(sc)
    await for_the_stand_in(sc, job)
    async with watch_operator(sc.api, sc.namespace, job["metadata"]["name"]) as operator:
        created = await submit(sc.api, (cm, job), AC)
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]
        pods = await acjob_running(sc, name)
        custom = k8s.CustomObjectsApi(sc.api)
        pg = await custom.get_namespaced_custom_object(
            "scheduling.volcano.sh", "v1beta1", sc.namespace, "podgroups", f"{name}-{uid}"
        )
        assert pg["metadata"]["labels"] == created["metadata"]["labels"]
        await sc.start_agent()
        old = {p.metadata.uid for p in pods}
        master = next(p for p in pods if p.metadata.name.endswith("-master-0"))
        sc.injector.chip_fault(master.spec.node_name, [ChipFault(chip_of(master), ("80E3A201",), "SeparateNPU")])
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-job"
        new = await acjob_running(sc, name, not_uids=old)
        assert {d[1] for d in operator.deleted} >= old
        for pod_name, _, grace, graceful_first in operator.deleted:  # force mode: grace 0, never graceful first
            assert grace in (0, None), f"{pod_name} deleted with grace {grace}"
            assert not graceful_first, f"{pod_name} was first deleted gracefully"
        assert {p.metadata.labels["version"] for p in new} == {"1"}
        acjob = await custom.get_namespaced_custom_object(*AC[:2], sc.namespace, AC[2], name)
        assert "version" not in (acjob["metadata"].get("labels") or {})  # the counter is on the pods only
        # Running and the re-appended Created often share their lastTransitionTime; the phase is read by kubeflow's
        # rules (Created after Running is not the phase) and the recovery from the pods, so it is reported
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
