"""The Ascend Operator stand-in's rank table (testbed/ascend_operator.py ``RankTable``, ``server_of``), against the
rules read from MindCluster's operator at 22bb3d98 (component/ascend-operator pkg/controllers/v1/pod.go
``genRankTable``, ``handleCompletedRankTable``, ``saveRankTableConfigmap``; pkg/ranktable/common/common.go), and the
NPU stand-in's configuration annotation it reads (testbed/npu_plugin.py ``configuration``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from testbed import ascend_operator as ao
from testbed.npu_plugin import CONFIG_ANNOTATION, configuration


def _pod(name: str, uid: str, node: str, rank: int, chips: list[str] | None, ip: str = "10.0.0.9") -> dict[str, Any]:
    annotations = {ao.RANK_INDEX_ANNOTATION: str(rank)}
    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "ascend", "resources": {"requests": {"huawei.com/Ascend910": "2"}}}],
        },
        "status": {"podIP": ip},
    }
    if chips is not None:
        annotations[CONFIG_ANNOTATION] = configuration(pod, chips, f"172.16.{rank}.5")
    return pod


def _data(text: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(text)
    return body


def test_configuration_annotation_has_the_device_plugins_shape() -> None:
    pod = _pod("p", "uid-1", "n0", 0, None)
    got = json.loads(configuration(pod, ["Ascend910-3", "Ascend910-1"], "172.16.0.5"))
    assert got == {
        "pod_name": "p",
        "server_id": "uid-1",
        "host_ip": "172.16.0.5",
        "devices": [
            {"device_id": "1", "device_ip": "192.101.0.5"},
            {"device_id": "3", "device_ip": "192.103.0.5"},
        ],
    }


def test_a_pod_without_the_annotation_is_not_allocated_unless_it_asks_for_no_chips() -> None:
    unallocated = _pod("p", "u", "n0", 0, None)
    assert not ao.pod_allocated(unallocated)
    assert ao.pod_allocated(_pod("p", "u", "n0", 0, ["Ascend910-0"]))
    no_chips = _pod("p", "u", "n0", 0, None)
    no_chips["spec"]["containers"][0]["resources"] = {}
    assert ao.pod_allocated(no_chips)
    deleting = _pod("p", "u", "n0", 0, ["Ascend910-0"])
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not ao.pod_allocated(deleting)


def test_all_replicas_allocated_builds_a_completed_table_ranked_by_rank_index() -> None:
    table = ao.RankTable()
    pods = [
        _pod("w1", "u-w1", "n1", 1, ["Ascend910-0", "Ascend910-1"], "10.0.0.2"),
        _pod("w0", "u-w0", "n0", 0, ["Ascend910-2", "Ascend910-3"], "10.0.0.1"),
    ]
    assert table.update(pods[:1], 2, 100) is None  # one of two: nothing yet
    data = table.update(pods, 2, 101)
    assert data is not None
    assert data[ao.RANK_TABLE_VERSION_KEY] == "0"  # the previous save's time (none yet), as the operator stamps it
    assert _data(data[ao.RANK_TABLE_KEY]) == {
        "status": "completed",
        "server_list": [
            {  # every pod on a node of its own: server_id is the host IP
                "device": [
                    {"device_id": "2", "device_ip": "192.102.0.5", "rank_id": "0"},
                    {"device_id": "3", "device_ip": "192.103.0.5", "rank_id": "1"},
                ],
                "server_id": "172.16.0.5",
                "host_ip": "172.16.0.5",
                "container_ip": "10.0.0.1",
            },
            {
                "device": [
                    {"device_id": "0", "device_ip": "192.100.1.5", "rank_id": "2"},
                    {"device_id": "1", "device_ip": "192.101.1.5", "rank_id": "3"},
                ],
                "server_id": "172.16.1.5",
                "host_ip": "172.16.1.5",
                "container_ip": "10.0.0.2",
            },
        ],
        "server_count": "2",
        "version": "1.0",
    }
    table.written(True)
    assert table.update(pods, 2, 102) is None  # same pods: nothing to write


def test_two_pods_on_one_node_keep_the_annotations_server_id() -> None:
    table = ao.RankTable()
    pods = [_pod("w0", "u-w0", "n0", 0, ["Ascend910-0"]), _pod("w1", "u-w1", "n0", 1, ["Ascend910-1"])]
    data = table.update(pods, 2, 1)
    assert data is not None
    servers = _data(data[ao.RANK_TABLE_KEY])["server_list"]
    assert [s["server_id"] for s in servers] == ["u-w0", "u-w1"]


def test_a_restart_writes_initializing_once_then_completed_with_the_new_pods() -> None:
    table = ao.RankTable()
    old = [_pod("w0", "u-w0", "n0", 0, ["Ascend910-0"]), _pod("w1", "u-w1", "n1", 1, ["Ascend910-0"])]
    assert table.update(old, 2, 10) is not None
    table.written(True)
    gone = [old[0]]
    data = table.update(gone, 2, 11)
    assert data is not None
    cleared = _data(data[ao.RANK_TABLE_KEY])
    assert cleared["status"] == "initializing"
    # the operator clears only its per-pod map: the last server list is still in what it writes
    assert [s["container_ip"] for s in cleared["server_list"]] == ["10.0.0.9", "10.0.0.9"]
    table.written(True)
    assert table.update([], 2, 12) is None  # initializing already written: once
    new = [_pod("w0", "u-w0", "n0", 0, ["Ascend910-0"]), _pod("w1", "u-w1b", "n1", 1, ["Ascend910-1"], "10.0.0.7")]
    assert table.update(new[:1], 2, 13) is None
    data = table.update(new, 2, 14)
    assert data is not None
    body = _data(data[ao.RANK_TABLE_KEY])
    assert body["status"] == "completed"
    assert body["server_list"][1]["container_ip"] == "10.0.0.7"
    assert data[ao.RANK_TABLE_VERSION_KEY] == "11"  # the time of the previous save (the initializing one)


def test_a_new_full_set_without_a_gap_is_rebuilt_and_an_extra_pod_changes_nothing() -> None:
    table = ao.RankTable()
    old = [_pod("w0", "u-a", "n0", 0, ["Ascend910-0"])]
    assert table.update(old, 1, 1) is not None
    table.written(True)
    extra = [*old, _pod("w0b", "u-b", "n1", 0, ["Ascend910-0"])]
    assert table.update(extra, 1, 2) is None  # more allocated than replicas: wait
    replaced = [_pod("w0", "u-c", "n1", 0, ["Ascend910-5"])]
    data = table.update(replaced, 1, 3)
    assert data is not None
    assert _data(data[ao.RANK_TABLE_KEY])["server_list"][0]["device"][0]["device_id"] == "5"


def test_a_failed_write_is_retried_at_the_next_change_and_unreadable_allocations_raise() -> None:
    table = ao.RankTable()
    pods = [_pod("w0", "u-a", "n0", 0, ["Ascend910-0"])]
    assert table.update(pods, 1, 1) is not None
    table.written(False)
    assert table.cm_status == ao.UNKNOWN
    assert table.update([], 1, 2) is not None  # initializing differs from unknown: written
    bad = _pod("w0", "u-b", "n0", 0, None)
    bad["metadata"]["annotations"][CONFIG_ANNOTATION] = "{not json"
    with pytest.raises(ValueError, match="unreadable"):
        table.update([bad], 1, 3)
    no_ip = _pod("w0", "u-c", "n0", 0, ["Ascend910-0"], ip="")
    with pytest.raises(ValueError, match="no pod IP"):
        ao.RankTable().update([no_ip], 1, 4)


def test_which_jobs_get_a_rank_table() -> None:
    assert ao.serves_ascendjob({"metadata": {"labels": {"framework": "pytorch"}}})
    assert not ao.serves_ascendjob({"metadata": {"labels": {"framework": "jax"}}})
    assert ao.serves_vcjob({"metadata": {"labels": {"ring-controller.atlas": "ascend-910b"}}})
    with_volume = {"metadata": {}, "spec": {"tasks": [{"template": {"spec": {"volumes": [{"name": "ranktable"}]}}}]}}
    assert ao.serves_vcjob(with_volume)
    assert not ao.serves_vcjob({"metadata": {"labels": {}}, "spec": {"tasks": [{"template": {}}]}})
    assert ao.rank_table_text("initializing", []) == '{"status":"initializing","version":"1.0"}'
