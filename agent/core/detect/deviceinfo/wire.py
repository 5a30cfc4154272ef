"""The device plugin ConfigMap's names and keys, and what its ``DeviceList`` keys and ``-Fault`` elements mean.

Format (MindCluster component/ascend-device-plugin, pkg/common/fault_code.go and pkg/device/ascendcommon.go; the
package docstring of agent.core.detect.deviceinfo has the whole shape): the ConfigMap ``mindx-dl-deviceinfo-<node>``
holds ``DeviceInfoCfg``, ``ManuallySeparateNPU`` and ``SwitchInfoCfg``; a ``DeviceList`` key is a resource prefix
plus one of :data:`DEVICE_LIST_SUFFIXES` (or none: the healthy chips). Pure; nothing here raises.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from agent.core.detect.common import split_list
from agent.core.detect.levels import UnknownKind
from agent.core.faults import FaultKind

DEVICE_INFO_PREFIX = "mindx-dl-deviceinfo-"
KEY_DEVICE_INFO = "DeviceInfoCfg"
KEY_MANUAL = "ManuallySeparateNPU"
KEY_SWITCH = "SwitchInfoCfg"

DEVICE_LIST_SUFFIXES = ("-NetworkUnhealthy", "-Unhealthy", "-Recovering", "-Fault")
"""The ``DeviceList`` key suffixes after the resource prefix: the comma lists and the ``-Fault`` JSON array."""
FAULT_TYPES: Mapping[str, tuple[FaultKind, UnknownKind]] = {
    "CardUnhealthy": (FaultKind.CHIP, "chip"),
    "CardNetworkUnhealthy": (FaultKind.NETWORK, "network"),
    "NodeUnhealthy": (FaultKind.NODE, "chip"),
    "PublicFault": (FaultKind.CHIP, "chip"),
}
"""A ``-Fault`` element's ``fault_type`` → the kind of fault and the unknown-code level it falls back to."""
HEALTHY_LEVELS = frozenset({"NormalNPU", "NormalNetwork"})
"""Levels the device plugin writes for a chip that is healthy again (fault_code.go ``NormalNPU``)."""
SECONDS_FAULT_TIME = frozenset({"PublicFault"})
"""``fault_type`` values whose ``fault_time`` is in seconds (ClusterD's public faults), not milliseconds."""
LEVEL_FIELDS = ("fault_handling", "large_model_fault_level", "fault_level")
"""The fields of a ``-Fault`` element that carry its level, in the order they are read (the first present wins)."""


def node_of(name: str, prefix: str = DEVICE_INFO_PREFIX) -> str | None:
    """The node name in ``<prefix><node>``, or None when `name` does not have that form."""
    if name.startswith(prefix) and len(name) > len(prefix):
        return name[len(prefix) :]
    return None


def resource_prefixes(device_list: Mapping[str, Any]) -> frozenset[str]:
    """The resource prefixes a ``DeviceList`` uses: its keys without their ``-Unhealthy`` etc. suffix."""
    return _prefixes_of(tuple(device_list))


@functools.lru_cache(maxsize=64)
def _prefixes_of(keys: tuple[str, ...]) -> frozenset[str]:
    # A node's plugin writes the same keys on every update: the split is done once per key set.
    out: set[str] = set()
    for key in keys:
        for suffix in DEVICE_LIST_SUFFIXES:
            if key.endswith(suffix):
                out.add(key[: -len(suffix)])
                break
        else:
            out.add(key)
    return frozenset(out)


def listed_chips(device_list: Mapping[str, Any]) -> frozenset[str]:
    """The chip names the device plugin lists in a ``DeviceList``: the comma lists of its resource key (healthy
    chips) and of its ``-Unhealthy``, ``-NetworkUnhealthy`` and ``-Recovering`` keys (MindCluster
    component/ascend-device-plugin/pkg/device/ascendcommon.go builds them from the chips it manages)."""
    out: set[str] = set()
    for key, value in device_list.items():
        if isinstance(value, str) and not key.endswith("-Fault"):
            out.update(split_list(value))
    return frozenset(out)
