"""Which chip names a device ConfigMap may name for its node. Pure.

MindCluster's device plugin names a chip ``<run mode>-<physical id>``: the resource name without ``huawei.com/``
(``Ascend910``, ``Ascend310P``, ``npu``), a dash, and the chip's physical id, e.g. ``Ascend910-3``
(``component/ascend-device-plugin/pkg/device/ascendcommon.go``, ``convertLogicIDsToDeviceNames``); virtual NPUs
add core count and virtual id before it, ``Ascend910-2c-111-0`` (``pkg/common/device.go``, ``GetDeviceID``).
``ManuallySeparateNPU`` is a comma list of the same names, and the plugin itself ignores an entry that does not
match its pattern (``pkg/kubeclient/client_server.go``, ``GetManuallySeparateNPUFromDeviceInfo``).

A node with ``huawei.com/Ascend910: 8`` in its capacity has chips ``Ascend910-0`` … ``Ascend910-7``, and an id of
8 or more is a chip of it only when the plugin itself lists that name in its ``DeviceList``: ids are physical, so a
chip the driver failed to enumerate at boot leaves capacity 7 with ids up to 7 (the plugin names the chips it
manages, ascendcommon.go; MindCluster's scheduler plugin checks no name against the capacity). A name with another
prefix, an id of :data:`MAX_CHIPS_PER_NODE` or more, non-ASCII characters (lookalike digits, right-to-left marks,
emoji) or any other text is not a chip of that node, and a fault for it would be a fault for hardware that does not
exist.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

MAX_CHIPS_PER_NODE = 64
"""Chip ids at or above this are refused when the node's capacity is unknown (an Atlas A3 node has 16)."""
MAX_NAME_LENGTH = 64
_SHORT = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:-[0-9]{1,3}c)?", re.ASCII)
_VIRTUAL = re.compile(r".*-[0-9]{1,3}c", re.ASCII)
_ANY = re.compile(r"([A-Za-z][A-Za-z0-9]*(?:-[0-9]{1,3}c)?)-[0-9][0-9-]*", re.ASCII)
_ID = re.compile(r"0|[1-9][0-9]{0,3}", re.ASCII)
_VIRTUAL_ID = re.compile(r"(?:0|[1-9][0-9]{0,3})-(0|[1-9][0-9]{0,3})", re.ASCII)


@dataclass(frozen=True, slots=True)
class NodeChips:
    """What a Node says about its NPUs.

    Attributes:
        resource: the NPU resource in its status, e.g. ``huawei.com/Ascend910`` ("" when it has none).
        capacity: that resource's capacity (every chip, healthy or not), None when unknown.
    """

    resource: str = ""
    capacity: int | None = None


def short_name(resource: str) -> str:
    """``huawei.com/Ascend910`` → ``Ascend910`` (the part after the last ``/``)."""
    return resource.rsplit("/", 1)[-1]


class ChipNames:
    """Checks chip names for one node.

    Args:
        node: the node's name (for messages).
        prefixes: the resource prefixes the ConfigMap's ``DeviceList`` keys use (``huawei.com/Ascend910``).
        chips: the node's NPU resource and capacity; None when not known (then any sane prefix of `prefixes`
            is accepted, ids below :data:`MAX_CHIPS_PER_NODE`).

    With a known node resource, names must use its short name (or a virtual form of it); the id must be below
    the capacity when it is known and above 0, else below :data:`MAX_CHIPS_PER_NODE`; a name the plugin lists
    (`listed` of :meth:`valid`) only below :data:`MAX_CHIPS_PER_NODE`.
    """

    def __init__(self, node: str, prefixes: Iterable[str] = (), chips: NodeChips | None = None) -> None:
        self.node = node
        base = short_name(chips.resource) if chips is not None and chips.resource else ""
        shorts = {short_name(p) for p in prefixes}
        shorts = {s for s in shorts if _SHORT.fullmatch(s)}
        if base:
            shorts = {base} | {s for s in shorts if s == base or (s.startswith(base + "-") and _VIRTUAL.fullmatch(s))}
        self.shorts = frozenset(shorts)
        capacity = chips.capacity if chips is not None else None
        self.limit = capacity if capacity else MAX_CHIPS_PER_NODE
        self.capacity_known = bool(capacity)

    def valid(self, name: str, listed: Collection[str] = ()) -> bool:
        """True when `name` is a chip of this node. `listed`: the names the device plugin lists as its chips
        (agent.core.detect.deviceinfo.listed_chips); one of them may have an id at or above the capacity."""
        if not name or len(name) > MAX_NAME_LENGTH or not name.isascii():
            return False
        if self.shorts:
            candidates = [s for s in self.shorts if name.startswith(s + "-")]
        else:  # nothing known about the node or its keys: any sane prefix
            m = _ANY.fullmatch(name)
            candidates = [m.group(1)] if m else []
        for short in candidates:
            rest = name[len(short) + 1 :]
            if _VIRTUAL.fullmatch(short):
                m = _VIRTUAL_ID.fullmatch(rest)
                index = int(m.group(1)) if m else None
            else:
                index = int(rest) if _ID.fullmatch(rest) else None
            if index is not None and (index < self.limit or (index < MAX_CHIPS_PER_NODE and name in listed)):
                return True
        return False

    def rule(self) -> str:
        """The rule in words, for a rejection: ``Ascend910-<0..7>``."""
        names = "|".join(sorted(self.shorts)) or "<name>"
        if not self.capacity_known:
            return f"{names}-<0..{self.limit - 1}> (limit {self.limit})"
        listed = f"up to {MAX_CHIPS_PER_NODE - 1} if the plugin lists it"
        return f"{names}-<0..{self.limit - 1}> (capacity {self.limit}; {listed})"


def describe_bad_names(names: list[str], rule: ChipNames, shown: int = 3) -> str:
    """One line for a rejection: how many names were refused, the rule, and the first few (escaped)."""
    sample = ", ".join(ascii(n[:24]) for n in names[:shown])
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"{len(names)} name(s) are not chips of node {rule.node[:40]} ({rule.rule()}): {sample}{more}"
