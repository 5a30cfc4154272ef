"""The guide's AscendJob (tests/fixtures/seed-acjob.yaml) under the testbed's Ascend Operator stand-in
(testbed/ascend_operator.py: MindCluster's operator as its source behaves, checked against the real binary in
docs/mindcluster-conformance.md), recovering from a chip fault with the agent.

tests/e2e/test_ascendjob.py plays the operator itself (a helper that puts ``version`` on the job and makes pods
with no PodGroup); here the stand-in makes the Volcano PodGroup and the pods (gang-scheduled by Volcano) and
recreates deleted pods at the next ``version``, on the pods only, as the real operator does. The test labels its
namespace for the stand-in before it submits the job and watches the job's pods.

Regression (issue 35, 3): after a restart the operator re-appends ``Created`` (reason ``PodGroupPending``) after
``Running``, keeping Created's creation time; when the job ran in the second it was created, both carry the same
time and the agent, reading the True condition with the newest time (the later in the list on a tie), read the
job as ``Created`` and never reported the recovery as succeeded (2 of 3 runs). It reads the phase by kubeflow's
rules and the recovery from the pods now.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import AC, NPU, TEST_LABEL, eventually, live_pods, seed_docs, submit
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch

from testbed.ascend_operator import NAMESPACE_LABEL
from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e
JOB_LABEL = "training.kubeflow.org/job-name"


@dataclass
class WatchedOperator:
    """What happened to the job's pods: deleted pods as (name, uid, deletionGracePeriodSeconds, whether a graceful
    deletion was seen first), created pods as (name, uid), and the highest ``version`` label seen on a pod (the
    operator's restart counter)."""

    deleted: list[tuple[str, str, int | None, bool]] = field(default_factory=list)
    created: list[tuple[str, str]] = field(default_factory=list)
    version: int = 0


async def for_the_stand_in(sc: Scenario, job: dict[str, Any]) -> None:
    """Label the test's namespace for the Ascend Operator stand-in and pin `job`'s replicas to the test's nodes.
    Before the job is submitted: the stand-in looks at a job's namespace when it first sees the job."""
    key, _, value = NAMESPACE_LABEL.partition("=")
    await k8s.CoreV1Api(sc.api).patch_namespace(sc.namespace, {"metadata": {"labels": {key: value}}})
    for spec in job["spec"]["replicaSpecs"].values():
        spec["template"]["spec"].setdefault("nodeSelector", {})[TEST_LABEL] = sc.tag


@contextlib.asynccontextmanager
async def watch_operator(api: k8s.ApiClient, namespace: str, name: str) -> AsyncIterator[WatchedOperator]:
    """Watch job `name`'s pods while the block runs (from before any pod exists)."""
    core = k8s.CoreV1Api(api)
    seen = WatchedOperator()
    listed = await core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}")

    async def run(rv: str) -> None:
        graceful: set[str] = set()
        while True:
            async with watch.Watch().stream(
                core.list_namespaced_pod, namespace, label_selector=f"{JOB_LABEL}={name}", resource_version=rv
            ) as stream:
                async for ev in stream:
                    meta = ev["raw_object"]["metadata"]
                    rv = meta.get("resourceVersion", rv)
                    with contextlib.suppress(ValueError):
                        seen.version = max(seen.version, int((meta.get("labels") or {}).get("version", "0")))
                    grace = meta.get("deletionGracePeriodSeconds")
                    if ev["type"] == "ADDED":
                        seen.created.append((meta["name"], meta["uid"]))
                    if ev["type"] == "MODIFIED" and meta.get("deletionTimestamp") and (grace or 0) > 0:
                        graceful.add(meta["uid"])
                    if ev["type"] == "DELETED":
                        seen.deleted.append((meta["name"], meta["uid"], grace, meta["uid"] in graceful))

    task = asyncio.create_task(run(listed.metadata.resource_version), name="watch-ascend-operator")
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _running(sc: Scenario, name: str, *, not_uids: frozenset[str] | set[str] = frozenset()) -> list[k8s.V1Pod]:
    async def probe() -> list[k8s.V1Pod] | None:
        pods = await live_pods(sc.api, sc.namespace, f"{JOB_LABEL}={name}")
        good = [
            p
            for p in pods
            if p.status.phase == "Running"
            and (p.metadata.annotations or {}).get(NPU)
            and p.metadata.uid not in not_uids
        ]
        return good if len(good) == 2 == len(pods) else None

    return await eventually(probe, timeout_s=60, what=f"AscendJob {name}'s 2 pods Running with chips")


async def test_the_guides_ascendjob_under_the_stand_in_recovers_from_a_chip_fault(scenario: Scenario) -> None:
    sc = scenario
    await sc.add_nodes(4)
    cm, job = copy.deepcopy(seed_docs("seed-acjob.yaml"))
    for doc in (cm, job):
        doc["metadata"]["namespace"] = sc.namespace
    job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"]["accelerator-type"] = "module-910b-8"
    await for_the_stand_in(sc, job)
    async with watch_operator(sc.api, sc.namespace, job["metadata"]["name"]) as operator:
        created = await submit(sc.api, (cm, job), AC)
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]
        pods = await _running(sc, name)
        custom = k8s.CustomObjectsApi(sc.api)
        pg = await custom.get_namespaced_custom_object(
            "scheduling.volcano.sh", "v1beta1", sc.namespace, "podgroups", f"{name}-{uid}"
        )
        assert pg["metadata"]["labels"] == created["metadata"]["labels"]
        await sc.start_agent()
        old = {p.metadata.uid for p in pods}
        master = next(p for p in pods if p.metadata.name.endswith("-master-0"))
        chip = int(master.metadata.annotations[NPU].split(",")[1].rsplit("-", 1)[1])
        sc.injector.chip_fault(master.spec.node_name, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-job"
        new = await _running(sc, name, not_uids=old)
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
