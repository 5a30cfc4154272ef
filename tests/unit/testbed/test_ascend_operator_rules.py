"""The testbed's Ascend Operator stand-in (testbed/ascend_operator.py): its rules, each as MindCluster's operator
applies it (component/ascend-operator/pkg/controllers/v1 at 22bb3d98, kubeflow/common v0.4.3's status helpers),
against an in-memory apiserver. docs/mindcluster-conformance.md compares the stand-in with the real binary."""

from __future__ import annotations

import copy
import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import ascend_operator as ao
from testbed.rest import RestError

SEED = Path(__file__).resolve().parents[2] / "fixtures" / "seed-acjob.yaml"


class FakeRest:
    """Just enough of the apiserver for the stand-in: objects by path, label-selected pod lists, create, PUT,
    DELETE (a pod deletion is returned so the test can feed the watch event)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.deleted: list[dict[str, Any]] = []
        self.uid = 0

    def get(self, path: str) -> dict[str, Any]:
        base, _, query = path.partition("?")
        if base.endswith("/pods"):
            selector = urllib.parse.parse_qs(query).get("labelSelector", [""])[0]
            key, _, value = selector.partition("=")
            items = [
                o
                for p, o in self.objects.items()
                if p.startswith(base + "/") and (o["metadata"].get("labels") or {}).get(key) == value
            ]
            return {"items": copy.deepcopy(items)}
        if base not in self.objects:
            raise RestError(404, f"{base} not found")
        return copy.deepcopy(self.objects[base])

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        if method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            if path in self.objects:
                raise RestError(409, "exists")
            self.uid += 1
            obj = copy.deepcopy(body)
            obj["metadata"].setdefault("uid", f"uid-{self.uid}")
            if obj.get("kind") == "Pod":
                obj["status"] = {"phase": "Pending"}
            self.objects[path] = obj
            return copy.deepcopy(obj)
        if method == "PUT":
            # MindCluster's CRD (component/ascend-operator/build/ascend-operator.yaml) requires both
            if not {"conditions", "replicaStatuses"} <= set(body["status"]):
                raise RestError(422, "status.conditions or status.replicaStatuses: Required value")
            target = path.removesuffix("/status")
            self.objects[target] = {**self.objects[target], "status": copy.deepcopy(body["status"])}
            return copy.deepcopy(self.objects[target])
        if method == "DELETE":
            if path not in self.objects:
                raise RestError(404, "gone")
            self.deleted.append(self.objects.pop(path))
            return None
        raise AssertionError(method)

    # test helpers
    def pods(self) -> list[dict[str, Any]]:
        return [o for p, o in sorted(self.objects.items()) if "/pods/" in p]

    def set_pod_phase(self, name: str, phase: str) -> None:
        self.objects[f"/api/v1/namespaces/ns/pods/{name}"]["status"] = {"phase": phase}

    def job(self) -> dict[str, Any]:
        return self.objects[f"{ao.JOBS}/namespaces/ns/{ao.PLURAL}/job"]

    def podgroup(self) -> dict[str, Any] | None:
        return next((o for p, o in self.objects.items() if "/podgroups/" in p), None)


def _job(labels: dict[str, str] | None = None, **run_policy: Any) -> dict[str, Any]:
    _, job = (d for d in yaml.safe_load_all(SEED.read_text()) if d)
    job["metadata"].update({"name": "job", "namespace": "ns", "uid": "u1"})
    job["metadata"]["labels"].update(labels or {})
    job["spec"]["runPolicy"].update(run_policy)
    return dict(job)


class World:
    def __init__(self, job: dict[str, Any]) -> None:
        self.rest = FakeRest()
        self.rest.objects[f"{ao.JOBS}/namespaces/ns/{ao.PLURAL}/job"] = job
        self.ticks = 0
        self.op = ao.AscendOperator(self.rest, clock=self.clock)  # type: ignore[arg-type]
        self.op.pod_cache = {}  # as start() runs it: pods come from the watch's events
        self.op.job_seen("ADDED", job)

    def clock(self) -> str:
        return f"2026-01-01T00:00:{self.ticks:02d}Z"

    def reconcile(self) -> None:
        for pod in self.rest.pods():  # the pod watch's events for what the last reconcile made or changed
            self.op.pod_event("MODIFIED", copy.deepcopy(pod))
        self.op.reconcile("ns", "job")

    def podgroup_phase(self, phase: str) -> None:
        pg = self.rest.podgroup()
        assert pg is not None
        pg["status"] = {"phase": phase}

    def delete_pod(self, name: str) -> None:
        path = f"/api/v1/namespaces/ns/pods/{name}"
        pod = self.rest.objects.pop(path)
        self.op.pod_event("DELETED", pod)

    def conditions(self) -> list[tuple[str, str, str, str]]:
        return [
            (c["type"], c["status"], c["reason"], c["lastTransitionTime"])
            for c in self.rest.job().get("status", {}).get("conditions", [])
        ]

    def versions(self) -> dict[str, str]:
        return {p["metadata"]["name"]: p["metadata"]["labels"]["version"] for p in self.rest.pods()}

    def start(self) -> None:
        """Created, PodGroup Inqueue, pods made and Running."""
        self.reconcile()
        self.ticks += 1
        self.podgroup_phase("Inqueue")
        self.reconcile()
        for p in self.rest.pods():
            self.rest.set_pod_phase(p["metadata"]["name"], "Running")
        self.ticks += 1
        self.reconcile()


def test_podgroup_first_then_pods_once_it_is_not_pending() -> None:
    w = World(_job())
    w.reconcile()
    pg = w.rest.podgroup()
    assert pg is not None
    assert pg["metadata"]["name"] == "job-u1"
    assert pg["metadata"]["labels"] == w.rest.job()["metadata"]["labels"]
    assert pg["spec"]["minMember"] == 2
    assert pg["spec"]["minTaskMember"] == {"master": 1, "worker": 1}
    assert pg["spec"]["queue"] == "default"
    assert w.rest.pods() == []
    assert [c[:3] for c in w.conditions()] == [("Created", "True", "PodGroupNotInitialized")]
    w.ticks = 5
    w.podgroup_phase("Pending")
    w.reconcile()
    assert w.rest.pods() == []
    # same type and status, another reason: replaced, its transition time kept
    assert w.conditions() == [("Created", "True", "PodGroupPending", "2026-01-01T00:00:00Z")]
    w.podgroup_phase("Inqueue")
    w.reconcile()
    assert w.versions() == {"job-master-0": "0", "job-worker-0": "0"}


def test_pods_carry_the_operators_labels_annotations_and_rank() -> None:
    w = World(_job())
    w.start()
    master, worker = w.rest.pods()
    assert master["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"
    assert worker["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "worker"
    assert worker["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "job-u1"
    assert master["metadata"]["annotations"]["hccl/rankIndex"] == "0"
    assert worker["metadata"]["annotations"]["hccl/rankIndex"] == "1"  # the Master holds chips
    assert worker["spec"]["schedulerName"] == "volcano"
    assert worker["spec"]["restartPolicy"] == "Never"
    assert worker["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert "version" not in w.rest.job()["metadata"]["labels"]  # the counter is never on the job


def test_running_after_created_and_the_counter_only_on_the_pods() -> None:
    w = World(_job())
    w.start()
    assert [c[:3] for c in w.conditions()] == [
        ("Created", "True", "PodGroupNotInitialized"),
        ("Running", "True", "JobRunning"),
    ]
    w.delete_pod("job-master-0")
    w.reconcile()
    assert w.versions() == {"job-master-0": "1", "job-worker-0": "0"}
    w.delete_pod("job-worker-0")  # a version-0 pod after the bump: no second bump
    w.reconcile()
    assert w.versions() == {"job-master-0": "1", "job-worker-0": "1"}


def test_backoff_limit_fails_the_job_deletes_the_podgroup_and_leaves_running_pods() -> None:
    w = World(_job(backoffLimit=2))
    w.start()
    for _ in range(2):
        for name in list(w.versions()):
            w.delete_pod(name)
        w.reconcile()
        for p in w.rest.pods():
            w.rest.set_pod_phase(p["metadata"]["name"], "Running")
    assert set(w.versions().values()) == {"2"}
    w.reconcile()
    assert w.conditions()[-1][:3] == ("Running", "True", "JobRunning")
    w.rest.set_pod_phase("job-worker-0", "Pending")
    w.delete_pod("job-master-0")  # version 3 > 2
    w.reconcile()
    assert w.conditions()[-1][:3] == ("Failed", "True", "JobFailed")
    assert ("Running", "False") in [c[:2] for c in w.conditions()]
    assert w.rest.podgroup() is None
    assert w.rest.pods() == []  # no pod made; the Pending one deleted


def test_fault_retry_times_is_the_limit_without_backoff_limit_and_unset_is_unlimited() -> None:
    assert ao.backoff_limit(_job()) == 3
    assert ao.backoff_limit(_job(backoffLimit=1)) == 1
    job = _job()
    del job["metadata"]["labels"]["fault-retry-times"]
    assert ao.backoff_limit(job) == -1


@pytest.mark.parametrize(
    ("labels", "entry", "expected"),
    [
        ({}, None, ("Failed", "JobFailed")),  # fault-retry-times 3, no entry
        ({}, 2, ("Restarting", "JobRestarting")),
        ({}, 0, ("Failed", "JobFailed")),
        ({"fault-retry-times": "0"}, 2, ("Failed", "JobFailed")),  # not an unconditional-retry job
    ],
)
def test_a_failed_pod(labels: dict[str, str], entry: int | None, expected: tuple[str, str]) -> None:
    w = World(_job(labels))
    w.start()
    if entry is not None:
        value = {"ns/job-u1": {"UUID": "u1", "Times": entry}}
        w.rest.objects["/api/v1/namespaces/volcano-system/configmaps/vcjob-fault-npu-cm"] = {
            "metadata": {"name": "vcjob-fault-npu-cm"},
            "data": {"remain-retry-times": json.dumps(value)},
        }
    w.rest.set_pod_phase("job-worker-0", "Failed")
    w.reconcile()
    assert w.conditions()[-1][:3] == (*expected[:1], "True", expected[1])
    if expected[0] == "Restarting":
        assert "Running" not in [c[0] for c in w.conditions()]  # Restarting replaces Running
        assert w.rest.podgroup() is not None
        # the failed pod stays until someone deletes it; then the job's pods are made again at the next version
        w.delete_pod("job-worker-0")
        w.reconcile()
        assert w.versions() == {"job-master-0": "0", "job-worker-0": "1"}
        w.rest.set_pod_phase("job-worker-0", "Running")
        w.reconcile()
        assert [c[0] for c in w.conditions()] == ["Created", "Running"]
    else:
        w.reconcile()  # the next reconcile of a finished job deletes its PodGroup, leaves its pods
        assert w.rest.podgroup() is None
        assert len(w.rest.pods()) == 2


def test_remain_retry_times_shape() -> None:
    job = _job()
    key = "ns/job-u1"
    assert ao.remain_retry_times({"remain-retry-times": json.dumps({key: {"UUID": "u1", "Times": 2}})}, job) == 2
    assert ao.remain_retry_times({"remain-retry-times": json.dumps({"u1": {"UUID": "u1", "Times": 2}})}, job) is None
    assert ao.remain_retry_times({"remain-retry-times": "not json"}, job) is None
    assert ao.remain_retry_times({}, job) is None
    assert ao.remain_retry_times(None, job) is None


def test_recover_strategy_marks_the_podgroup() -> None:
    job = _job()
    job["metadata"]["annotations"] = {"recover-strategy": "recover"}
    pg = ao.podgroup_for(job)
    assert pg["metadata"]["labels"]["process-recover-enable"] == "on"
    assert pg["metadata"]["annotations"] == {"recover-strategy": "recover"}
    assert "process-recover-enable" not in ao.podgroup_for(_job())["metadata"]["labels"]


def test_set_condition_follows_kubeflow() -> None:
    st: dict[str, Any] = {}
    ao.set_condition(st, "Created", "JobCreated", "", "t0")
    ao.set_condition(st, "Running", "JobRunning", "", "t1")
    ao.set_condition(st, "Running", "JobRunning", "", "t2")  # same type, status, reason: untouched
    ao.set_condition(st, "Created", "PodGroupPending", "", "t3")  # moves to the end, keeps t0
    assert [(c["type"], c["lastTransitionTime"]) for c in st["conditions"]] == [("Running", "t1"), ("Created", "t0")]
    ao.set_condition(st, "Restarting", "JobRestarting", "", "t4")
    assert [c["type"] for c in st["conditions"]] == ["Created", "Restarting"]
    ao.set_condition(st, "Running", "JobRunning", "", "t5")
    ao.set_condition(st, "Failed", "JobFailed", "", "t6")
    assert [(c["type"], c["status"]) for c in st["conditions"]] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Failed", "True"),
    ]
    ao.set_condition(st, "Running", "JobRunning", "", "t7")  # nothing changes once Failed
    assert st["conditions"][-1]["type"] == "Failed"


def test_a_reconcile_before_the_deletion_event_does_not_recreate_the_pod_at_the_old_version() -> None:
    """The pod is gone from the apiserver but its DELETED event has not been handled: the stand-in's pods come
    from the watch (as the operator's informer cache), so it still sees the pod and makes nothing; the event then
    bumps the version and the pod comes back at 1, not 0."""
    w = World(_job())
    w.start()
    pod = w.rest.objects.pop("/api/v1/namespaces/ns/pods/job-worker-0")
    w.op.reconcile("ns", "job")
    assert "job-worker-0" not in w.versions()
    w.op.pod_event("DELETED", pod)
    w.reconcile()
    assert w.versions()["job-worker-0"] == "1"


def test_pods_missing_from_a_relist_count_as_deleted() -> None:
    w = World(_job())
    w.start()
    w.rest.objects.pop("/api/v1/namespaces/ns/pods/job-master-0")
    w.op.pods_relisted(w.rest.pods())
    w.op.reconcile("ns", "job")
    assert w.versions()["job-master-0"] == "1"


def test_a_restarted_stand_in_starts_the_counter_at_zero_and_writes_nothing_until_a_change() -> None:
    """As the real operator restarted on the testbed (docs/mindcluster-conformance.md): the counter lives in memory,
    so after a restart the next pods are made at version 0 again; the job's status is not rewritten at the
    restart itself."""
    w = World(_job())
    w.start()
    for name in list(w.versions()):
        w.delete_pod(name)
    w.reconcile()
    assert set(w.versions().values()) == {"1"}
    before = copy.deepcopy(w.rest.job()["status"])
    w.op = ao.AscendOperator(w.rest, clock=w.clock)  # type: ignore[arg-type]
    w.op.pod_cache = {}
    w.ticks = 30
    w.op.job_seen("ADDED", w.rest.job())
    w.reconcile()
    assert w.rest.job()["status"] == before
    for name in list(w.versions()):
        w.delete_pod(name)
    w.reconcile()
    assert set(w.versions().values()) == {"0"}
