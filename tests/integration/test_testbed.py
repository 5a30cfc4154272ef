"""The testbed's components are real and wired together: apiserver + CRDs, kwok, scheduler, RBAC, Kafka."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from support.polling import eventually

from testbed import versions
from testbed.cluster import KWOK_OFF, Testbed
from testbed.inject import Injector, kwok_node

FIXTURES = Path(__file__).parent.parent / "fixtures"
T = TypeVar("T")


def seed_docs(name: str, namespace: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]
    for d in docs:
        d["metadata"]["namespace"] = namespace
    return docs


async def test_apiserver_reports_the_built_version(kube_client: client.ApiClient) -> None:
    info = await client.VersionApi(kube_client).get_code()
    assert info.git_version == versions.KUBERNETES
    assert info.minor == versions.KUBERNETES.split(".")[1]


@pytest.mark.parametrize(
    ("fixture", "group", "version", "plural"),
    [
        pytest.param("seed-vcjob.yaml", "batch.volcano.sh", "v1alpha1", "jobs", id="volcano-job"),
        pytest.param("seed-acjob.yaml", "mindxdl.gitee.com", "v1", "ascendjobs", id="ascendjob"),
    ],
)
async def test_seed_job_and_rings_config_round_trip(
    kube_client: client.ApiClient, namespace: str, fixture: str, group: str, version: str, plural: str
) -> None:
    core = client.CoreV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    cm, job = seed_docs(fixture, namespace)
    assert cm["kind"] == "ConfigMap"
    await core.create_namespaced_config_map(namespace, cm)
    created = await custom.create_namespaced_custom_object(group, version, namespace, plural, job)
    assert created["metadata"]["uid"]

    got_cm = await core.read_namespaced_config_map(cm["metadata"]["name"], namespace)
    assert got_cm.data == cm["data"]
    assert got_cm.metadata.labels["ring-controller.atlas"] == "ascend-910b"
    got = await custom.get_namespaced_custom_object(group, version, namespace, plural, job["metadata"]["name"])
    assert got["spec"] == job["spec"]  # unknown fields preserved by the structural CRD
    assert got["metadata"]["labels"]["fault-scheduling"] == "force"

    # The status subresource exists: a status write goes through /status and does not touch spec. A merge patch
    # carries no resourceVersion, so the Volcano controller writing the same job's status cannot make it conflict.
    status = {"state": {"phase": "Running"}} if plural == "jobs" else {"conditions": []}
    patched = await custom.patch_namespaced_custom_object_status(
        group, version, namespace, plural, job["metadata"]["name"], {"status": status},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    assert patched["spec"] == job["spec"]
    assert "status" in patched


async def test_crd_short_names(kube_client: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(kube_client)
    expected = {
        "jobs.batch.volcano.sh": ("Job", ["vcjob", "vj"], "Namespaced"),
        "podgroups.scheduling.volcano.sh": ("PodGroup", ["pg", "podgroup-v1beta1"], "Namespaced"),
        "queues.scheduling.volcano.sh": ("Queue", ["q", "queue-v1beta1"], "Cluster"),
        "commands.bus.volcano.sh": ("Command", None, "Namespaced"),
        "ascendjobs.mindxdl.gitee.com": ("AscendJob", ["acjob"], "Namespaced"),
    }
    for name, (kind, short, scope) in expected.items():
        crd = await ext.read_custom_resource_definition(name)
        assert crd.spec.names.kind == kind
        assert crd.spec.names.short_names == short
        assert crd.spec.scope == scope


async def test_kwok_makes_node_ready_and_scheduler_binds_pod_running(
    kube_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    node_name = f"kwok-{uuid.uuid4().hex[:8]}"
    await core.create_node(kwok_node(node_name))
    try:

        async def node_ready() -> bool:
            node = await core.read_node(node_name)
            return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

        await eventually(node_ready, what=f"kwok to make node {node_name} Ready")
        node = await core.read_node(node_name)
        assert node.status.allocatable["huawei.com/Ascend910"] == "8"

        pod = copy.deepcopy(POD)
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node_name}
        await core.create_namespaced_pod(namespace, pod)

        async def running() -> client.V1Pod | None:
            p = await core.read_namespaced_pod("trainer-0", namespace)
            return p if p.status.phase == "Running" else None

        placed = await eventually(running, what="the scheduler to bind the pod and kwok to run it")
        assert placed.spec.node_name == node_name
        assert placed.status.container_statuses[0].ready is True
    finally:
        await core.delete_node(node_name)


async def test_injected_not_ready_outlasts_a_heartbeat_kwok_had_already_scheduled(
    testbed: Testbed, kube_client: client.ApiClient
) -> None:
    """Issue 13 E17: `testbed inject not-ready` undid itself 20-45 s later. kwok schedules each heartbeat with a
    copy of the node and did not cancel it when the node was labelled heartbeat=off, so the stale heartbeat wrote
    Ready "True" back. A Ready node always has one pending (scheduled by its last status write); the injected
    state must outlast the longest heartbeat delay (20 s + 25 s jitter, testbed/kwok/stages.yaml)."""
    core = client.CoreV1Api(kube_client)
    inj = Injector(testbed.rest())
    name = f"kwok-{uuid.uuid4().hex[:8]}"
    inj.add_nodes([name])
    try:

        async def ready_condition() -> tuple[str, datetime | None]:
            node = await core.read_node(name)
            cond = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
            return (cond.status, cond.last_transition_time) if cond is not None else ("", None)

        async def ready() -> str:
            return (await ready_condition())[0]

        await eventually(lambda: _is(ready, "True"), what=f"kwok to make node {name} Ready")
        inj.node_not_ready(name, "Unknown")
        # the window runs from the injection's own stamp on the Node (its Ready lastTransitionTime, written with
        # the injector's clock), on that same clock, not from when this test got round to looking
        status, injected_at = await ready_condition()
        assert status == "Unknown", status
        assert injected_at is not None
        seen: list[str] = []
        while (inj.clock() - injected_at).total_seconds() < 47:
            status, since = await ready_condition()
            seen.append(status)
            after = f"{(since - injected_at).total_seconds():.0f} s" if since is not None else "?"
            assert status != "True", f"{name} Ready again {after} after the injection (the Node's own stamps)"
            await asyncio.sleep(0.5)
        assert set(seen) == {"Unknown"}
        # and handing the node back to kwok still makes it Ready
        inj.node_ready(name)
        await eventually(lambda: _is(ready, "True"), what=f"kwok to make node {name} Ready again")
    finally:
        inj.delete_nodes([name])


async def _is(probe: Callable[[], Awaitable[str]], want: str) -> bool:
    return await probe() == want


POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "trainer-0", "labels": {"app": "trainer"}},
    "spec": {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "ascend",
                "image": "train:1",
                "resources": {"limits": {"huawei.com/Ascend910": "8"}, "requests": {"huawei.com/Ascend910": "8"}},
            }
        ],
    },
}


async def test_kwok_ends_a_deleted_pod_at_once_unless_it_asks_for_a_delay(
    kube_client: client.ApiClient, namespace: str
) -> None:
    """testbed/kwok/stages.yaml testbed-pod-delete: a deleted pod goes at once; one annotated with kwok's
    ``pod-delete.stage.kwok.x-k8s.io/delay`` goes after that delay, as a kubelet would end it (what the GPU e2e
    test's job asks for). Ordering only: both deleted together, the plain one is gone while the other is still
    there, terminating, and that one goes later."""
    core = client.CoreV1Api(kube_client)
    node_name = f"kwok-{uuid.uuid4().hex[:8]}"
    await core.create_node(kwok_node(node_name))
    try:
        names = ("plain-0", "slow-0")
        for name in names:
            pod = copy.deepcopy(POD)
            pod["metadata"]["name"] = name
            if name == "slow-0":
                pod["metadata"]["annotations"] = {"pod-delete.stage.kwok.x-k8s.io/delay": "3s"}
            pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node_name}
            pod["spec"]["containers"][0]["resources"] = {}
            await core.create_namespaced_pod(namespace, pod)

        async def running() -> bool:
            pods = [await core.read_namespaced_pod(n, namespace) for n in names]
            return all(p.status.phase == "Running" for p in pods)

        await eventually(running, what="kwok to run both pods")
        await asyncio.gather(*(core.delete_namespaced_pod(n, namespace) for n in names))

        async def present(name: str) -> client.V1Pod | None:
            try:
                return await core.read_namespaced_pod(name, namespace)
            except ApiException as e:
                if e.status == 404:
                    return None
                raise

        await eventually(lambda: present("plain-0"), lambda p: p is None, what="kwok to end the plain pod")
        slow = await present("slow-0")
        assert slow is not None, "the delayed pod went with the plain one"
        assert slow.metadata.deletion_timestamp is not None
        await eventually(lambda: present("slow-0"), lambda p: p is None, what="kwok to end the delayed pod")
    finally:
        await core.delete_node(node_name)


async def test_a_delete_kwok_queued_for_a_pod_never_ends_its_same_named_successor(
    testbed: Testbed, kube_client: client.ApiClient, namespace: str
) -> None:
    """kwok (v0.8.0) plays a queued delete by name with no UID precondition, from the copy of the pod it queued it
    for. A Volcano Job's replacement pod has the old one's name, so such a delete played after the old pod went
    ended the replacement and Volcano restarted the job again (tests/e2e/test_dra_correlation.py's rare flake).
    Made deterministic here: the old pod asks for a 5 s end (kwok queues its delete for then), is labelled
    ``testbed.fault-agent.io/kwok=off`` so kwok ignores the rest of its life (a pod's later change or its deletion
    would cancel or replace the queued delete), force-deleted, and replaced by a pod of the same name that kwok
    ignores too. When kwok plays the delete, the replacement must survive it (testbed/manifests/kwok-deletes.yaml:
    kwok may delete only a pod that is being deleted)."""
    core = client.CoreV1Api(kube_client)
    node_name = f"kwok-{uuid.uuid4().hex[:8]}"
    await core.create_node(kwok_node(node_name))
    kwok_log = testbed.logs_dir / "kwok.log"
    key, _, value = KWOK_OFF.partition("=")
    try:
        old = copy.deepcopy(POD)
        old["metadata"]["name"] = "same-0"
        old["metadata"]["annotations"] = {"pod-delete.stage.kwok.x-k8s.io/delay": "5s"}
        old["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node_name}
        old["spec"]["containers"][0]["resources"] = {}
        await core.create_namespaced_pod(namespace, old)

        async def old_running() -> client.V1Pod | None:
            pod = await core.read_namespaced_pod("same-0", namespace)
            return pod if pod.status.phase == "Running" else None

        first = await eventually(old_running, what="kwok to run the old pod")
        await core.delete_namespaced_pod("same-0", namespace)  # graceful: kwok queues its end 5 s from now
        await core.patch_namespaced_pod(
            "same-0", namespace, {"metadata": {"labels": {key: value}}}, _content_type="application/merge-patch+json"
        )
        await core.delete_namespaced_pod(
            "same-0", namespace, body={"gracePeriodSeconds": 0, "preconditions": {"uid": first.metadata.uid}}
        )

        async def old_gone() -> bool:
            try:
                await core.read_namespaced_pod("same-0", namespace)
            except ApiException as e:
                if e.status == 404:
                    return True
                raise
            return False

        await eventually(old_gone, what="the old pod gone")
        successor = copy.deepcopy(old)
        successor["metadata"]["labels"] = {**successor["metadata"]["labels"], key: value}
        del successor["metadata"]["annotations"]
        created = await core.create_namespaced_pod(namespace, successor)

        def kwok_played_its_delete() -> list[str]:
            """kwok's log lines about this pod: its delete's outcome, one way or the other."""
            mark = f'"pod":"{namespace}/same-0"'
            lines = kwok_log.read_text(encoding="utf-8", errors="replace").splitlines()
            return [line for line in lines if mark in line and ('"Delete pod"' in line or "failed to" in line)]

        played = await eventually(kwok_played_its_delete, timeout_s=30, what="kwok to play the delete it queued")
        try:
            now = await core.read_namespaced_pod("same-0", namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            pytest.fail(f"kwok's delete queued for the old pod ended its same-named successor: {played}")
        assert now.metadata.uid == created.metadata.uid
        assert now.metadata.deletion_timestamp is None
        assert "kwok may end only a pod that is being deleted" in played[0], played
    finally:
        with contextlib.suppress(ApiException):
            await core.delete_namespaced_pod("same-0", namespace, grace_period_seconds=0)
        await core.delete_node(node_name)


async def test_rbac_denies_service_account_without_role(kube_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_client)
    await core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    auth = client.AuthorizationV1Api(kube_client)
    for verb, resource in [("list", "pods"), ("get", "secrets"), ("create", "configmaps")]:
        review = await auth.create_subject_access_review(
            {
                "spec": {
                    "user": f"system:serviceaccount:{namespace}:nobody",
                    "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                    "resourceAttributes": {"namespace": namespace, "verb": verb, "resource": resource},
                }
            }
        )
        assert review.status.allowed is False, f"{verb} {resource} must be denied"

    # And with a real token for that ServiceAccount, the apiserver answers 403.
    token = await core.create_namespaced_service_account_token(
        "nobody", namespace, {"spec": {"expirationSeconds": 600}}
    )
    cfg = client.Configuration()
    cfg.host = kube_client.configuration.host
    cfg.ssl_ca_cert = kube_client.configuration.ssl_ca_cert
    cfg.api_key = {"BearerToken": token.status.token}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    async with client.ApiClient(cfg) as sa_client:
        with pytest.raises(ApiException) as denied:
            await client.CoreV1Api(sa_client).list_namespaced_pod(namespace)
        assert denied.value.status == 403


async def test_kafka_produce_and_consume(kafka_bootstrap: str) -> None:
    topic = f"testbed-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for i in range(3):
            await producer.send_and_wait(topic, f"message-{i}".encode(), key=b"job-uid")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1000)
            for records in batch.values():
                got += [r.value for r in records if r.value is not None]
    finally:
        await consumer.stop()
    assert got == [b"message-0", b"message-1", b"message-2"]


def test_kill_and_restart_apiserver_keeps_data(testbed: Testbed) -> None:
    rest = testbed.rest()
    name = f"keep-{uuid.uuid4().hex[:6]}"
    rest.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    testbed.kill("kube-apiserver")
    assert testbed.status()["kube-apiserver"] == "stopped"
    testbed.start("kube-apiserver")
    assert rest.get(f"/api/v1/namespaces/{name}")["metadata"]["name"] == name


async def test_volcano_runs_the_guides_job_and_restarts_it_on_command(
    testbed: Testbed, kube_client: client.ApiClient, namespace: str
) -> None:
    """vc-controller-manager creates the pods, vc-scheduler places them on kwok nodes (8 NPUs each, one pod per
    node by the job's anti-affinity), and a RestartJob Command makes the controller recreate them."""
    from testbed.inject import Injector

    pool = uuid.uuid4().hex[:6]
    nodes = [f"vc-{pool}-{i}" for i in range(3)]
    Injector(testbed.rest()).add_nodes(nodes)
    for node in nodes:  # a label of this test's own: other tests' leftover nodes must not take its pods
        testbed.rest().merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {"testbed-pool": pool}}})
    core = client.CoreV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    job_name = "mindx-dls-test"  # the seed's name
    try:
        cm, job = seed_docs("seed-vcjob.yaml", namespace)
        assert job["metadata"]["name"] == job_name
        await core.create_namespaced_config_map(namespace, cm)
        job["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"]["testbed-pool"] = pool
        created = await custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", job)
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]

        async def running_pods() -> list[client.V1Pod] | None:
            pods = (await core.list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={name}")).items
            live = [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
            return live if len(live) == 2 else None

        first = await eventually(running_pods, timeout_s=120, what="Volcano to run the job's 2 pods")
        assert len({p.spec.node_name for p in first}) == 2  # anti-affinity: one pod per node
        first_uids = {p.metadata.uid for p in first}

        await custom.create_namespaced_custom_object(
            "bus.volcano.sh",
            "v1alpha1",
            namespace,
            "commands",
            {
                "apiVersion": "bus.volcano.sh/v1alpha1",
                "kind": "Command",
                "metadata": {"generateName": f"{name}-restartjob-"},
                "action": "RestartJob",
                "target": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": name, "uid": uid},
                "reason": "test",
            },
        )

        async def replaced() -> list[client.V1Pod] | None:
            pods = await running_pods()
            return pods if pods and not ({p.metadata.uid for p in pods} & first_uids) else None

        await eventually(replaced, timeout_s=60, what="Volcano to recreate the pods after RestartJob")
        status = (await custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", name))[
            "status"
        ]
        assert status["version"] >= 1
        assert status["retryCount"] >= 1
    finally:
        # The job goes before its nodes: a job left to the namespace's deletion keeps its PodGroup's 16 NPUs
        # reserved in vc-scheduler for a while, and the next Volcano job waits for that capacity.
        with contextlib.suppress(ApiException):
            await custom.delete_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", job_name)
        with contextlib.suppress(ApiException):
            await core.delete_collection_namespaced_pod(
                namespace, label_selector=f"volcano.sh/job-name={job_name}", grace_period_seconds=0
            )
        Injector(testbed.rest()).delete_nodes(nodes)


async def test_jobsets_own_webhooks_default_and_validate_jobsets(kube_client: client.ApiClient, namespace: str) -> None:
    """The testbed runs JobSet's manager (sigs.k8s.io/jobset, versions.JOBSET) with its JobSet webhooks registered
    at the apiserver: a JobSet without a restart policy gets JobSet's default (OnFailure, webhooks/jobset_webhook.go
    Default) and a failure policy rule name JobSet refuses is refused; the manager then makes the child Job."""
    from agent.platform.builders import JobSetTrainingSpec, build_jobset

    custom = client.CustomObjectsApi(kube_client)
    group, version, plural = "jobset.x-k8s.io", "v1alpha2", "jobsets"
    body = build_jobset(JobSetTrainingSpec(name="wh", namespace=namespace, image="fake/x:1", accelerators=0))
    bad = copy.deepcopy(body)
    bad["spec"]["failurePolicy"]["rules"][0]["name"] = "not-a-valid-name"
    with pytest.raises(ApiException) as refused:
        await custom.create_namespaced_custom_object(group, version, namespace, plural, bad)
    assert refused.value.status == 403
    assert "failure policy rule name" in str(refused.value.body)
    del body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"]
    del body["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]
    created = await custom.create_namespaced_custom_object(group, version, namespace, plural, body)
    pod_spec = created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod_spec["restartPolicy"] == "OnFailure"

    async def child_job() -> list[Any]:
        jobs = await client.BatchV1Api(kube_client).list_namespaced_job(
            namespace, label_selector="jobset.sigs.k8s.io/jobset-name=wh"
        )
        return list(jobs.items)

    (job,) = await eventually(child_job, what="JobSet's manager to make the child Job")
    assert job.metadata.labels["jobset.sigs.k8s.io/restart-attempt"] == "0"
    assert job.spec.backoff_limit == 0
