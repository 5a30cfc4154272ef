"""The testbed's device plugin stand-in hands out no chip the real plugin withholds (issue 37 item 1): the chips of
the ConfigMap's ``-Unhealthy`` and ``-NetworkUnhealthy`` lists and of its ``ManuallySeparateNPU`` key, which the
real plugin keeps unhealthy after the chip's fault is gone (component/ascend-device-plugin
pkg/device/ascendcommon.go)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from testbed.inject import ChipFault, device_info_cm
from testbed.npu_plugin import withheld_chips

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _data(faults: tuple[ChipFault, ...] = (), manual: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = dict(device_info_cm("n1", faults, now=NOW)["data"])
    if manual is not None:
        data["ManuallySeparateNPU"] = manual
    return data


@pytest.mark.parametrize(
    ("data", "withheld"),
    [
        pytest.param(_data(), set(), id="healthy"),
        pytest.param(_data((ChipFault(3, ("80E18008",), "RestartNPU"),)), {"Ascend910-3"}, id="unhealthy-list"),
        pytest.param(_data(manual="Ascend910-5"), {"Ascend910-5"}, id="manually-separated-after-healing"),
        pytest.param(
            _data((ChipFault(1, ("80E18008",), "RestartNPU"),), manual="Ascend910-5, Ascend910-6"),
            {"Ascend910-1", "Ascend910-5", "Ascend910-6"},
            id="both",
        ),
        pytest.param({"DeviceInfoCfg": "{", "ManuallySeparateNPU": "Ascend910-2"}, {"Ascend910-2"}, id="torn-json"),
    ],
)
def test_withheld_chips(data: dict[str, Any], withheld: set[str]) -> None:
    assert withheld_chips(data) == withheld


def test_the_fixture_really_lists_the_fault_as_unhealthy() -> None:
    """The unhealthy-list case reads the Go encoder's own output, not a hand-written list."""
    cfg = json.loads(_data((ChipFault(3, ("80E18008",), "RestartNPU"),))["DeviceInfoCfg"])
    assert "Ascend910-3" in cfg["DeviceInfo"]["DeviceList"]["huawei.com/Ascend910-Unhealthy"]
