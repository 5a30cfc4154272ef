"""NodeD ConfigMaps, Node objects and Pods: classification, clearing and bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support import factories

from agent.core.cluster import ConfigMapRecord, ContainerTermination, NodeCondition, NodeRecord, PodRecord, Taint
from agent.core.detect.checkcode import check_code
from agent.core.detect.levels import load_shipped_table
from agent.core.detect.nodeinfo import NodeInfoDetector
from agent.core.detect.nodes import NodeDetector
from agent.core.detect.pods import PodDetector
from agent.core.faults import FaultKind, FaultLevel

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"
NOW = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
TABLE = load_shipped_table()


def fixture_cm(name: str) -> ConfigMapRecord:
    doc = json.loads((FIXTURES / name).read_text())
    m = doc["metadata"]
    return factories.configmap(m["name"], doc["data"], namespace=m["namespace"], uid="uid-1")


def noded_cm(devs: list[dict[str, object]], status: str, *, update: str = "2026-01-01T07:59:00Z") -> ConfigMapRecord:
    inner = {"FaultDevList": devs, "NodeStatus": status}
    doc = {"NodeInfo": inner, "CheckCode": check_code(inner)}
    data = {"NodeInfo": json.dumps(doc, separators=(",", ":")), "updateTime": update}
    return factories.configmap("mindx-dl-nodeinfo-w9", data, namespace="mindx-dl", uid="u")


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        pytest.param(
            "nodeinfo-unhealthy-cpu.json",
            [(FaultLevel.SEPARATE, "worker-05", ("00000011",), "NodeD-CPU", datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC))],
            id="cpu-separate",
        ),
        pytest.param(
            "nodeinfo-preseparate-memory.json",
            [
                (
                    FaultLevel.PRE_SEPARATE,
                    "worker-06",
                    ("02000007",),
                    "NodeD-Memory",
                    datetime(2026, 1, 1, 1, 10, tzinfo=UTC),
                )
            ],
            id="memory-preseparate",
        ),
    ],
)
def test_noded_fixtures_and_deletion_clears(fixture: str, expected: list[tuple[object, ...]]) -> None:
    det = NodeInfoDetector(TABLE)
    cm = fixture_cm(fixture)
    res = det.update(cm, NOW)
    assert res.rejections == []
    got = [(f.level, f.node, f.codes, f.reason, f.signal_time) for f in res.faults]
    assert got == expected
    assert all(f.kind is FaultKind.NODE and f.check_code_ok for f in res.faults)
    assert not det.update(cm, NOW)
    gone = det.delete(cm.namespace, cm.name, NOW + timedelta(seconds=9))
    assert [c.fault for c in gone.cleared] == res.faults


def test_noded_status_only_and_change() -> None:
    det = NodeInfoDetector(TABLE)
    res = det.update(noded_cm([], "UnHealthy"), NOW)
    assert [(f.level, f.reason) for f in res.faults] == [(FaultLevel.SEPARATE, "NodeD-UnHealthy")]
    dev = {"DeviceType": "Disk", "DeviceId": 0, "FaultCode": ["0A000001"], "FaultLevel": "NotHandleFault"}
    res = det.update(noded_cm([dev], "Healthy", update="2026-01-01T07:59:30Z"), NOW)
    assert [(f.level, f.reason) for f in res.faults] == [(FaultLevel.NOT_HANDLE, "NodeD-Disk")]
    assert [c.fault.reason for c in res.cleared] == ["NodeD-UnHealthy"]


def _raw_noded(value: str, update: str = "2026-01-01T07:00:00Z") -> ConfigMapRecord:
    return factories.configmap(
        "mindx-dl-nodeinfo-w9", {"NodeInfo": value, "updateTime": update}, namespace="mindx-dl", uid="u"
    )


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        pytest.param(_raw_noded('{"NodeInfo":{"FaultDevList":['), "json-truncated", id="truncated"),
        pytest.param(_raw_noded("5"), "wrong-type", id="not-object"),
        pytest.param(_raw_noded('{"CheckCode":"x"}'), "missing-key", id="no-inner"),
        pytest.param(
            _raw_noded('{"NodeInfo":{"FaultDevList":[],"NodeStatus":"Healthy"},"CheckCode":"00"}'),
            "bad-check-code",
            id="bad-check-code",
        ),
        pytest.param(
            _raw_noded('{"NodeInfo":{"FaultDevList":[],"NodeStatus":"Healthy"}}'),
            "missing-check-code",
            id="no-check-code",
        ),
        pytest.param(noded_cm([], "Sick"), "unknown-node-status", id="unknown-status"),
        pytest.param(
            noded_cm(
                [{"DeviceType": "CPU", "DeviceId": 1, "FaultCode": ["zz"], "FaultLevel": "SeparateFault"}], "UnHealthy"
            ),
            "bad-code",
            id="bad-code",
        ),
        pytest.param(
            noded_cm(
                [{"DeviceType": "CPU", "DeviceId": 1, "FaultCode": ["00000011"], "FaultLevel": "Meh"}], "UnHealthy"
            ),
            "unknown-level",
            id="unknown-level",
        ),
        pytest.param(
            noded_cm([{"DeviceType": "CPU", "DeviceId": 1, "FaultCode": ["00000011"], "FaultLevel": ""}], "UnHealthy"),
            "empty-level",
            id="empty-level",
        ),
        pytest.param(
            noded_cm(
                [{"DeviceType": "CPU", "DeviceId": "1", "FaultCode": [], "FaultLevel": "SeparateFault"}], "UnHealthy"
            ),
            "wrong-type",
            id="device-id-string",
        ),
        pytest.param(noded_cm([], "UnHealthy", update="yesterday"), "bad-timestamp", id="bad-update-time"),
        pytest.param(noded_cm([], "UnHealthy", update="1999-01-01T00:00:00Z"), "bad-timestamp", id="absurd-time"),
        pytest.param(
            factories.configmap("mindx-dl-nodeinfo-w9", {}, namespace="mindx-dl", uid="u"), "missing-key", id="no-key"
        ),
        pytest.param(
            factories.configmap("nodeinfo", {}, namespace="mindx-dl", uid="u"), "unexpected-name", id="bad-name"
        ),
    ],
)
def test_noded_rejections(record: ConfigMapRecord, reason: str) -> None:
    det = NodeInfoDetector(TABLE)
    res = det.update(record, NOW)
    assert reason in {r.reason for r in res.rejections}
    assert det.update(record, NOW).rejections == []


def node(
    ready: str | None, since: datetime | None, *, taints: tuple[Taint, ...] = (), extra: tuple[NodeCondition, ...] = ()
) -> NodeRecord:
    conds = (NodeCondition("Ready", ready, "KubeletNotReady", since),) if ready else ()
    return factories.node("w1", uid="uid-n", conditions=conds + extra, taints=taints)


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        pytest.param(node("True", NOW), [], id="ready"),
        pytest.param(node("False", NOW - timedelta(seconds=2)), [], id="not-ready-within-grace"),
        pytest.param(node("False", NOW - timedelta(seconds=6)), ["NotReady"], id="not-ready-past-grace"),
        pytest.param(node("Unknown", NOW - timedelta(seconds=60)), ["NodeUnknown"], id="unknown-past-grace"),
        pytest.param(
            node(
                "Unknown",
                NOW - timedelta(seconds=1),
                taints=(Taint("node.kubernetes.io/unreachable", "", "NoExecute"),),
            ),
            [],
            id="unreachable-taint-within-grace",
        ),
        pytest.param(
            node(
                "Unknown",
                NOW - timedelta(seconds=6),
                taints=(Taint("node.kubernetes.io/unreachable", "", "NoExecute"),),
            ),
            ["NodeUnknown"],
            id="unreachable-taint-past-grace",
        ),
        pytest.param(
            node(
                "False", NOW - timedelta(seconds=1), taints=(Taint("node.kubernetes.io/not-ready", "", "NoSchedule"),)
            ),
            [],
            id="not-ready-taint-within-grace",
        ),
        pytest.param(
            node(None, None, taints=(Taint("node.kubernetes.io/not-ready", "", "NoSchedule"),)),
            [],
            id="not-ready-taint-without-condition-first-seen",
        ),
        pytest.param(
            node("True", NOW, taints=(Taint("node.kubernetes.io/unreachable", "", "NoExecute"),)),
            [],
            id="leftover-taint-on-ready-node",
        ),
        pytest.param(
            node("True", NOW, extra=(NodeCondition("KernelDeadlock", "True", "x", NOW),)),
            ["KernelDeadlock"],
            id="problem-condition",
        ),
        pytest.param(
            node("True", NOW, extra=(NodeCondition("KernelDeadlock", "False", "x", NOW),)),
            [],
            id="problem-condition-false",
        ),
        pytest.param(
            node("True", NOW, extra=(NodeCondition("OtherThing", "True", "x", NOW),)), [], id="unconfigured-condition"
        ),
    ],
)
def test_node_faults(record: NodeRecord, expected: list[str]) -> None:
    det = NodeDetector(not_ready_grace=timedelta(seconds=5), problem_condition_types=["KernelDeadlock"])
    res = det.update(record, NOW)
    assert [f.reason for f in res.faults] == expected
    assert all(f.kind is FaultKind.NODE and f.level is FaultLevel.SEPARATE for f in res.faults)


def test_node_grace_runs_out_on_tick_and_clears_when_ready() -> None:
    det = NodeDetector(not_ready_grace=timedelta(seconds=5), problem_condition_types=[])
    assert not det.update(node("False", NOW), NOW)
    assert not det.tick(NOW + timedelta(seconds=4))
    res = det.tick(NOW + timedelta(seconds=5))
    assert [(f.reason, f.signal_time) for f in res.faults] == [("NotReady", NOW)]
    assert det.down_nodes() == {"w1"}
    # taint arrives while down: same fault, nothing new
    assert not det.update(
        node("False", NOW, taints=(Taint("node.kubernetes.io/not-ready", "", "NoSchedule"),)),
        NOW + timedelta(seconds=6),
    )
    back = det.update(node("True", NOW + timedelta(seconds=30)), NOW + timedelta(seconds=30))
    assert [c.fault.reason for c in back.cleared] == ["NotReady"]
    assert det.down_nodes() == frozenset()


def test_a_short_not_ready_blip_with_the_controllers_taint_is_no_fault() -> None:
    """Issue 13 B5: the controller manager taints a node the moment Ready leaves True; a 1.7 s blip (taint
    included) stays within the grace and is no fault, while the same state past the grace is one."""
    det = NodeDetector(not_ready_grace=timedelta(seconds=5), problem_condition_types=[])
    taint = (Taint("node.kubernetes.io/not-ready", "", "NoSchedule"),)
    assert not det.update(node("True", NOW - timedelta(hours=1)), NOW)
    assert not det.update(node("False", NOW), NOW + timedelta(seconds=0.1))
    assert not det.update(node("False", NOW, taints=taint), NOW + timedelta(seconds=0.3))
    assert not det.tick(NOW + timedelta(seconds=1))
    back = det.update(node("True", NOW + timedelta(seconds=1.7), taints=taint), NOW + timedelta(seconds=1.7))
    assert not back.faults
    assert not back.cleared
    assert not det.tick(NOW + timedelta(seconds=10))
    assert det.down_nodes() == frozenset()
    # a taint on a node without a Ready condition counts from when it was first seen, after the grace
    det.update(node(None, None, taints=taint), NOW + timedelta(seconds=20))
    assert not det.tick(NOW + timedelta(seconds=24))
    assert [f.reason for f in det.tick(NOW + timedelta(seconds=25)).faults] == ["NotReadyTaint"]


def pod(
    *,
    phase: str = "Running",
    terms: tuple[ContainerTermination, ...] = (),
    disruption: str = "",
    status_reason: str = "",
    deleted: datetime | None = None,
    uid: str = "p1",
) -> PodRecord:
    return factories.pod(
        "job-worker-0",
        uid=uid,
        node="w1",
        phase=phase,
        ready=phase == "Running",
        job=None,
        terminations=terms,
        deletion_timestamp=deleted,
        disruption=disruption,
        status_reason=status_reason,
        created_at=NOW,
    )


FIN = NOW - timedelta(seconds=3)


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        pytest.param(pod(), [], id="running"),
        pytest.param(
            pod(phase="Failed", terms=(ContainerTermination("main", 1, "Error", FIN),)),
            [(FaultKind.BUSINESS, ("1",), "Error", FIN)],
            id="failed-exit-1",
        ),
        pytest.param(
            pod(terms=(ContainerTermination("main", 137, "OOMKilled", FIN),)),
            [(FaultKind.BUSINESS, ("137",), "OOMKilled", FIN)],
            id="oomkilled",
        ),
        pytest.param(
            pod(phase="Succeeded", terms=(ContainerTermination("main", 0, "Completed", FIN),)), [], id="exit-0"
        ),
        pytest.param(pod(phase="Failed"), [(FaultKind.BUSINESS, (), "Failed", NOW)], id="failed-no-container"),
        pytest.param(
            pod(phase="Failed", status_reason="Evicted", terms=(ContainerTermination("main", 137, "Error", FIN),)),
            [(FaultKind.DISRUPTION, (), "Evicted", NOW)],
            id="evicted-kept-apart",
        ),
        pytest.param(
            pod(disruption="PreemptionByScheduler"),
            [(FaultKind.DISRUPTION, (), "PreemptionByScheduler", NOW)],
            id="disruption-target",
        ),
    ],
)
def test_pod_faults(record: PodRecord, expected: list[tuple[object, ...]]) -> None:
    res = PodDetector(stuck_terminating=timedelta(seconds=30)).update(record, NOW)
    assert [(f.kind, f.codes, f.reason, f.signal_time) for f in res.faults] == expected
    assert all(f.pod is not None and f.pod.uid == record.uid and f.chips == ("Ascend910-0",) for f in res.faults)


def test_pod_stuck_terminating_on_down_node() -> None:
    det = PodDetector(stuck_terminating=timedelta(seconds=30))
    p = pod(deleted=NOW)
    assert not det.update(p, NOW, down_nodes={"w1"})
    assert not det.tick(NOW + timedelta(seconds=40), down_nodes=set())  # node fine: not stuck
    res = det.tick(NOW + timedelta(seconds=40), down_nodes={"w1"})
    assert [f.reason for f in res.faults] == ["StuckTerminating"]
    gone = det.delete(p, NOW + timedelta(seconds=50))
    assert [c.fault.reason for c in gone.cleared] == ["StuckTerminating"]


def test_pod_failure_reported_once_and_new_restart_is_new() -> None:
    det = PodDetector(stuck_terminating=timedelta(seconds=30))
    first = pod(terms=(ContainerTermination("main", 1, "Error", FIN),))
    assert len(det.update(first, NOW).faults) == 1
    assert not det.update(first, NOW + timedelta(seconds=1))
    later = pod(terms=(ContainerTermination("main", 1, "Error", NOW + timedelta(seconds=60)),))
    res = det.update(later, NOW + timedelta(seconds=61))
    assert len(res.faults) == 1
    assert len(res.cleared) == 1


@pytest.mark.parametrize(
    ("status", "level"),
    [
        pytest.param("UnHealthy", FaultLevel.SEPARATE, id="unhealthy"),
        pytest.param("PreSeparate", FaultLevel.PRE_SEPARATE, id="preseparate"),
    ],
)
def test_noded_status_is_not_hidden_by_milder_device_faults(status: str, level: FaultLevel) -> None:
    # MindCluster's scheduler takes a node whose NodeD NodeStatus is UnHealthy out of service whatever its
    # FaultDevList holds (internal/rescheduling/node.go setNodeHealthyByNodeD): a list of NotHandleFault entries
    # must not turn an UnHealthy node into one the agent never acts on.
    det = NodeInfoDetector(TABLE)
    dev = {"DeviceType": "CPU", "DeviceId": 1, "FaultCode": ["00000011"], "FaultLevel": "NotHandleFault"}
    res = det.update(noded_cm([dev], status), NOW)
    assert res.rejections == []
    assert max(f.level for f in res.faults) == level
    assert sorted((f.level, f.reason) for f in res.faults) == sorted(
        [(FaultLevel.NOT_HANDLE, "NodeD-CPU"), (level, f"NodeD-{status}")]
    )
    # the status goes back to Healthy with the same list: the status fault clears, the device fault stays
    res = det.update(noded_cm([dev], "Healthy", update="2026-01-01T07:59:30Z"), NOW)
    assert [c.fault.reason for c in res.cleared] == [f"NodeD-{status}"]
    assert res.faults == []
