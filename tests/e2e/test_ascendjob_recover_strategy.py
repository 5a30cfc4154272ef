"""The guide's AscendJob with the ``recover-strategy`` annotation, under the testbed's Ascend Operator stand-in
(testbed/ascend_operator.py), with the agent: the job's settings are read from its PodGroup (issue 36, 1).

The Ascend Operator labels the job's PodGroup ``process-recover-enable=on`` from the annotation
(component/ascend-operator/pkg/controllers/v1/job.go ``addPgProcessRecoverLabel``); the job itself carries no such
label. MindCluster's scheduler reads the PodGroup's labels merged with the pods' (plugin/job.go
``getJobLabelFromVcJob``) and, for a process-recovery job, deletes only the fault pod unless the master is hit
(internal/rescheduling/job.go ``isNormalTaskCanBeDelete``). When ClusterD sets the label to ``pause`` (process
recovery failed), the job is rescheduled as without it: the whole job, for a job without ``pod-rescheduling``.

Regression: the agent read the label from the job only, so a chip fault on the worker restarted the whole job
(master included); ``pause`` was never seen.
"""

from __future__ import annotations

import pytest
from conftest import Scenario, for_job
from helpers import AC, acjob_running, chip_of, for_the_stand_in, guide_acjob, submit, watch_operator
from kubernetes_asyncio import client as k8s

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e

PG = ("scheduling.volcano.sh", "v1beta1")


async def test_recover_strategy_restarts_only_the_faulty_worker_and_pause_falls_back_to_the_whole_job(
    scenario: Scenario,
) -> None:
    sc = scenario
    await sc.add_nodes(4)
    cm, job = guide_acjob(sc)
    job["metadata"]["annotations"] = {"recover-strategy": "recover"}
    assert "process-recover-enable" not in job["metadata"]["labels"]
    assert "pod-rescheduling" not in job["metadata"]["labels"]
    await for_the_stand_in(sc, job)
    async with watch_operator(sc.api, sc.namespace, job["metadata"]["name"]):
        created = await submit(sc.api, (cm, job), AC)
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]
        pods = await acjob_running(sc, name)
        custom = k8s.CustomObjectsApi(sc.api)
        pg = await custom.get_namespaced_custom_object(*PG, sc.namespace, "podgroups", f"{name}-{uid}")
        assert pg["metadata"]["labels"]["process-recover-enable"] == "on"  # the operator's, not the job's
        await sc.start_agent()

        # a chip fault on the worker's node: only the worker is deleted and made again
        master = next(p for p in pods if p.metadata.name.endswith("-master-0"))
        worker = next(p for p in pods if p.metadata.name.endswith("-worker-0"))
        sc.injector.chip_fault(worker.spec.node_name, [ChipFault(chip_of(worker), ("80E3A201",), "SeparateNPU")])
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-pods", started["data"]
        assert "process-recover-enable=on from the PodGroup" in started["data"]["reason"]
        new = await acjob_running(sc, name, not_uids={worker.metadata.uid})
        by_name = {p.metadata.name: p for p in new}
        assert by_name[master.metadata.name].metadata.uid == master.metadata.uid  # the master kept running
        assert by_name[worker.metadata.name].metadata.labels["version"] == "1"
        assert by_name[master.metadata.name].metadata.labels["version"] == "0"
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)

        # ClusterD: process recovery failed, pause it on the PodGroup; the next chip fault restarts the whole job
        pause = [{"op": "replace", "path": "/metadata/labels/process-recover-enable", "value": "pause"}]
        await custom.patch_namespaced_custom_object(*PG, sc.namespace, "podgroups", f"{name}-{uid}", pause)
        worker = by_name[worker.metadata.name]
        sc.injector.chip_fault(worker.spec.node_name, [ChipFault(chip_of(worker), ("80E3A201",), "SeparateNPU")])
        started_all = await sc.wait_events("recovery.started", for_job(uid), count=2)
        second = started_all[-1]["data"]
        assert second["action"] == "restart-job", second
        assert "process-recover-enable=pause from the PodGroup" in second["reason"]
        await acjob_running(sc, name, not_uids={p.metadata.uid for p in new})
        await sc.wait_events("recovery.succeeded", for_job(uid), count=2, timeout_s=60)
