"""A3 switch (UnifiedBus) faults: the device plugin's ``SwitchInfoCfg`` and ClusterD's ``cluster-info-switch-<x>``.

Format (MindCluster, repository Ascend/mind-cluster): the device plugin writes key ``SwitchInfoCfg`` of
``mindx-dl-deviceinfo-<node>`` (component/ascend-device-plugin/pkg/common/proto.go ``SwitchFaultInfo``, filled in
component/ascend-device-plugin/pkg/common/device.go ``GetSwitchFaultInfo``; no CheckCode)::

    {"FaultCode": [<string>, …] | null, "FaultLevel": str, "UpdateTime": <unix s>, "NodeStatus": str,
     "FaultTimeAndLevelMap": {"<code>_<switch chip>_<port>": {"fault_time": int, "fault_level": str}} | null}

Each ``FaultCode`` element is one switch event serialised into a string: ``{"EventType","AssembledFaultCode",
"PeerPortDevice","PeerPortId","SwitchChipId","SwitchPortId","Severity","Assertion","AlarmRaisedTime"}``, whose
``AssembledFaultCode`` (e.g. ``[0x00f103b0,155907,na,na]``) is the code of component/ascend-device-plugin/build/
SwitchFaultCode.json. ``FaultLevel`` is the most severe event's level in the switch vocabulary ``NotHandle`` <
``SubHealthFault`` < ``RestartRequest`` < ``PreSeparate`` < ``Separate`` ("" with no event) and ``NodeStatus`` is
derived from it (``Healthy``, ``SubHealthy``, ``PreSeparate``, ``UnHealthy`` for RestartRequest and Separate). A
plugin with switch faults off writes the zero value (``FaultCode: null``, ``UpdateTime: 0``, empty strings): no
fault, no rejection. ClusterD's ``cluster-info-switch-<x>`` entries are the same fields plus ``CmName``
(component/clusterd/pkg/common/constant/type.go ``SwitchInfoFromCM``, keyed ``mindx-dl-switchinfo-<node>``).

One node fault per switch object (kind NODE, reason ``SwitchFault``, codes = the events' ``AssembledFaultCode``
as written): its level is the most severe of ``FaultLevel``, the events' ``fault_level`` and ``NodeStatus`` where
``UnHealthy`` counts as SeparateNPU, because MindCluster's scheduler takes a node whose switch status is UnHealthy
out of service (component/ascend-for-volcano/internal/rescheduling/node.go ``setNodeHealthyBySwitch``). Switch
levels map onto the chip scale: NotHandle → NotHandleFault, SubHealthFault, RestartRequest, PreSeparate →
PreSeparateNPU, Separate → SeparateNPU. Events with ``Assertion`` 0 (a recovery) are not faults. The signal time is
``UpdateTime``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

import orjson

from agent.core.detect.common import DetectResult, Identity, Rejections, json_type, unix_time
from agent.core.detect.diff import View, clear_all, diff_views
from agent.core.detect.levels import LevelTable
from agent.core.detect.nesting import too_deep, too_deep_message
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef

NodeFinder = Callable[[str], object | None]
"""Node name → something when that Node exists, None when it does not (the device detector's NodeLookup is one)."""

SWITCH_REASON = "SwitchFault"
SWITCH_INFO_PREFIX = "mindx-dl-switchinfo-"
"""ClusterD's name for a node's switch entry (component/clusterd/pkg/common/constant/configmap.go)."""

SWITCH_LEVELS: Mapping[str, FaultLevel] = MappingProxyType(
    {
        "NotHandle": FaultLevel.NOT_HANDLE,
        "SubHealthFault": FaultLevel.SUB_HEALTH,
        "RestartRequest": FaultLevel.RESTART_REQUEST,
        "PreSeparate": FaultLevel.PRE_SEPARATE,
        "Separate": FaultLevel.SEPARATE,
    }
)
STATUS_LEVELS: Mapping[str, FaultLevel | None] = MappingProxyType(
    {
        "Healthy": None,
        "SubHealthy": FaultLevel.SUB_HEALTH,
        "PreSeparate": FaultLevel.PRE_SEPARATE,
        "UnHealthy": FaultLevel.SEPARATE,
    }
)
_RECOVER = 0


def _switch_level(value: object, what: str, rej: Rejections) -> FaultLevel | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        rej.add("wrong-type", f"{what}: expected string, got {json_type(value)}")
        return None
    level = SWITCH_LEVELS.get(value.strip())
    if level is None:
        rej.add("unknown-level", f"{what}: {value[:40]!r} is not a switch level")
    return level


def _event_code(raw: object, what: str, rej: Rejections) -> str | None:
    """The ``AssembledFaultCode`` of one ``FaultCode`` element (a JSON object in a string), None to skip it."""
    event: object = raw
    if isinstance(raw, str):
        text = raw.strip()
        if not text.startswith("{"):
            return text or None  # a bare code string: read as the code itself
        try:
            event = orjson.loads(text)
        except orjson.JSONDecodeError as e:
            rej.add("too-deep" if "depth" in e.msg else "json-invalid", f"{what}: {e.msg} at {e.pos}")
            return None
        if too_deep(event):
            rej.add("too-deep", f"{what}: {too_deep_message()}")
            return None
    if not isinstance(event, dict):
        rej.add("wrong-type", f"{what}: expected a JSON object in a string, got {json_type(event)}")
        return None
    if event.get("Assertion") == _RECOVER:
        return None
    code = event.get("AssembledFaultCode")
    if not isinstance(code, str) or not code.strip():
        rej.add("missing-key", f"{what}.AssembledFaultCode missing or not a string")
        return None
    return code.strip()


def parse_switch_info(
    obj: Mapping[str, Any],
    node: str,
    source: ObjectRef,
    table: LevelTable,
    base_time: datetime,
    now: datetime,
    rej: Rejections,
    *,
    what: str = "SwitchInfoCfg",
) -> dict[Identity, Fault]:
    """Read one parsed switch object (``SwitchInfoCfg`` or a ClusterD switch entry) into at most one node fault.

    Args:
        base_time: the signal time when ``UpdateTime`` is missing or 0.

    Returns:
        identity → Fault (empty when the switch reports nothing). Rejections: ``wrong-type``, ``json-invalid``,
        ``missing-key`` (an event without ``AssembledFaultCode``), ``unknown-level``, ``unknown-node-status``,
        ``bad-timestamp``. Never raises.
    """
    raw = obj.get("FaultCode")
    if raw is None:
        raw = []
    elif isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        rej.add("wrong-type", f"{what}.FaultCode: expected array, got {json_type(raw)}")
        raw = []
    codes = tuple(sorted({c for i, r in enumerate(raw) if (c := _event_code(r, f"{what}.FaultCode[{i}]", rej))}))
    levels = [lvl for lvl in (_switch_level(obj.get("FaultLevel"), f"{what}.FaultLevel", rej),) if lvl is not None]
    tl_map = obj.get("FaultTimeAndLevelMap")
    if isinstance(tl_map, dict):
        for key, entry in tl_map.items():
            if isinstance(entry, dict):
                lvl = _switch_level(entry.get("fault_level"), f"{what}.FaultTimeAndLevelMap[{str(key)[:40]}]", rej)
                if lvl is not None and codes:
                    levels.append(lvl)
    elif tl_map is not None:
        rej.add("wrong-type", f"{what}.FaultTimeAndLevelMap: expected object, got {json_type(tl_map)}")
    status = obj.get("NodeStatus")
    if status is not None and status != "":
        if not isinstance(status, str):
            rej.add("wrong-type", f"{what}.NodeStatus: expected string, got {json_type(status)}")
        elif status not in STATUS_LEVELS:
            rej.add("unknown-node-status", f"{what}.NodeStatus {status[:40]!r}")
        elif (slvl := STATUS_LEVELS[status]) is not None:
            levels.append(slvl)
    if not codes and not levels:
        return {}
    if not codes and max(levels) is FaultLevel.NOT_HANDLE:
        return {}
    level = max(levels) if levels else table.resolve(codes, None, {}, "switch", "switch")
    signal = base_time
    ut = obj.get("UpdateTime")
    if ut not in (None, 0):
        signal = unix_time(ut, 1, f"{what}.UpdateTime", now, rej) or base_time
    fault = Fault(FaultKind.NODE, level, node, (), codes, signal, now, source, SWITCH_REASON, True)
    return {("switch", codes): fault}


class SwitchInfoDetector:
    """Keeps the last view of every switch entry (ClusterD ``cluster-info-switch-<x>``) and diffs updates.

    Entries are keyed by (namespace, entry name); the node is the entry name after ``mindx-dl-switchinfo-``.

    Args:
        table: the level table.
        nodes: the Node lookup of :class:`agent.core.detect.deviceinfo.DeviceInfoDetector` (only whether the Node
            exists matters here); None: no Node is consulted. An entry whose Node does not exist is rejected as
            ``unknown-node`` (once, until the Node appears) and yields no faults (those it reported before
            clear); at ClusterD's next write after the Node appeared or went the entry is read again, even
            unchanged, and :meth:`recheck` reads it again at once.
    """

    def __init__(self, table: LevelTable, *, nodes: NodeFinder | None = None):
        self.table = table
        self.nodes = nodes
        self._views: dict[tuple[str, str], tuple[object, View]] = {}
        self._unknown: set[tuple[str, str]] = set()  # entries whose Node did not exist when last read
        self._bad_names: set[tuple[str, str]] = set()  # entries not named mindx-dl-switchinfo-<node>, reported

    def _exists(self, name: str) -> bool:
        """Whether the Node of entry `name` exists (True without a lookup)."""
        return self.nodes is None or self.nodes(name[len(SWITCH_INFO_PREFIX) :]) is not None

    def update_entry(self, namespace: str, name: str, entry: object, now: datetime, source: ObjectRef) -> DetectResult:
        """Read one switch entry; an entry equal to the previous one costs a compare. Never raises.

        Rejections: ``unexpected-name`` (not ``mindx-dl-switchinfo-<node>``), ``wrong-type`` (not an object),
        ``unknown-node`` (no such Node, see the class), plus :func:`parse_switch_info`'s.
        """
        out = DetectResult()
        key = (namespace, name)
        prev = self._views.get(key)
        if prev is not None and prev[0] == entry and (key in self._unknown) != self._exists(name):
            return out  # unchanged, and its Node neither appeared nor went since
        rej = Rejections(source)
        if not name.startswith(SWITCH_INFO_PREFIX) or len(name) == len(SWITCH_INFO_PREFIX):
            if key not in self._bad_names:  # once, not at every ClusterD rewrite of the chunk
                self._bad_names.add(key)
                rej.add("unexpected-name", f"{name[:80]!r} is not {SWITCH_INFO_PREFIX}<node>")
            out.rejections = rej.items
            return out
        if not isinstance(entry, dict):
            rej.add("wrong-type", f"{name[:80]}: expected object, got {json_type(entry)}")
            out.rejections = rej.items
            return out
        node = name[len(SWITCH_INFO_PREFIX) :]
        if not self._exists(name):
            if key not in self._unknown:  # once per entry until its Node appears
                rej.add("unknown-node", f"node {node[:80]!r} does not exist: its switch entry is not acted on")
            self._unknown.add(key)
            if prev is not None:
                clear_all(prev[1], now, source, out)
            out.rejections = rej.items
            self._views[key] = (entry, {})
            return out
        self._unknown.discard(key)
        faults = parse_switch_info(entry, node, source, self.table, now, now, rej, what=name[:80])
        view, fresh = diff_views(prev[1] if prev else {}, faults, now, source, out)
        out.faults.extend(view[i].fault for i in fresh)
        out.rejections = rej.items
        self._views[key] = (entry, view)
        return out

    def recheck(self, namespace: str, name: str, now: datetime, source: ObjectRef) -> DetectResult:
        """Read the entry as last read again, because its Node appeared or went (see the class); nothing when there
        is no such entry or its Node's existence has not changed."""
        prev = self._views.get((namespace, name))
        return DetectResult() if prev is None else self.update_entry(namespace, name, prev[0], now, source)

    def delete(self, namespace: str, name: str, now: datetime, source: ObjectRef) -> DetectResult:
        """The entry is gone (ClusterD dropped it, or its ConfigMap was deleted): its fault clears."""
        out = DetectResult()
        prev = self._views.pop((namespace, name), None)
        self._unknown.discard((namespace, name))
        self._bad_names.discard((namespace, name))
        if prev is not None:
            clear_all(prev[1], now, source, out)
        return out
