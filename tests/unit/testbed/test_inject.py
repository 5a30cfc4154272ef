"""The testbed's fault injector writes what the device plugin and NodeD write: its ConfigMaps (encoded by Go,
testbed/mcencode, independently of the agent's parsers) verify in the agent's detectors, and the faults read back
are the ones injected."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support import factories

from agent.core.detect import DeviceInfoDetector, NodeInfoDetector, load_shipped_table
from agent.core.faults import FaultKind, FaultLevel
from testbed.inject import (
    ChipFault,
    InjectError,
    Injector,
    PublicFault,
    SwitchFault,
    check_chip_fault,
    check_public_fault,
    check_switch_fault,
    device_info_cm,
    node_info_cm,
    public_fault_cm,
)

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_node_info_check_code_matches_the_real_fixture() -> None:
    real = json.loads((FIXTURES / "nodeinfo-unhealthy-cpu.json").read_text())
    ours = node_info_cm("worker-05", ["00000011"], "SeparateFault", now=NOW)
    assert json.loads(ours["data"]["NodeInfo"]) == json.loads(real["data"]["NodeInfo"])


@pytest.mark.parametrize(
    ("faults", "expected"),
    [
        pytest.param([ChipFault(3)], {("Ascend910-3", FaultKind.CHIP, FaultLevel.SEPARATE)}, id="one-chip"),
        pytest.param(
            [ChipFault(0, ("80E18005",), "RestartNPU"), ChipFault(5, ("80E3A201", "80E21007"))],
            {
                ("Ascend910-0", FaultKind.CHIP, FaultLevel.RESTART_NPU),
                ("Ascend910-5", FaultKind.CHIP, FaultLevel.SEPARATE),
            },
            id="two-chips-multi-code",
        ),
        pytest.param(
            [ChipFault(2, ("81078603",), "PreSeparateNPU", "CardNetworkUnhealthy")],
            {("Ascend910-2", FaultKind.NETWORK, FaultLevel.PRE_SEPARATE)},
            id="network",
        ),
        pytest.param([], set(), id="healthy"),
    ],
)
def test_device_info_round_trips_through_the_agents_detector(
    faults: list[ChipFault], expected: set[tuple[str, FaultKind, FaultLevel]]
) -> None:
    cm = device_info_cm("node-a", faults, now=NOW - timedelta(seconds=5))
    detector = DeviceInfoDetector(load_shipped_table())
    result = detector.update_data(cm["metadata"]["namespace"], cm["metadata"]["name"], cm["data"], NOW)
    assert result.rejections == []
    assert all(f.check_code_ok for f in result.faults)
    assert {(f.chips[0], f.kind, f.level) for f in result.faults} == expected
    assert all(f.node == "node-a" for f in result.faults)


def test_two_faults_of_one_chip_written_within_one_second_are_two_occurrences() -> None:
    """The device plugin's ``fault_time`` is in milliseconds; the injector's was the write's whole second, so a
    chip faulting again within the second of its last fault (a fast restart between them) carried the same fault
    time, and the agent's flap count, which counts an occurrence once per fault time, saw one fault where two were
    injected (CI at 8f9a268: tests/e2e/test_flapping_chip.py never saw the third fault isolate the chip)."""
    times = []
    for offset_ms in (200, 700):
        at = NOW + timedelta(milliseconds=offset_ms)
        cm = device_info_cm("node-a", [ChipFault(3)], now=at)
        result = DeviceInfoDetector(load_shipped_table()).update_data(
            cm["metadata"]["namespace"], cm["metadata"]["name"], cm["data"], NOW + timedelta(seconds=1)
        )
        assert result.rejections == []
        (fault,) = result.faults
        times.append(fault.signal_time)
    assert times == [NOW + timedelta(milliseconds=200), NOW + timedelta(milliseconds=700)]


class _RecordingRest:
    """A stand-in for testbed.rest.Rest that answers every request and records its method and path."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        self.calls.append((method, path))
        return {}

    def get(self, path: str) -> Any:
        return self.request("GET", path)


def test_a_chip_fault_lowers_allocatable_before_the_device_plugin_reports_it() -> None:
    """The agent restarts a pod within milliseconds of the ConfigMap; with allocatable lowered only after it, the
    scheduler could place the replacement on the faulty chip first (CI, fresh clone of 8f9a268: tests/e2e/
    test_process_recovery.py::test_unplaceable_replacement_pod_escalates_to_exactly_one_whole_job_restart saw the
    replacement Running on the faulty node 0.4 s after the fault instead of Pending)."""
    rest = _RecordingRest()
    injector = Injector(rest, clock=lambda: NOW)  # type: ignore[arg-type]
    injector.chip_fault("node-a", [ChipFault(3)])
    writes = [(m, p) for m, p in rest.calls if m != "GET"]
    assert writes == [
        ("PATCH", "/api/v1/nodes/node-a/status"),
        ("PUT", "/api/v1/namespaces/kube-system/configmaps/mindx-dl-deviceinfo-node-a"),
    ]


def test_node_info_round_trips_through_the_agents_detector() -> None:
    cm = node_info_cm("node-b", ["00000011"], "SeparateFault", now=NOW - timedelta(seconds=5))
    detector = NodeInfoDetector(load_shipped_table())
    result = detector.update_data(cm["metadata"]["namespace"], cm["metadata"]["name"], cm["data"], NOW)
    assert result.rejections == []
    assert [(f.kind, f.level, f.node) for f in result.faults] == [(FaultKind.NODE, FaultLevel.SEPARATE, "node-b")]


@pytest.mark.parametrize(
    ("fault", "fragment"),
    [
        pytest.param(ChipFault(8), "out of range 0-7", id="chip-8"),
        pytest.param(ChipFault(-1), "out of range 0-7", id="chip-negative"),
        pytest.param(ChipFault(0, ("XYZ",)), "not 8 hexadecimal digits", id="code-not-hex"),
        pytest.param(ChipFault(0, ("80E3A2011",)), "not 8 hexadecimal digits", id="code-too-long"),
        pytest.param(ChipFault(0, level="Bogus"), "is not one of", id="level-unknown"),
    ],
)
def test_injector_refuses_faults_no_plugin_reports(fault: ChipFault, fragment: str) -> None:
    with pytest.raises(InjectError, match=fragment):
        check_chip_fault(fault)


@pytest.mark.parametrize("pause", [-5.0, float("nan"), 1e9])
def test_flap_refuses_a_bad_pause_before_writing_anything(pause: float) -> None:
    from testbed.inject import Injector

    class NoWrites:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"the injector called rest.{name} for an invalid request")

    with pytest.raises(InjectError, match="pause must be 0 to 3600 seconds"):
        Injector(NoWrites()).flapping_chip("node-1", 0, 1, pause_s=pause)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["nodes", "-3"], "count from 1 to 10000"),
        (["nodes", "0"], "count from 1 to 10000"),
        (["inject", "pod-failed", "a/b/c"], "needs NAMESPACE/POD"),
        (["inject", "pod-failed", "/pod"], "needs NAMESPACE/POD"),
        (["up", "--dir", "/etc/hostname"], "is not a directory"),
        (["inject", "chip", "节点", "3"], "node name '节点' is not a Kubernetes name"),
        (["inject", "node", "Node_1"], "node name 'Node_1' is not a Kubernetes name"),
        (["inject", "many", "node-0", "node-1."], "node name 'node-1.'"),
        (["inject", "ready", "a" * 254], "at most 253 characters"),
        (["inject", "pod-failed", "Bad NS/pod"], "pod namespace 'Bad NS' is not a Kubernetes namespace"),
        (["inject", "pod-failed", "ns/Pod 1"], "pod name 'Pod 1'"),
        (["inject", "public", "node-0", "--namespace", "x" * 64], "at most 63 characters"),
        (["nodes", "2", "--prefix", "Node "], "--prefix 'Node 0'"),
        (["clusterd", "--namespace", "Bad NS!"], "--namespace 'Bad NS!' is not a Kubernetes namespace"),
    ],
)
def test_testbed_cli_refuses_bad_arguments(
    argv: list[str], fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from testbed.__main__ import main

    if "--dir" not in argv:
        argv = [*argv, "--dir", str(tmp_path / "none")]
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["inject", "chip", "node-0.rack-1", "3"],
        ["inject", "pod-failed", "mindx-dl/job-0-worker-1"],
        ["inject", "many", "node-0", "node-1"],
        ["clusterd", "--namespace", "mindx-dl"],
        ["nodes", "2"],
    ],
)
def test_testbed_cli_accepts_kubernetes_names(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from testbed.__main__ import main

    assert main([*argv, "--dir", str(tmp_path / "none")]) == 1  # past the checks: no testbed in that folder
    assert "Kubernetes" not in capsys.readouterr().err


def test_testbed_down_where_nothing_runs_is_done(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`down` twice (or in an empty folder) is not an error: there is nothing left to stop."""
    from testbed.__main__ import main

    assert main(["down", "--dir", str(tmp_path / "none")]) == 0
    assert "nothing to stop" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("events", "level"),
    [
        pytest.param([SwitchFault()], FaultLevel.SEPARATE, id="separate"),
        pytest.param(
            [SwitchFault(level="PreSeparate"), SwitchFault(port=4, level="SubHealthFault")],
            FaultLevel.PRE_SEPARATE,
            id="preseparate",
        ),
        pytest.param([], None, id="healthy-switch"),
    ],
)  # fmt: skip
def test_switch_faults_written_by_the_injector_are_node_faults_to_the_agent(
    events: list[SwitchFault], level: FaultLevel | None
) -> None:
    cm = device_info_cm("node-a3", [ChipFault(2)], now=NOW - timedelta(seconds=5), switch=events)
    assert "SwitchInfoCfg" in cm["data"]
    detector = DeviceInfoDetector(load_shipped_table())
    result = detector.update_data(cm["metadata"]["namespace"], cm["metadata"]["name"], cm["data"], NOW)
    assert result.rejections == []
    switch = [(f.kind, f.level, f.codes) for f in result.faults if f.reason == "SwitchFault"]
    codes = tuple(sorted({e.code for e in events}))
    assert switch == ([] if level is None else [(FaultKind.NODE, level, codes)])
    assert [f.chips for f in result.faults if f.kind is FaultKind.CHIP] == [("Ascend910-2",)]  # kept beside it


def test_a_node_without_switch_info_has_no_switch_key() -> None:
    assert "SwitchInfoCfg" not in device_info_cm("node-a2", now=NOW)["data"]


def test_public_faults_written_by_the_injector_reach_the_agent() -> None:
    from agent.core.detect import PublicFaultDetector

    faults = [
        PublicFault("node-p", chips=(1, 3)),
        PublicFault("node-q", "110001002", "Node", (), fault_id="fault-id-0002"),
    ]
    cm = public_fault_cm("mon-faults", "mindx-dl", faults, now=NOW - timedelta(seconds=5))
    assert cm["metadata"]["labels"] == {"mc-consumer-publicfault": "true"}
    rec = factories.configmap(
        "mon-faults", cm["data"], namespace="mindx-dl", uid="uid", labels=tuple(cm["metadata"]["labels"].items())
    )
    result = PublicFaultDetector(load_shipped_table()).update(rec, NOW)
    assert result.rejections == []
    assert sorted((f.node, f.kind, f.chips, f.codes) for f in result.faults) == [
        ("node-p", FaultKind.CHIP, ("Ascend910-1", "Ascend910-3"), ("220001001",)),
        ("node-q", FaultKind.NODE, (), ("110001002",)),
    ]


@pytest.mark.parametrize(
    ("check", "fragment"),
    [
        pytest.param(lambda: check_switch_fault(SwitchFault(level="SeparateNPU")), "not one of", id="chip-level"),
        pytest.param(lambda: check_switch_fault(SwitchFault(port=-1)), "non-negative", id="port"),
        pytest.param(lambda: check_public_fault(PublicFault("n", code="80E3A201")), "not 9 characters", id="code"),
        pytest.param(lambda: check_public_fault(PublicFault("n", fault_type="Chip")), "public fault type", id="type"),
        pytest.param(lambda: check_public_fault(PublicFault("n", assertion="maybe")), "assertion", id="assertion"),
        pytest.param(lambda: check_public_fault(PublicFault("n", fault_id="short")), "8 to 128", id="fault-id"),
        pytest.param(lambda: check_public_fault(PublicFault("n", chips=(8,))), "out of range", id="chip"),
        pytest.param(lambda: device_info_cm("n", [ChipFault(9)], now=NOW), "out of range 0-7", id="go-refuses-chip"),
        pytest.param(lambda: node_info_cm("n", level="Broken", now=NOW), "not a NodeD level", id="go-refuses-level"),
    ],
)  # fmt: skip
def test_injector_refuses_switch_and_public_faults_no_component_writes(check: Any, fragment: str) -> None:
    with pytest.raises(InjectError, match=fragment):
        check()
