"""Record extraction from raw API JSON: the fixtures, each field, and each kind of malformed object."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import factories

from agent.core.cluster import ConfigMapRecord, FaultScheduling, JobKind, JobRecord, NodeRecord, PodRecord
from agent.core.detect.deviceinfo import node_of
from agent.core.faults import Rejection
from agent.sources.configmaps import convert_configmap, device_info_signal_time, node_info_signal_time
from agent.sources.jobs import ASCEND_LIMIT_FROM_LABEL, JobConverter
from agent.sources.nodes import NodeConverter, node_signal_time
from agent.sources.pods import PodConverter, pod_input_hash, pod_signal_time

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]


def _with_meta(obj: dict[str, Any], uid: str = "u-1", rv: str = "100") -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("uid", uid)
    obj["metadata"].setdefault("resourceVersion", rv)
    obj["metadata"].setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
    return obj


def _pods() -> list[dict[str, Any]]:
    return [_with_meta(d) for d in _docs("pods-as-scheduled.yaml") if d["kind"] == "Pod"]


def _pod(**status: Any) -> dict[str, Any]:
    p = _pods()[0]
    p["status"] = status
    return p


# ---- pods ----------------------------------------------------------------------------------------------


def test_volcano_pod_fixture() -> None:
    rec = PodConverter()(_pods()[0])
    assert isinstance(rec, PodRecord)
    assert (rec.namespace, rec.name, rec.node, rec.rank) == ("vcjob", "mindx-dls-test-default-test-0", "worker-07", 0)
    assert rec.chips == tuple(f"Ascend910-{i}" for i in range(8))
    assert rec.job is not None
    assert (rec.job.kind, rec.job.namespace, rec.job.name, rec.job.version) == (
        JobKind.VOLCANO,
        "vcjob",
        "mindx-dls-test",
        "0",
    )
    assert rec.job.uid == "6b1a3f2e-0c1d-4e5f-9a8b-7c6d5e4f3a2b"
    assert rec.created_at == datetime(2026, 1, 1, tzinfo=UTC)


def test_ascend_pod_fixture() -> None:
    rec = PodConverter()(_pods()[1])
    assert isinstance(rec, PodRecord)
    assert rec.job is not None
    assert (rec.job.kind, rec.job.name, rec.job.version, rec.rank) == (JobKind.ASCEND, "default-test-pytorch", "0", 1)
    assert rec.job.uid == "0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d"


def test_equal_values_are_shared_between_records() -> None:
    conv = PodConverter()
    a, b = _pods()[0], _pods()[0]
    b["metadata"]["name"] = "other"
    ra, rb = conv(a), conv(b)
    assert isinstance(ra, PodRecord)
    assert isinstance(rb, PodRecord)
    assert ra.chips is rb.chips
    assert ra.job is rb.job


@pytest.mark.parametrize(
    ("labels", "owner", "expected"),
    [
        pytest.param({"volcano.sh/job-name": "j"}, None, (JobKind.VOLCANO, "j"), id="volcano-label"),
        pytest.param({"training.kubeflow.org/job-name": "a"}, None, (JobKind.ASCEND, "a"), id="kubeflow-label"),
        pytest.param(
            {"job-name": "a", "group-name": "mindxdl.gitee.com"}, None, (JobKind.ASCEND, "a"), id="legacy-ascend-label"
        ),
        pytest.param({"job-name": "batch-job"}, None, None, id="legacy-label-of-a-batch-job-is-no-link"),
        pytest.param(
            {},
            {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "o", "uid": "x", "controller": True},
            (JobKind.VOLCANO, "o"),
            id="volcano-owner",
        ),
        pytest.param(
            {},
            {"apiVersion": "mindxdl.gitee.com/v1", "kind": "AscendJob", "name": "o", "uid": "x", "controller": True},
            (JobKind.ASCEND, "o"),
            id="ascend-owner",
        ),
        pytest.param(
            {},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "x", "controller": True},
            None,
            id="other-owner",
        ),
        pytest.param({}, None, None, id="no-link"),
    ],
)
def test_job_link(labels: dict[str, str], owner: dict[str, Any] | None, expected: tuple[JobKind, str] | None) -> None:
    p = _pods()[0]
    p["metadata"]["labels"] = labels
    p["metadata"]["ownerReferences"] = [owner] if owner else []
    rec = PodConverter()(p)
    assert isinstance(rec, PodRecord)
    got = (rec.job.kind, rec.job.name) if rec.job else None
    assert got == expected


def test_pod_status_fields() -> None:
    rec = PodConverter()(
        _pod(
            phase="Failed",
            reason="Evicted",
            conditions=[{"type": "Ready", "status": "False"}],
            containerStatuses=[
                {
                    "name": "mindspore",
                    "state": {
                        "terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-01-02T03:04:05Z"}
                    },
                },
                {"name": "side", "state": {"running": {}}},
            ],
        )
    )
    assert isinstance(rec, PodRecord)
    assert (rec.phase, rec.ready, rec.status_reason, rec.disruption) == ("Failed", False, "Evicted", "Evicted")
    assert len(rec.terminations) == 1
    t = rec.terminations[0]
    assert (t.container, t.exit_code, t.reason) == ("mindspore", 137, "OOMKilled")
    assert pod_signal_time(rec) == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_disruption_target_condition_and_last_state() -> None:
    rec = PodConverter()(
        _pod(
            phase="Running",
            conditions=[
                {"type": "Ready", "status": "True"},
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
            ],
            containerStatuses=[{"name": "c", "state": {}, "lastState": {"terminated": {"exitCode": 1}}}],
        )
    )
    assert isinstance(rec, PodRecord)
    assert (rec.ready, rec.disruption) == (True, "PreemptionByScheduler")
    assert [(t.exit_code, t.finished_at) for t in rec.terminations] == [(1, None)]


def test_npu_prefix_is_data() -> None:
    p = _pods()[0]
    p["metadata"]["annotations"] = {"huawei.com/npu": "npu-0, npu-1"}
    assert PodConverter()(p).chips == ("npu-0", "npu-1")  # type: ignore[union-attr]
    assert PodConverter(("huawei.com/Ascend910",))(p).chips == ()  # type: ignore[union-attr]


def _break(path: str, value: Any) -> dict[str, Any]:
    p = _pods()[0]
    node: Any = p
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    if value is _DELETE:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value
    return p


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        pytest.param("metadata", _DELETE, "missing-metadata", id="no-metadata"),
        pytest.param("metadata", "x", "missing-metadata", id="metadata-not-object"),
        pytest.param("metadata.name", _DELETE, "missing-metadata", id="no-name"),
        pytest.param("metadata.uid", _DELETE, "missing-metadata", id="no-uid"),
        pytest.param("metadata.resourceVersion", 7, "missing-metadata", id="rv-not-string"),
        pytest.param("metadata.labels", ["a"], "wrong-type", id="labels-not-object"),
        pytest.param("metadata.annotations", {"hccl/rankIndex": 3}, "wrong-type", id="annotation-not-string"),
        pytest.param("metadata.annotations", {"hccl/rankIndex": "three"}, "bad-rank", id="rank-not-integer"),
        pytest.param("metadata.creationTimestamp", "yesterday", "bad-timestamp", id="bad-creation-time"),
        pytest.param("metadata.ownerReferences", ["x"], "wrong-type", id="owner-not-object"),
        pytest.param("spec.nodeName", 5, "wrong-type", id="node-name-not-string"),
        pytest.param("status.conditions", {"type": "Ready"}, "wrong-type", id="conditions-not-list"),
        pytest.param(
            "status.containerStatuses",
            [{"name": "c", "state": {"terminated": {"exitCode": "boom"}}}],
            "bad-exit-code",
            id="exit-code-not-int",
        ),
    ],
)
def test_malformed_pod_is_rejected(path: str, value: Any, reason: str) -> None:
    got = PodConverter()(_break(path, value))
    assert isinstance(got, Rejection)
    assert got.reason == reason
    assert got.source.kind == "Pod"
    assert got.detail


def test_rejection_names_the_object() -> None:
    got = PodConverter()(_break("metadata.annotations", {"hccl/rankIndex": "x"}))
    assert isinstance(got, Rejection)
    assert (got.source.namespace, got.source.name, got.source.uid) == ("vcjob", "mindx-dls-test-default-test-0", "u-1")


# ---- nodes ---------------------------------------------------------------------------------------------


def _node(**over: Any) -> dict[str, Any]:
    n: dict[str, Any] = {
        "metadata": {
            "name": "worker-01",
            "uid": "n-1",
            "resourceVersion": "5",
            "labels": {"host-arch": "huawei-arm", "unrelated": "x"},
        },
        "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
        "status": {
            "allocatable": {"huawei.com/Ascend910": "8", "cpu": "192"},
            "conditions": [
                {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                 "lastTransitionTime": "2026-01-01T00:00:10Z"},
                {"type": "KernelDeadlock", "status": "False", "lastTransitionTime": "2026-01-01T00:00:01Z"},
            ],
        },
    }  # fmt: skip
    n.update(over)
    return n


def test_node_fields() -> None:
    rec = NodeConverter()(_node())
    assert isinstance(rec, NodeRecord)
    assert rec.labels == (("host-arch", "huawei-arm"),)
    assert rec.npu_allocatable == 8
    ready = rec.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason) == ("Unknown", "NodeStatusUnknown")
    assert [(t.key, t.effect) for t in rec.taints] == [("node.kubernetes.io/unreachable", "NoExecute")]
    assert node_signal_time(rec) == datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("over", "reason"),
    [
        pytest.param({"metadata": {"name": "n"}}, "missing-metadata", id="no-uid"),
        pytest.param({"spec": {"taints": "x"}}, "wrong-type", id="taints-not-list"),
        pytest.param({"spec": {"unschedulable": "yes"}}, "wrong-type", id="unschedulable-not-bool"),
        pytest.param(
            {"status": {"allocatable": {"huawei.com/Ascend910": "8k"}}}, "bad-allocatable", id="bad-npu-count"
        ),
        pytest.param(
            {"status": {"conditions": [{"type": "Ready", "lastTransitionTime": 5}]}}, "bad-timestamp", id="bad-time"
        ),
    ],
)
def test_malformed_node_is_rejected(over: dict[str, Any], reason: str) -> None:
    got = NodeConverter()(_node(**over))
    assert isinstance(got, Rejection)
    assert (got.reason, got.source.kind) == (reason, "Node")


# ---- ConfigMaps ----------------------------------------------------------------------------------------


def test_device_info_configmap() -> None:
    raw = _with_meta(json.loads((FIXTURES / "deviceinfo-healthy.json").read_text()))
    rec = convert_configmap(raw)
    assert isinstance(rec, ConfigMapRecord)
    assert rec.data == raw["data"]
    assert node_of(rec.name, "mindx-dl-deviceinfo-") == "worker-01"
    assert device_info_signal_time(rec) == datetime.fromtimestamp(1767225600, tz=UTC)


def test_node_info_configmap_time() -> None:
    raw = _with_meta(json.loads((FIXTURES / "nodeinfo-unhealthy-cpu.json").read_text()))
    rec = convert_configmap(raw)
    assert isinstance(rec, ConfigMapRecord)
    expected = datetime.fromisoformat(raw["data"]["updateTime"])
    assert node_info_signal_time(rec) == expected


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param({"DeviceInfoCfg": {"DeviceInfo": {}}}, "wrong-type", id="value-not-string"),
        pytest.param(["x"], "wrong-type", id="data-not-object"),
    ],
)
def test_malformed_configmap_is_rejected(data: Any, reason: str) -> None:
    got = convert_configmap(
        {"metadata": {"name": "m", "namespace": "kube-system", "uid": "u", "resourceVersion": "1"}, "data": data}
    )
    assert isinstance(got, Rejection)
    assert (got.reason, got.source.kind, got.source.name) == (reason, "ConfigMap", "m")


def test_configmap_without_data_or_time() -> None:
    rec = convert_configmap({"metadata": {"name": "m", "namespace": "n", "uid": "u", "resourceVersion": "1"}})
    assert isinstance(rec, ConfigMapRecord)
    assert rec.data == {}
    assert device_info_signal_time(rec) is None
    assert node_info_signal_time(rec) is None


# ---- jobs ----------------------------------------------------------------------------------------------


def _vcjob() -> dict[str, Any]:
    return factories.seed_vcjob_body()


def _acjob() -> dict[str, Any]:
    job = _with_meta(next(d for d in _docs("seed-acjob.yaml") if d["kind"] == "AscendJob"))
    job["metadata"]["labels"]["version"] = "4"
    job["status"] = {
        "conditions": [
            {"type": "Created", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Running", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"},
            {"type": "Restarting", "status": "False", "lastTransitionTime": "2026-01-01T00:02:00Z"},
        ]
    }
    return job


def test_vcjob_fixture() -> None:
    rec = JobConverter(JobKind.VOLCANO)(_vcjob())
    assert isinstance(rec, JobRecord)
    assert (rec.fault_scheduling, rec.fault_retry_times, rec.max_retry, rec.min_available) == (
        FaultScheduling.FORCE,
        3,
        3,
        2,
    )
    assert (rec.phase, rec.version, rec.retry_count) == ("Running", "2", 1)
    assert rec.annotations == (("fault-agent.io/incident", "i-1"),)
    assert rec.label("ring-controller.atlas") == "ascend-910b"


def test_acjob_fixture() -> None:
    rec = JobConverter(JobKind.ASCEND)(_acjob())
    assert isinstance(rec, JobRecord)
    # the job's own `version` label is not the operator's counter (it keeps that on the pods: agent.sources.state)
    assert (rec.kind, rec.phase, rec.version, rec.min_available, rec.fault_retry_times) == (
        JobKind.ASCEND,
        "Running",
        "",
        2,
        3,
    )
    assert (rec.max_retry, rec.max_retry_from) == (3, ASCEND_LIMIT_FROM_LABEL)
    assert rec.label("framework") == "pytorch"


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        pytest.param("force", FaultScheduling.FORCE, id="force"),
        pytest.param("grace", FaultScheduling.GRACE, id="grace"),
        pytest.param("off", FaultScheduling.OFF, id="off"),
        pytest.param("sometimes", FaultScheduling.OFF, id="unknown-is-off"),
        pytest.param(None, FaultScheduling.OFF, id="absent-is-off"),
    ],
)
def test_fault_scheduling_label(label: str | None, expected: FaultScheduling) -> None:
    job = _vcjob()
    job["metadata"]["labels"].pop("fault-scheduling")
    if label is not None:
        job["metadata"]["labels"]["fault-scheduling"] = label
    rec = JobConverter(JobKind.VOLCANO)(job)
    assert isinstance(rec, JobRecord)
    assert rec.fault_scheduling is expected


@pytest.mark.parametrize("value", ["-1", "abc", "101", "many", "", "３", "1.5"])
def test_malformed_fault_retry_times_keeps_the_job_with_no_business_budget(value: str) -> None:
    """Issue 13 B8: a bad ``fault-retry-times`` made the whole job a rejected input, so its hardware faults were
    ignored too. The job is kept, with a business retry budget of 0, and the label's problem can be reported."""
    from agent.sources.jobs import fault_retry_times_problem

    job = _vcjob()
    job["metadata"]["labels"]["fault-retry-times"] = value
    rec = JobConverter(JobKind.VOLCANO)(job)
    assert isinstance(rec, JobRecord)
    assert rec.fault_retry_times == 0
    assert rec.label("fault-retry-times") == value
    problem = fault_retry_times_problem(value)
    assert problem is not None
    assert "is not an integer 0–100" in problem
    assert [fault_retry_times_problem(v) for v in ("0", "3", "100", None)] == [None] * 4


@pytest.mark.parametrize(
    ("kind", "mutate", "reason"),
    [
        pytest.param(JobKind.VOLCANO, lambda j: j["spec"].update({"maxRetry": "three"}), "bad-max-retry",
                     id="max-retry-not-int"),
        pytest.param(JobKind.VOLCANO, lambda j: j["spec"].update({"maxRetry": -1}), "bad-max-retry",
                     id="max-retry-negative"),
        pytest.param(JobKind.VOLCANO, lambda j: j["status"].update({"state": "Running"}), "wrong-type",
                     id="state-not-object"),
        pytest.param(JobKind.ASCEND, lambda j: j["status"].update({"conditions": ["Running"]}), "wrong-type",
                     id="condition-not-object"),
        pytest.param(JobKind.ASCEND, lambda j: j["spec"]["runPolicy"].update({"backoffLimit": 2.5}), "bad-max-retry",
                     id="backoff-limit-float"),
    ],
)  # fmt: skip
def test_malformed_job_is_rejected(kind: JobKind, mutate: Any, reason: str) -> None:
    job = _vcjob() if kind is JobKind.VOLCANO else _acjob()
    mutate(job)
    got = JobConverter(kind)(job)
    assert isinstance(got, Rejection)
    assert got.reason == reason
    assert got.source.kind == ("Job" if kind is JobKind.VOLCANO else "AscendJob")


@pytest.mark.parametrize(
    ("annotations", "chips"),
    [
        pytest.param(
            {"huawei.com/AscendReal": "Ascend910-4,Ascend910-5", "huawei.com/Ascend910": "Ascend910-0,Ascend910-1"},
            ("Ascend910-4", "Ascend910-5"),
            id="real-first",
        ),
        pytest.param(
            {"huawei.com/AscendReal": "", "huawei.com/Ascend910": "Ascend910-0"}, ("Ascend910-0",), id="empty-real"
        ),
        pytest.param({"huawei.com/Ascend910": "Ascend910-2"}, ("Ascend910-2",), id="no-real"),
    ],
)
def test_chips_come_from_ascend_real_first(annotations: dict[str, str], chips: tuple[str, ...]) -> None:
    """MindCluster's rescheduler takes a pod's chips from huawei.com/AscendReal (what its scheduler plugin really
    bound: ascend-for-volcano internal/rescheduling/task.go), falling back to the resource-named annotation."""
    p = _pods()[0]
    p["metadata"]["annotations"] = annotations
    assert PodConverter()(p).chips == chips  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("settings", "configmap_sources"),
    [
        pytest.param({}, {"deviceinfo", "nodeinfo", "faultconfig", "publicfault"}, id="defaults-auto-unresolved"),
        pytest.param(
            {"fault_source": "per-node"}, {"deviceinfo", "nodeinfo", "faultconfig", "publicfault"}, id="per-node"
        ),
        pytest.param({"fault_source": "clusterd"}, {"clusterinfo", "faultconfig"}, id="clusterd-alone"),
        pytest.param(
            {"fault_source": "per-node", "public_fault_enabled": False},
            {"deviceinfo", "nodeinfo", "faultconfig"},
            id="no-public-faults",
        ),
    ],
)
def test_one_fault_source_is_watched(settings: dict[str, Any], configmap_sources: set[str]) -> None:
    """ClusterD's view or the per-node and public-fault ConfigMaps, never both (issue 36, item 7): ClusterD merged the
    public faults into its view, as MindCluster's scheduler reads it (``useClusterInfoManager``)."""
    from agent.settings import KubeSettings
    from agent.sources.watchers import resources

    got = {r.source for r in resources(KubeSettings(**settings)) if r.kind == "ConfigMap"}
    assert got == configmap_sources


def test_pod_input_hash_covers_every_field_the_converter_reads() -> None:
    """`PodConverter.unchanged` is True only for writes that convert to the same record: a change of the
    resourceVersion, managedFields or an unread spec field keeps the hash; a change of any read part breaks it."""
    base = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "1",
                     "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"volcano.sh/job-name": "j"},
                     "annotations": {"hccl/rankIndex": "0", "huawei.com/Ascend910": "Ascend910-0"},
                     "ownerReferences": [{"kind": "Job", "apiVersion": "batch.volcano.sh/v1alpha1", "name": "j",
                                          "uid": "ju", "controller": True}],
                     "managedFields": [{"manager": "a"}]},
        "spec": {"nodeName": "n1", "restartPolicy": "Never", "containers": [{"name": "c"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip
    convert = PodConverter()
    old = convert(base)
    assert not isinstance(old, Rejection)
    same: list[tuple[str, ...]] = [("metadata", "resourceVersion"), ("metadata", "managedFields"),
                                   ("spec", "containers")]  # fmt: skip
    read: list[tuple[str, ...]] = [
        ("metadata", "uid"), ("metadata", "creationTimestamp"), ("metadata", "deletionTimestamp"),
        ("metadata", "labels"), ("metadata", "annotations"), ("metadata", "ownerReferences"),
        ("spec", "nodeName"), ("spec", "restartPolicy"), ("status", "phase"), ("status", "conditions"),
        ("status", "reason"), ("status", "containerStatuses"),
    ]  # fmt: skip
    for path in same + read:
        obj = copy.deepcopy(base)
        value = "2026-01-02T00:00:00Z" if path[1].endswith("Timestamp") else "x"
        obj[path[0]][path[1]] = value if path[1] not in ("labels", "annotations") else {"x": "y"}
        if path[1] in ("ownerReferences", "containerStatuses", "conditions", "managedFields", "containers"):
            obj[path[0]][path[1]] = [{"name": "other"}]
        expected = path in same
        assert convert.unchanged(obj, old) is expected, path
        assert (pod_input_hash(obj) == old.input_hash) is expected, path
    assert convert.unchanged({"metadata": "bad"}, old) is False
    assert PodConverter().unchanged(base, replace(old, input_hash=0)) is False  # 0: not known, never equal


def test_a_changed_write_is_converted_with_the_hash_unchanged_computed() -> None:
    """`unchanged` keeps the hash of the write it found changed for the conversion of that very object, which gives
    the record a fresh conversion gives; another object is hashed anew."""
    base = _pods()[0]
    convert = PodConverter()
    old = convert(base)
    assert not isinstance(old, Rejection)
    failed = copy.deepcopy(base)
    failed.setdefault("status", {})["phase"] = "Failed"
    assert convert.unchanged(failed, old) is False
    rec = convert(failed)
    fresh = PodConverter()(failed)
    assert not isinstance(rec, Rejection)
    assert not isinstance(fresh, Rejection)
    assert rec == fresh
    assert rec.phase == "Failed"
    assert rec.input_hash == fresh.input_hash == pod_input_hash(failed) != old.input_hash
    moved = copy.deepcopy(base)
    moved["spec"]["nodeName"] = "elsewhere"
    assert convert.unchanged(failed, old) is False  # hashed `failed`, then converted another object
    other = convert(moved)
    assert not isinstance(other, Rejection)
    assert other.node == "elsewhere"
    assert other.input_hash == pod_input_hash(moved)
