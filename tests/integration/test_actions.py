"""Cluster writers against the testbed's real apiserver (agent/actions)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from actions_support import (
    DeletionGraces,
    delete_node,
    list_commands,
    make_job,
    make_job_pod,
    make_node,
    make_rings_config,
    pods_by_name,
)
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch
from support.polling import eventually

from agent.actions import ClusterWriter, Outcome, PodRef, finish_force, finish_grace, restart_job
from agent.actions.writer import INCIDENT_LABEL, POD_READS_IN_FLIGHT, command_name
from agent.core.cluster import FaultScheduling, JobKind, JobRef
from agent.kube.client import new_api_client
from agent.kube.errors import KubeApiError
from testbed.service_account import service_account_token, write_token_kubeconfig

pytestmark = pytest.mark.integration
T = TypeVar("T")


def _value(x: T) -> Callable[[], Awaitable[T]]:
    async def probe() -> T:
        return x

    return probe


@pytest.fixture
async def node(kube_client: k8s.ApiClient) -> AsyncIterator[str]:
    name = await make_node(kube_client)
    try:
        yield name
    finally:
        await delete_node(kube_client, name)


async def _running(api: k8s.ApiClient, namespace: str, n: int) -> None:
    await eventually(
        lambda: pods_by_name(api, namespace),
        lambda pods: len(pods) == n and all(p.status.phase == "Running" for p in pods.values()),
        what=f"{n} pods Running",
    )


async def test_volcano_restart_creates_exactly_one_command(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    job = await make_job(kube_client, namespace, "vc", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
    writer = ClusterWriter(kube_client)
    # hold the Volcano controller so the Command stays in place while the repeat is checked
    testbed.pause("vc-controller-manager")
    try:
        first = await writer.restart_command(job, incident="vc-0123456789", reason="FaultAgentRestart", message="chip")
        again = await writer.restart_command(job, incident="vc-0123456789", reason="FaultAgentRestart", message="chip")
        commands = await list_commands(kube_client, namespace)
    finally:
        testbed.resume("vc-controller-manager")
    assert first.outcome is Outcome.DONE
    assert first.name == command_name("vc", "vc-0123456789")
    assert first.name.startswith("vc-restartjob-")
    assert again.outcome is Outcome.ALREADY_DONE
    assert len(commands) == 1
    cmd = commands[0]
    assert cmd["action"] == "RestartJob"
    assert cmd["metadata"]["name"] == first.name == again.name
    assert cmd["metadata"]["labels"][INCIDENT_LABEL] == "vc-0123456789"
    owner = cmd["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("Job", "vc", job.uid, True)
    assert cmd["target"]["uid"] == job.uid
    assert cmd["message"] == "chip"
    # the real Volcano controller accepts it: it runs the Command once and deletes it
    await eventually(lambda: list_commands(kube_client, namespace), lambda c: c == [], what="Command consumed")


async def test_volcano_grace_restart_lists_the_pods_to_force_after_grace_over_time(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, node: str
) -> None:
    """A RestartJob Command makes Volcano delete the pods with their grace period: in grace mode the plan names
    the pods it stops (listed before the Command) so finish_grace can force them; force mode deletes them itself
    (see the next test) and needs no follow-up."""
    job = await make_job(kube_client, namespace, "vg", JobKind.VOLCANO, labels={"fault-scheduling": "grace"})
    pod = await make_job_pod(kube_client, job, 0, node)
    writer = ClusterWriter(kube_client)
    testbed.pause("vc-controller-manager")
    try:
        grace = await restart_job(writer, job, mode=FaultScheduling.GRACE, incident="vg-1", reason="chip fault")
        force = await restart_job(writer, job, mode=FaultScheduling.FORCE, incident="vg-2", reason="chip fault")
        commands = await list_commands(kube_client, namespace)
    finally:
        testbed.resume("vc-controller-manager")
    assert grace.result.outcome is Outcome.DONE
    assert len(commands) == 2  # both restarts went through the controller
    assert grace.pods == (PodRef(namespace, "vg-worker-0", pod.metadata.uid),)
    assert grace.needs_grace_follow_up
    assert force.result.outcome is Outcome.DONE
    assert force.pods == (PodRef(namespace, "vg-worker-0", pod.metadata.uid),)
    assert force.needs_force_follow_up
    assert not force.needs_grace_follow_up


async def test_volcano_force_restart_deletes_the_old_pods_at_once_after_the_command(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    """fault-scheduling=force with the RestartJob Command: Volcano's controller deletes the pods with their grace
    period, so once it has taken the Command (the job's version moved on; here the test plays that part) the
    agent deletes the pods listed before the Command with grace 0 and a UID precondition. The pods are bound to a
    node no kubelet (and no kwok) serves, so nothing would ever complete a graceful deletion: they are gone only
    because of the forced one."""
    job = await make_job(kube_client, namespace, "vf", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
    ghost = f"ghost-{namespace[-8:]}"
    pods = [await make_job_pod(kube_client, job, i, ghost, grace_s=600) for i in range(2)]
    writer = ClusterWriter(kube_client)
    async with DeletionGraces(kube_client, namespace) as graces:
        testbed.pause("vc-controller-manager")  # hold Volcano so the wait for it is observable
        try:
            plan = await restart_job(writer, job, mode=FaultScheduling.FORCE, incident="vf-1", reason="chip fault")
            assert plan.result.outcome is Outcome.DONE, plan.result.detail
            assert plan.pods == tuple(PodRef(namespace, p.metadata.name, p.metadata.uid) for p in pods)
            assert plan.needs_force_follow_up
            assert not plan.needs_grace_follow_up
            forcing = asyncio.create_task(
                finish_force(writer, job, plan.pods, incident="vf-1", version=plan.version, wait_s=30)
            )
            await asyncio.sleep(1)
            assert len(await pods_by_name(kube_client, namespace)) == 2  # not before Volcano has taken the Command
            await k8s.CustomObjectsApi(kube_client).patch_namespaced_custom_object_status(
                "batch.volcano.sh",
                "v1alpha1",
                namespace,
                "jobs",
                "vf",
                {"status": {"version": int(plan.version or 0) + 1}},
                _content_type="application/merge-patch+json",
            )  # fmt: skip  (the controller's part: it took the Command)
            result = await asyncio.wait_for(forcing, 10)
        finally:
            testbed.resume("vc-controller-manager")
        assert result.outcome is Outcome.DONE, result.detail
        await eventually(
            lambda: pods_by_name(kube_client, namespace), lambda left: not left, what="pods gone", timeout_s=8
        )
    # the deletions the apiserver took carried grace 0 (terminationGracePeriodSeconds is 600)
    assert graces.first == {p.metadata.name: 0 for p in pods}
    # repeating it (a new leader resuming the incident) finds the pods already gone
    again = await finish_force(writer, job, plan.pods, incident="vf-1", version=plan.version, wait_s=0)
    assert again.outcome is Outcome.ALREADY_DONE


async def test_restart_with_cached_pods_lists_none_and_sends_the_command(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The running agent passes the job's pods from its watch cache: the Command goes out after one round trip
    (rings reset and version read at once), with no pod list, and the force follow-up gets the cached pods."""
    job = await make_job(kube_client, namespace, "kc", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
    await make_rings_config(kube_client, namespace, "kc")
    writer = ClusterWriter(kube_client)

    async def no_list(_: Any) -> list[PodRef]:
        raise AssertionError("listed the pods although the caller gave them")

    monkeypatch.setattr(writer, "list_job_pods", no_list)
    cached = (PodRef(namespace, "kc-worker-0", "uid-0"), PodRef(namespace, "kc-worker-1", "uid-1"))
    testbed.pause("vc-controller-manager")  # keep the Command in place to look at it
    try:
        plan = await restart_job(
            writer, job, mode=FaultScheduling.FORCE, incident="kc-1", reason="chip fault", known_pods=cached
        )
        commands = await list_commands(kube_client, namespace)
    finally:
        testbed.resume("vc-controller-manager")
    assert plan.result.outcome is Outcome.DONE, plan.result.detail
    assert plan.rings.outcome is Outcome.DONE
    assert plan.pods == cached
    assert plan.needs_force_follow_up
    assert [c["metadata"]["name"] for c in commands] == [command_name("kc", "kc-1")]
    cm = await k8s.CoreV1Api(kube_client).read_namespaced_config_map("rings-config-kc", namespace)
    assert json.loads(cm.data["hccl.json"]) == {"status": "initializing"}


async def test_command_in_a_missing_namespace_fails_instead_of_counting_as_done(kube_client: k8s.ApiClient) -> None:
    """A 404 on creating the Command (no such namespace, no Command resource) is a failure, not "already done"."""
    job = JobRef(JobKind.VOLCANO, "no-such-namespace-x1", "gone", "uid-gone")
    writer = ClusterWriter(kube_client)
    result = await writer.restart_command(job, incident="g-1", reason="FaultAgentRestart", message="")
    assert result.outcome is Outcome.FAILED
    assert result.status == 404
    assert not result.retriable


async def test_a_write_to_a_silent_apiserver_fails_within_its_deadline(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    """An apiserver that accepts connections but answers nothing (SIGSTOP) must not hold a write forever: each
    attempt ends at the writer's deadline and the write fails as retriable (the incident is retried later)."""
    job = await make_job(kube_client, namespace, "dl", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
    writer = ClusterWriter(kube_client, attempts=2, backoff_s=0.1, timeout_s=1.0, state_namespace=namespace)
    testbed.pause("kube-apiserver")
    try:
        started = time.monotonic()
        result = await asyncio.wait_for(writer.write_record(job, {"ledger": "{}"}, incident="dl-1"), 20)
        took = time.monotonic() - started
    finally:
        testbed.resume("kube-apiserver")
    assert result.outcome is Outcome.FAILED
    assert result.retriable
    assert "connection error" in result.detail
    assert 1.5 < took < 6  # two attempts of 1 s each and a short backoff, not an endless wait


async def test_ascend_force_deletes_pods_at_once_with_uid_precondition(
    kube_client: k8s.ApiClient, namespace: str, node: str
) -> None:
    job = await make_job(kube_client, namespace, "ac", JobKind.ASCEND, labels={"fault-scheduling": "force"})
    for i in range(2):
        await make_job_pod(kube_client, job, i, node, grace_s=600)
    await _running(kube_client, namespace, 2)
    writer = ClusterWriter(kube_client)
    async with DeletionGraces(kube_client, namespace) as graces:
        plan = await restart_job(writer, job, mode=FaultScheduling.FORCE, incident="ac-1", reason="chip fault")
        assert plan.result.outcome is Outcome.DONE
        assert sorted(p.name for p in plan.pods) == ["ac-worker-0", "ac-worker-1"]
        assert not plan.needs_grace_follow_up
        await eventually(lambda: pods_by_name(kube_client, namespace), lambda pods: not pods, what="pods deleted")
    # grace 0, as the apiserver took the deletions, although terminationGracePeriodSeconds is 600
    assert graces.first == {"ac-worker-0": 0, "ac-worker-1": 0}
    # the UID precondition: a replacement with the same name is never hit by a repeated deletion
    replacement = await make_job_pod(kube_client, job, 0, node)
    repeat = await writer.delete_pods(list(plan.pods), incident="ac-1", grace_seconds=0)
    assert repeat.outcome is Outcome.ALREADY_DONE
    pods = await pods_by_name(kube_client, namespace)
    assert pods["ac-worker-0"].metadata.uid == replacement.metadata.uid
    assert pods["ac-worker-0"].metadata.deletion_timestamp is None


async def test_a_pod_status_mark_is_one_annotation_conditioned_on_the_pods_uid(
    kube_client: k8s.ApiClient, namespace: str, node: str
) -> None:
    """fault-scheduling=external-*: the mark MindCluster's rescheduler sets (huawei.com/pod-status), nothing else
    of the pod changed; a replacement pod of the same name is never marked for its predecessor's fault."""
    job = await make_job(kube_client, namespace, "ext", JobKind.VOLCANO, labels={"fault-scheduling": "external-force"})
    pod = await make_job_pod(kube_client, job, 0, node)
    before = pod.metadata.annotations or {}
    writer = ClusterWriter(kube_client)
    ref = PodRef(namespace, pod.metadata.name, pod.metadata.uid)
    done = await writer.annotate_pod(ref, {"huawei.com/pod-status": "Unhealthy-CardUnhealthy"}, incident="e-1")
    assert done.outcome is Outcome.DONE
    marked = (await pods_by_name(kube_client, namespace))[pod.metadata.name]
    assert marked.metadata.annotations == {**before, "huawei.com/pod-status": "Unhealthy-CardUnhealthy"}
    assert marked.metadata.labels == pod.metadata.labels
    await k8s.CoreV1Api(kube_client).delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    await eventually(lambda: pods_by_name(kube_client, namespace), lambda pods: not pods, what="pod deleted")
    replacement = await make_job_pod(kube_client, job, 0, node)
    stale = await writer.annotate_pod(ref, {"huawei.com/pod-status": "Unhealthy-CardUnhealthy"}, incident="e-1")
    assert stale.outcome is Outcome.ALREADY_DONE
    now = (await pods_by_name(kube_client, namespace))[pod.metadata.name]
    assert now.metadata.uid == replacement.metadata.uid
    assert "huawei.com/pod-status" not in (now.metadata.annotations or {})


async def test_grace_mode_deletes_normally_then_forces_after_grace_over_time(
    kube_client: k8s.ApiClient, namespace: str, node: str
) -> None:
    job = await make_job(kube_client, namespace, "gr", JobKind.ASCEND, labels={"fault-scheduling": "grace"})
    await make_job_pod(kube_client, job, 0, node, grace_s=600)
    await _running(kube_client, namespace, 1)
    # a finalizer holds the pod in Terminating like a process that does not exit, so only the forced
    # deletion after grace-over-time can finish the job; the test removes it to let the pod go.
    core = k8s.CoreV1Api(kube_client)
    await core.patch_namespaced_pod("gr-worker-0", namespace, {"metadata": {"finalizers": ["test/hold"]}})
    # record every grace period the pod is given: kwok (standing in for the kubelet) finishes a graceful
    # deletion at once with grace 0, so the first value seen on the watch is the one our request carried.
    graces: list[int | None] = []

    async def record() -> None:
        async with watch.Watch() as w:
            async for event in w.stream(core.list_namespaced_pod, namespace, timeout_seconds=30):
                graces.append(event["object"].metadata.deletion_grace_period_seconds)

    recorder = asyncio.create_task(record(), name="record-graces")
    await asyncio.sleep(0.5)
    writer = ClusterWriter(kube_client)
    plan = await restart_job(writer, job, mode=FaultScheduling.GRACE, incident="gr-1", reason="chip fault")
    assert plan.result.outcome is Outcome.DONE
    assert plan.needs_grace_follow_up
    await eventually(_value(graces), lambda g: any(x is not None for x in g), what="pod marked for deletion")
    assert next(x for x in graces if x is not None) == 600  # the pod's own grace period was requested
    started = time.monotonic()
    forced = await finish_grace(writer, job, plan.pods, incident="gr-1", grace_over_time_s=2.0)
    assert time.monotonic() - started >= 2.0
    assert forced.outcome is Outcome.DONE  # still there (held): forced with grace 0 and its UID
    recorder.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await recorder
    await core.patch_namespaced_pod("gr-worker-0", namespace, {"metadata": {"finalizers": None}})
    await eventually(lambda: pods_by_name(kube_client, namespace), lambda pods: not pods, what="pod gone")
    # nothing left: a second follow-up is already done
    assert (await finish_grace(writer, job, plan.pods, incident="gr-1", grace_over_time_s=0)).outcome is (
        Outcome.ALREADY_DONE
    )


async def test_rings_config_reset_to_initializing(kube_client: k8s.ApiClient, namespace: str) -> None:
    await make_rings_config(kube_client, namespace, "job1")
    writer = ClusterWriter(kube_client)
    assert (await writer.reset_rings_config(namespace, "job1", incident="i")).outcome is Outcome.DONE
    cm = await k8s.CoreV1Api(kube_client).read_namespaced_config_map("rings-config-job1", namespace)
    assert json.loads(cm.data["hccl.json"]) == {"status": "initializing"}
    missing = await writer.reset_rings_config(namespace, "nojob", incident="i")
    assert missing.outcome is Outcome.ALREADY_DONE


async def test_quarantine_taint_touches_only_our_taints(kube_client: k8s.ApiClient, node: str) -> None:
    core = k8s.CoreV1Api(kube_client)
    other = {"key": "example.com/maintenance", "value": "yes", "effect": "NoExecute"}
    await core.patch_node(node, {"spec": {"taints": [other]}})
    writer = ClusterWriter(kube_client)
    key = "fault-agent.io/fault"
    assert (await writer.taint_node(node, key=key, value="SeparateNPU")).outcome is Outcome.DONE
    assert (await writer.taint_node(node, key=key, value="SeparateNPU")).outcome is Outcome.ALREADY_DONE
    assert (await writer.taint_node(node, key=key, value="PreSeparateNPU")).outcome is Outcome.DONE

    async def taints() -> list[tuple[str, str, str]]:
        n = await core.read_node(node)
        return sorted((t.key, t.value, t.effect) for t in n.spec.taints or [])

    assert await taints() == [
        ("example.com/maintenance", "yes", "NoExecute"),
        (key, "PreSeparateNPU", "NoSchedule"),
    ]
    # a new writer (an agent restarted in between) removes our taint and keeps the other one
    assert (await ClusterWriter(kube_client).untaint_node(node, key=key)).outcome is Outcome.DONE
    assert await taints() == [("example.com/maintenance", "yes", "NoExecute")]
    assert (await writer.untaint_node(node, key=key)).outcome is Outcome.ALREADY_DONE
    assert (await writer.taint_node("no-such-node", key=key, value="x")).outcome is Outcome.ALREADY_DONE


async def test_job_records_are_created_merged_claimed_and_deleted_and_the_job_is_not_written(
    kube_client: k8s.ApiClient, namespace: str
) -> None:
    """The agent's record of a job (agent.core.records) in its namespace: a write creates it, the next merges into
    it (the actor kept); a claim is a create (409 when one exists) or a replace at the record's resourceVersion
    (409 when it moved on); the job object is never touched."""
    job = await make_job(kube_client, namespace, "an", JobKind.VOLCANO)
    custom = k8s.CustomObjectsApi(kube_client)
    before = await custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", "an")
    writer = ClusterWriter(kube_client, state_namespace=namespace)
    assert (await writer.claim_record(job, {"actor": "a#1"}, resource_version="", incident="i")).outcome is Outcome.DONE
    again = await writer.claim_record(job, {"actor": "b#1"}, resource_version="", incident="i")
    assert (again.outcome, again.status) == (Outcome.FAILED, 409)  # an atomic create: the record exists
    result = await writer.write_record(job, {"ledger": '{"restartsUsed":1}'}, incident="i")
    assert result.outcome is Outcome.DONE
    record = await writer.read_record(job)
    assert record is not None
    assert (record.ledger, record.actor) == ('{"restartsUsed":1}', "a#1")
    stale = await writer.claim_record(job, {"actor": "b#1"}, resource_version="1", incident="i")
    assert (stale.outcome, stale.status) == (Outcome.FAILED, 409)
    claimed = await writer.claim_record(job, {"actor": "b#1"}, resource_version=record.resource_version, incident="i")
    assert claimed.outcome is Outcome.DONE
    cm = await k8s.CoreV1Api(kube_client).read_namespaced_config_map(f"fault-agent-job-{job.uid}", namespace)
    assert cm.data == {"actor": "b#1"}
    assert cm.metadata.labels["fault-agent.io/job-uid"] == job.uid
    assert (await writer.delete_record(job.uid, incident="i")).outcome is Outcome.DONE
    assert await writer.read_record(job) is None
    assert (await writer.delete_record(job.uid, incident="i")).outcome is Outcome.ALREADY_DONE
    after = await custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", "an")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_dry_run_leaves_every_resource_version_unchanged(
    kube_client: k8s.ApiClient, namespace: str, node: str
) -> None:
    vc = await make_job(kube_client, namespace, "dv", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
    ac = await make_job(kube_client, namespace, "da", JobKind.ASCEND, labels={"fault-scheduling": "grace"})
    await make_job_pod(kube_client, ac, 0, node)
    await make_rings_config(kube_client, namespace, "dv")
    await _running(kube_client, namespace, 1)
    core = k8s.CoreV1Api(kube_client)
    custom = k8s.CustomObjectsApi(kube_client)

    async def versions() -> dict[str, str]:
        # The node's resourceVersion moves with kwok's heartbeats and the lifecycle controller's
        # node.kubernetes.io/* taints; what the agent could write there is its own taint, so the node is compared
        # by its other taints, every other object by its resourceVersion.
        node_obj = await core.read_node(node)
        own_taints = sorted(
            (t.key, t.value or "", t.effect)
            for t in node_obj.spec.taints or []
            if not t.key.startswith("node.kubernetes.io/")
        )
        out = {
            "node taints": repr(own_taints),
            "cm": (await core.read_namespaced_config_map("rings-config-dv", namespace)).metadata.resource_version,
            "pod": (await core.read_namespaced_pod("da-worker-0", namespace)).metadata.resource_version,
        }
        for name, group, version, plural in (
            ("dv", "batch.volcano.sh", "v1alpha1", "jobs"),
            ("da", "mindxdl.gitee.com", "v1", "ascendjobs"),
        ):
            obj = await custom.get_namespaced_custom_object(group, version, namespace, plural, name)
            out[name] = obj["metadata"]["resourceVersion"]
        return out

    before = await versions()
    writer = ClusterWriter(kube_client, dry_run=True)
    results = [
        (await restart_job(writer, vc, mode=FaultScheduling.FORCE, incident="d1", reason="x")).result,
        (await restart_job(writer, ac, mode=FaultScheduling.GRACE, incident="d2", reason="x")).result,
        await writer.delete_pod(PodRef(namespace, "da-worker-0", "any"), incident="d2", grace_seconds=0),
        await writer.taint_node(node, key="fault-agent.io/fault", value="SeparateNPU"),
        await writer.write_record(vc, {"ledger": "{}"}, incident="d1"),
        await writer.claim_record(vc, {"actor": "a"}, resource_version="", incident="d1"),
        await writer.reset_rings_config(namespace, "dv", incident="d1"),
    ]
    assert {r.outcome for r in results} == {Outcome.DRY_RUN}
    assert await versions() == before
    assert await list_commands(kube_client, namespace) == []


async def test_quarantine_taint_keeps_other_taints_time_added(kube_client: k8s.ApiClient, node: str) -> None:
    """Another party's NoExecute taint (like the lifecycle controller's unreachable taint) keeps its timeAdded, which
    times the eviction of pods tolerating it for tolerationSeconds, through our taint and untaint (and the
    admission policy in deploy/ denies a Node patch that changes any other taint)."""
    core = k8s.CoreV1Api(kube_client)
    added = "2020-01-02T03:04:05Z"
    other = {"key": "example.com/drain", "effect": "NoExecute", "timeAdded": added}
    await core.patch_node(node, {"spec": {"taints": [other]}})
    writer = ClusterWriter(kube_client)
    key = "fault-agent.io/fault"

    async def others() -> list[dict[str, Any]]:
        raw = await core.read_node(node, _preload_content=False)
        return [t for t in json.loads(await raw.read())["spec"].get("taints", []) if t["key"] != key]

    assert await others() == [other]
    assert (await writer.taint_node(node, key=key, value="SeparateNPU")).outcome is Outcome.DONE
    assert await others() == [other]
    assert (await writer.untaint_node(node, key=key)).outcome is Outcome.DONE
    assert await others() == [other]


async def test_pods_remaining_reads_each_pod_and_keeps_those_with_the_same_uid(
    kube_client: k8s.ApiClient, namespace: str, node: str
) -> None:
    """Gone (404) and replaced (same name, new UID) pods are not remaining; the rest are, in the order given, read
    through concurrent GETs (more pods than POD_READS_IN_FLIGHT)."""
    job = await make_job(kube_client, namespace, "pr", JobKind.ASCEND)
    count = POD_READS_IN_FLIGHT + 4
    pods = [await make_job_pod(kube_client, job, i, node, grace_s=0) for i in range(count)]
    refs = [PodRef(namespace, p.metadata.name, p.metadata.uid) for p in pods]
    core = k8s.CoreV1Api(kube_client)
    await core.delete_namespaced_pod(refs[1].name, namespace, grace_period_seconds=0)
    await core.delete_namespaced_pod(refs[2].name, namespace, grace_period_seconds=0)
    await eventually(
        lambda: pods_by_name(kube_client, namespace),
        lambda now: refs[1].name not in now and refs[2].name not in now,
        what="two pods gone",
    )
    replaced = await make_job_pod(kube_client, job, 2, node, grace_s=0)  # same name, new UID
    assert replaced.metadata.uid != refs[2].uid
    never = PodRef(namespace, "pr-worker-never", "uid-never")
    writer = ClusterWriter(kube_client)
    left = await writer.pods_remaining([*refs, never])
    assert left == [refs[0], *refs[3:]]
    assert await writer.pods_remaining([]) == []


async def test_list_job_pods_reads_each_selector_raw_and_leaves_out_terminating_pods(
    kube_client: k8s.ApiClient, namespace: str, node: str
) -> None:
    """The job's pods by either AscendJob selector (the operator's label or the older ``job-name``), each once,
    sorted by name; a pod being deleted (held by a finalizer) is left out, another job's pod too."""
    job = await make_job(kube_client, namespace, "lj", JobKind.ASCEND)
    other = await make_job(kube_client, namespace, "lj-other", JobKind.ASCEND)
    pods = [await make_job_pod(kube_client, job, i, node, grace_s=0) for i in range(3)]
    await make_job_pod(kube_client, other, 0, node, grace_s=0)
    core = k8s.CoreV1Api(kube_client)
    # the older label on one pod as well: found by both selectors, listed once
    await core.patch_namespaced_pod(pods[0].metadata.name, namespace, {"metadata": {"labels": {"job-name": "lj"}}})
    await core.patch_namespaced_pod(pods[2].metadata.name, namespace, {"metadata": {"finalizers": ["test/hold"]}})
    await core.delete_namespaced_pod(pods[2].metadata.name, namespace)
    writer = ClusterWriter(kube_client)
    try:
        listed = await writer.list_job_pods(job)
    finally:
        await core.patch_namespaced_pod(pods[2].metadata.name, namespace, {"metadata": {"finalizers": None}})
    assert listed == [PodRef(namespace, p.metadata.name, p.metadata.uid) for p in pods[:2]]


async def test_refused_pod_reads_and_deletions_keep_the_apiservers_status(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, node: str, tmp_path: Path
) -> None:
    """The list's and the deletion's answers are read raw (never built into models); a refusal still comes back
    as the apiserver said it: the list raises its typed error (403, agent.kube.errors), the deletion fails with the
    status and message, is not retried and is not taken as done (the namespace's default ServiceAccount may do
    nothing)."""
    job = await make_job(kube_client, namespace, "rf", JobKind.ASCEND)
    pod = await make_job_pod(kube_client, job, 0, node, grace_s=0)
    token = service_account_token(testbed.rest(), namespace, "default")
    api = await new_api_client(str(write_token_kubeconfig(tmp_path / "kubeconfig", testbed, token)))
    try:
        writer = ClusterWriter(api, attempts=3, backoff_s=0.05)
        with pytest.raises(KubeApiError) as refused:
            await writer.list_job_pods(job)
        assert refused.value.status == 403
        assert "forbidden" in refused.value.server_message
        ref = PodRef(namespace, pod.metadata.name, pod.metadata.uid)
        result = await writer.delete_pod(ref, incident="rf-1", grace_seconds=0)
    finally:
        await api.close()
    assert result.outcome is Outcome.FAILED
    assert result.status == 403
    assert not result.retriable
    assert "forbidden" in result.detail
    assert (await pods_by_name(kube_client, namespace))[ref.name].metadata.deletion_timestamp is None
    writer = ClusterWriter(kube_client)
    gone = PodRef(namespace, "rf-worker-never", "uid-never")
    assert (await writer.delete_pod(gone, incident="rf-1", grace_seconds=0)).outcome is Outcome.ALREADY_DONE
