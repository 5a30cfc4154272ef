"""GPU conditions (NVSentinel's, node-problem-detector's) → the agent's levels, codes and devices
(agent.core.detect.gpu), and NVSentinel's node marks. Shapes from NVSentinel's platform-connectors
(process_node_events.go) and syslog-health-monitor (xid_handler.go); the table from docs/nvsentinel.md."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support import factories

from agent.core.cluster import NodeCondition, NodeRecord
from agent.core.detect.gpu import (
    BUCKET_LEVEL,
    XID_BUCKETS,
    is_gpu_condition,
    nvsentinel_mark,
    read_gpu_condition,
    xid_bucket,
    xid_level,
)
from agent.core.detect.nodes import NodeDetector
from agent.core.faults import FaultKind, FaultLevel

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
UUID = "GPU-8f3c2a10-1b2c-4d5e-8f90-0123456789ab"


def nvsentinel_message(code: str, action: str, pci: str = "0000:3b:00", text: str = "XID {code}") -> str:
    """One entry as NVSentinel's connector writes it: ErrorCode, entities, text, Recommended Action, ';'."""
    return f"ErrorCode:{code} PCI:{pci} GPU:{UUID} {text.format(code=code)} Recommended Action={action};"


@pytest.mark.parametrize(
    ("xid", "level"),
    [
        pytest.param(48, FaultLevel.RESTART_NPU, id="48-dbe-reset-gpu"),
        pytest.param(79, FaultLevel.SEPARATE, id="79-fallen-off-bus-reboot"),
        pytest.param(13, FaultLevel.RESTART_BUSINESS, id="13-graphics-exception-restart-app"),
        pytest.param(31, FaultLevel.RESTART_BUSINESS, id="31-mmu-fault-restart-app"),
        pytest.param(43, FaultLevel.NOT_HANDLE, id="43-ignore"),
        pytest.param(45, FaultLevel.NOT_HANDLE, id="45-preemptive-cleanup-not-a-new-fault"),
        pytest.param(94, FaultLevel.RESTART_BUSINESS, id="94-contained-ecc-restart-app"),
        pytest.param(95, FaultLevel.RESTART_NPU, id="95-uncontained-ecc-reset-gpu"),
        pytest.param(74, FaultLevel.SEPARATE, id="74-nvlink-contact-support"),
        pytest.param(145, FaultLevel.SEPARATE, id="145-nvlink5"),
        pytest.param(119, FaultLevel.RESTART_NPU, id="119-gsp-timeout-reset-gpu"),
        pytest.param(151, FaultLevel.SEPARATE, id="151-restart-vm"),
        pytest.param(999, FaultLevel.SEPARATE, id="unknown-xid-separates"),
    ],
)
def test_xid_level_follows_the_catalogue_bucket(xid: int, level: FaultLevel) -> None:
    assert xid_level(xid) is level


def test_every_catalogue_bucket_has_a_level_and_each_xid_one_bucket() -> None:
    assert set(XID_BUCKETS) == set(BUCKET_LEVEL)
    seen: dict[int, str] = {}
    for bucket, xids in XID_BUCKETS.items():
        for xid in xids:
            assert xid not in seen, f"XID {xid} in {bucket} and {seen[xid]}"
            seen[xid] = bucket
    assert set(seen) == set(range(1, 163)), "the catalogue NVSentinel ships covers XIDs 1-162"
    assert xid_bucket(48) == "WORKFLOW_XID_48"
    assert xid_bucket(0) is None


@pytest.mark.parametrize(
    ("type_", "reason", "message", "level", "codes", "devices"),
    [
        pytest.param(
            "SysLogsXIDError", "SysLogsXIDErrorIsNotHealthy",
            nvsentinel_message("48", "COMPONENT_RESET"),
            FaultLevel.RESTART_NPU, ("XID-48",), ("PCI:0000:3b:00", f"GPU:{UUID}"),
            id="nvsentinel-xid48-component-reset",
        ),
        pytest.param(
            "SysLogsXIDError", "SysLogsXIDErrorIsNotHealthy",
            nvsentinel_message("48", "COMPONENT_RESET") + nvsentinel_message("79", "RESTART_BM", pci="0000:5e:00"),
            FaultLevel.SEPARATE, ("XID-48", "XID-79"), ("PCI:0000:3b:00", f"GPU:{UUID}", "PCI:0000:5e:00"),
            id="two-entries-most-severe-wins",
        ),
        pytest.param(
            "SysLogsXIDError", "SysLogsXIDErrorIsNotHealthy",
            nvsentinel_message("48", "RESTART_VM"),
            FaultLevel.SEPARATE, ("XID-48",), ("PCI:0000:3b:00", f"GPU:{UUID}"),
            id="reporters-action-beats-the-table",  # NVSentinel's override when it cannot map the GPU UUID
        ),
        pytest.param(
            "SysLogsXIDError", "SysLogsXIDErrorIsNotHealthy",
            "ErrorCode:145.RLW_REMAP PCI:0000:3b:00 NVLINK Recommended Action=CONTACT_SUPPORT;",
            FaultLevel.SEPARATE, ("XID-145.RLW_REMAP",), ("PCI:0000:3b:00",),
            id="nvl5-xid-with-subcode",
        ),
        pytest.param(
            "GPUProblem", "XidError48", "DBE",
            FaultLevel.RESTART_NPU, ("XID-48",), (),
            id="npd-style-xid-in-reason",
        ),
        pytest.param(
            "GPUProblem", "GPUXidError", f"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus {UUID}",
            FaultLevel.SEPARATE, ("XID-79",), ("PCI:0000:3b:00", f"GPU:{UUID}"),
            id="kernel-log-line-in-message",
        ),
        pytest.param(
            "GPUProblem", "GPUUnhealthy", "something is wrong",
            FaultLevel.SEPARATE, (), (),
            id="unclassified-gpu-problem-separates",
        ),
        pytest.param(
            "SysLogsGPUFallenOff", "SysLogsGPUFallenOffIsNotHealthy", "GPU fell off the bus;",
            FaultLevel.SEPARATE, (), (),
            id="fallen-off-check",
        ),
        pytest.param(
            "SysLogsSXIDError", "SysLogsSXIDErrorIsNotHealthy",
            "ErrorCode:24007 NVSWITCH:0 NVLink fatal Recommended Action=RESTART_BM;",
            FaultLevel.SEPARATE, ("SXID-24007",), ("NVSWITCH:0",),
            id="sxid-is-not-an-xid",
        ),
        pytest.param(
            "GpuMemWatch", "GpuMemWatchIsNotHealthy",
            f"ErrorCode:DCGM_FR_VOLATILE_DBE_DETECTED GPU:{UUID} DBE Recommended Action=COMPONENT_RESET;",
            FaultLevel.RESTART_NPU, ("DCGM_FR_VOLATILE_DBE_DETECTED",), (f"GPU:{UUID}",),
            id="dcgm-watch",
        ),
        pytest.param(
            "SysLogsXIDError", "SysLogsXIDErrorIsNotHealthy", nvsentinel_message("13", "NONE"),
            FaultLevel.NOT_HANDLE, ("XID-13",), ("PCI:0000:3b:00", f"GPU:{UUID}"),
            id="action-none-not-handled",
        ),
    ],
)  # fmt: skip
def test_read_gpu_condition(
    type_: str, reason: str, message: str, level: FaultLevel, codes: tuple[str, ...], devices: tuple[str, ...]
) -> None:
    got = read_gpu_condition(type_, reason, message)
    assert got.level is level
    assert got.codes == codes
    assert got.devices == devices
    assert got.detail.startswith(f"{reason}: ")


def test_detail_is_bounded() -> None:
    got = read_gpu_condition("SysLogsXIDError", "r", nvsentinel_message("48", "COMPONENT_RESET") * 50)
    assert len(got.detail) == 512
    assert len(got.devices) <= 16


@pytest.mark.parametrize(
    ("type_", "reason", "message", "expected"),
    [
        ("SysLogsXIDError", "", "", True),
        ("GPUProblem", "", "", True),
        ("VendorGpuCheck", "XidError79", "", True),
        ("VendorGpuCheck", "", "Recommended Action=RESTART_BM;", True),
        ("KernelDeadlock", "DockerHung", "task docker:7 blocked for more than 300 seconds", False),
        ("ReadonlyFilesystem", "FilesystemIsReadOnly", "Node condition ReadonlyFilesystem is now: True", False),
    ],
)
def test_is_gpu_condition(type_: str, reason: str, message: str, expected: bool) -> None:
    assert is_gpu_condition(type_, reason, message) is expected


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        pytest.param((("dgxc.nvidia.com/nvsentinel-state", "quarantined"),), (), "quarantined", id="state-label"),
        pytest.param((("dgxc.nvidia.com/nvsentinel-state", "draining"),), (), "draining", id="draining"),
        pytest.param(
            (("dgxc.nvidia.com/nvsentinel-state", "remediation-succeeded"),), (), "", id="remediated-is-released"
        ),
        pytest.param((("k8saas.nvidia.com/cordon-by", "NVSentinel"),), (), "cordon-by", id="cordon-by"),
        pytest.param((("k8saas.nvidia.com/cordon-by", "someone"),), (), "", id="cordoned-by-someone-else"),
        pytest.param((), (("quarantineHealthEventIsCordoned", "True"),), "IsCordoned", id="annotation"),
        pytest.param((("host-arch", "x86"),), (), "", id="no-mark"),
    ],
)
def test_nvsentinel_mark(
    labels: tuple[tuple[str, str], ...], annotations: tuple[tuple[str, str], ...], expected: str
) -> None:
    mark = nvsentinel_mark(labels, annotations)
    assert (expected in mark) if expected else mark == ""


def node(*conditions: NodeCondition) -> NodeRecord:
    ready = NodeCondition("Ready", "True", "KubeletReady", T0 - timedelta(hours=1), T0)
    return factories.node("gpu-0", uid="uid-0", conditions=(ready, *conditions), npu_allocatable=None)


def test_the_node_detector_gives_a_gpu_condition_its_level_codes_devices_and_detail() -> None:
    det = NodeDetector(not_ready_grace=timedelta(seconds=5), problem_condition_types=["SysLogsXIDError"])
    cond = NodeCondition(
        "SysLogsXIDError", "True", "SysLogsXIDErrorIsNotHealthy", T0, T0,
        message=nvsentinel_message("48", "COMPONENT_RESET", text="ROBUST_CHANNEL_GPU_ECC_DBE"),
    )  # fmt: skip
    (fault,) = det.update(node(cond), T0 + timedelta(seconds=1)).faults
    assert (fault.kind, fault.level, fault.reason) == (FaultKind.NODE, FaultLevel.RESTART_NPU, "SysLogsXIDError")
    assert fault.codes == ("XID-48",)
    assert fault.devices == ("PCI:0000:3b:00", f"GPU:{UUID}")
    assert "ROBUST_CHANNEL_GPU_ECC_DBE" in fault.detail
    assert fault.signal_time == T0


def test_a_non_gpu_problem_condition_keeps_separate_and_gains_its_words() -> None:
    det = NodeDetector(not_ready_grace=timedelta(seconds=5), problem_condition_types=["KernelDeadlock"])
    cond = NodeCondition("KernelDeadlock", "True", "DockerHung", T0, T0, message="task docker:7 blocked")
    (fault,) = det.update(node(cond), T0).faults
    assert (fault.level, fault.codes, fault.devices) == (FaultLevel.SEPARATE, (), ())
    assert fault.detail == "DockerHung: task docker:7 blocked"


def test_the_default_settings_read_gpu_conditions() -> None:
    from agent.core.detect.gpu import GPU_CONDITION_TYPES
    from agent.settings import Settings

    types = Settings.model_validate({}).detect.problem_condition_types
    assert set(GPU_CONDITION_TYPES) <= set(types)
    assert {"KernelDeadlock", "ReadonlyFilesystem", "NPUProblem"} <= set(types)


def test_the_default_problem_conditions_hold_every_nvsentinel_check() -> None:
    # agent.settings imports nothing of the agent, so its default spells NVSentinel's checks out again: keep them equal
    from agent.core.detect.gpu import NVSENTINEL_CHECKS
    from agent.settings import DetectSettings

    assert set(NVSENTINEL_CHECKS) <= set(DetectSettings().problem_condition_types)
