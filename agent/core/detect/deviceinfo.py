"""Device plugin ConfigMaps (``mindx-dl-deviceinfo-<node>`` in kube-system): chip, network and switch faults.

Format (DOMAIN.md §1.1, MindCluster device plugin): key ``DeviceInfoCfg`` holds
``{"DeviceInfo":{"DeviceList":{...},"UpdateTime":<unix s>},"SuperPodID":int,"ServerIndex":int,"CheckCode":hex}``.
``DeviceList`` maps ``<prefix>``, ``<prefix>-Unhealthy``, ``<prefix>-NetworkUnhealthy``, ``<prefix>-Recovering``
(comma lists of chip names) and ``<prefix>-Fault`` (a JSON array inside the string) to strings; the prefix is
whatever the keys use (``huawei.com/Ascend910``, ``huawei.com/npu``, …). Other keys of the ConfigMap:
``ManuallySeparateNPU`` (comma list of chips isolated until an operator clears them) and ``SwitchInfoCfg`` (A3
switch faults, read leniently: ``FaultCode`` list or comma string, ``FaultLevel``, ``UpdateTime`` s, ``NodeStatus``).

Faults produced (``Fault.reason`` in brackets):
- one per ``-Fault`` element: ``CardUnhealthy`` → chip, ``CardNetworkUnhealthy`` → network, ``NodeUnhealthy`` →
  node; signal time = earliest ``fault_time`` (ms) of its codes, else ``UpdateTime``;
- chips listed in ``-Unhealthy`` / ``-NetworkUnhealthy`` with no ``-Fault`` element (older plugins, or a broken
  ``-Fault`` string): a chip fault at the unknown-chip level / a network fault at the unknown-network level;
- chips only in ``-Recovering``: a chip fault at NotHandleFault [Recovering], recorded and published but never a
  reason to restart: the device plugin is hot-resetting that chip itself. MindCluster's rescheduler reads only
  ``-Unhealthy``/``-NetworkUnhealthy``/``-Fault`` for fault jobs; ``-Recovering`` chips are merely dropped from
  the schedulable list (component/ascend-for-volcano/common/k8s/cmmgr.go, ``util.GetRecoveringDevInfo`` in
  common/util/util.go);
- ``ManuallySeparateNPU``: chip faults at ManuallySeparateNPU [ManuallySeparateNPU];
- ``SwitchInfoCfg`` with a fault: a node fault [SwitchFault] (:mod:`agent.core.detect.switchinfo`).

``-Fault`` variants (MindCluster component/ascend-device-plugin/pkg/common/fault_code.go and
component/clusterd/pkg/application/faultmanager/cmprocess/publicfault/pub_fault_processor.go): ``fault_type:
PublicFault`` (a public fault ClusterD joined into the node's list) is a chip fault [PublicFault] whose
``fault_time`` is in seconds (component/clusterd/pkg/application/publicfault/fault_collector.go), not
milliseconds; an element at ``NormalNPU`` / ``NormalNetwork`` is healthy and gives no fault; codes may be 9
digits (public and UnifiedBus codes) besides 8 hex digits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.checkcode import go_map, verify_check_code
from agent.core.detect.chips import ChipNames, NodeChips, describe_bad_names
from agent.core.detect.common import (
    MAX_VALUE_BYTES,
    DetectResult,
    Identity,
    Rejections,
    is_code,
    json_type,
    parse_codes,
    parse_json,
    parse_level,
    plugin_code,
    split_list,
    unix_time,
)
from agent.core.detect.diff import Seen, View, clear_all, diff_views
from agent.core.detect.flapping import FLAPPING_SUFFIX, FlapTracker
from agent.core.detect.levels import LevelTable, UnknownKind
from agent.core.detect.switchinfo import parse_switch_info
from agent.core.faults import Fault, FaultCleared, FaultKind, FaultLevel, ObjectRef

DEVICE_INFO_PREFIX = "mindx-dl-deviceinfo-"
KEY_DEVICE_INFO = "DeviceInfoCfg"
KEY_MANUAL = "ManuallySeparateNPU"
KEY_SWITCH = "SwitchInfoCfg"

_SUFFIXES = ("-NetworkUnhealthy", "-Unhealthy", "-Recovering", "-Fault")
_FAULT_TYPES: Mapping[str, tuple[FaultKind, UnknownKind]] = {
    "CardUnhealthy": (FaultKind.CHIP, "chip"),
    "CardNetworkUnhealthy": (FaultKind.NETWORK, "network"),
    "NodeUnhealthy": (FaultKind.NODE, "chip"),
    "PublicFault": (FaultKind.CHIP, "chip"),
}
_HEALTHY_LEVELS = frozenset({"NormalNPU", "NormalNetwork"})
"""Levels the device plugin writes for a chip that is healthy again (fault_code.go ``NormalNPU``)."""
_SECONDS_FAULT_TIME = frozenset({"PublicFault"})
_LEVEL_FIELDS = ("fault_handling", "large_model_fault_level", "fault_level")

OnMismatch = Literal["use", "ignore"]
NodeLookup = Callable[[str], NodeChips | None]
"""Node name → its NPU resource and capacity, or None when no such Node exists."""


def resource_prefixes(device_list: Mapping[str, Any]) -> frozenset[str]:
    """The resource prefixes a ``DeviceList`` uses: its keys without their ``-Unhealthy`` etc. suffix."""
    return _prefixes_of(tuple(device_list))


@functools.lru_cache(maxsize=64)
def _prefixes_of(keys: tuple[str, ...]) -> frozenset[str]:
    # A node's plugin writes the same keys on every update: the split is done once per key set.
    out: set[str] = set()
    for key in keys:
        for suffix in _SUFFIXES:
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


@functools.lru_cache(maxsize=4096)
def chip_names(node: str, prefixes: frozenset[str], chips: NodeChips | None) -> ChipNames:
    """The (immutable) chip-name rule of `node` for these ``DeviceList`` prefixes and its Node's NPUs, built once
    per combination: the device plugin rewrites each node's ConfigMap every few seconds with the same keys."""
    return ChipNames(node, prefixes, chips)


def max_faults(names: ChipNames) -> int:
    """The most faults one device ConfigMap can mean for its node: a chip, a network and a recovering fault per
    chip, plus a few node-wide ones. More is not a real report; the most severe this many are kept."""
    return 3 * names.limit + 8


@dataclass(slots=True)
class DeviceSnapshot:
    """What one read of a device ConfigMap said.

    Attributes:
        node: node name taken from the ConfigMap name.
        update_time: ``UpdateTime`` (None when missing or bad).
        check_code_ok: the CheckCode matched the DeviceInfo content.
        device_list: the raw ``DeviceList`` map (for the fast path), None when unreadable.
        faults: identity → Fault, before diffing.
        broken_prefixes: resource prefixes whose ``-Fault`` string was unreadable (their chips come from the lists).
        unchanged: the DeviceList equals the previous one; `faults` was not computed.
    """

    node: str
    update_time: datetime | None = None
    check_code_ok: bool = True
    device_list: dict[str, Any] | None = None
    faults: dict[Identity, Fault] = field(default_factory=dict)
    broken_prefixes: set[str] = field(default_factory=set)
    unchanged: bool = False


def node_of(name: str, prefix: str = DEVICE_INFO_PREFIX) -> str | None:
    """The node name in ``<prefix><node>``, or None when `name` does not have that form."""
    if name.startswith(prefix) and len(name) > len(prefix):
        return name[len(prefix) :]
    return None


def _add(faults: dict[Identity, Fault], ident: Identity, fault: Fault) -> None:
    prev = faults.get(ident)
    if prev is None or fault.level > prev.level:
        faults[ident] = fault


class _Reader:
    """One parse of one device ConfigMap's data."""

    def __init__(
        self,
        source: ObjectRef,
        node: str,
        table: LevelTable,
        now: datetime,
        rej: Rejections,
        names: ChipNames | None = None,
        bad_names: list[str] | None = None,
        device_list: Mapping[str, Any] | None = None,
    ):
        self.source = source
        self.node = node
        self.table = table
        self.now = now
        self.rej = rej
        self.names = names or ChipNames(node)
        self.bad_names: list[str] = [] if bad_names is None else bad_names
        self.listing = device_list  # the DeviceList as read (for listed_chips)
        self._listed: frozenset[str] | None = None

    def is_chip(self, name: str) -> bool:
        """Whether `name` is a chip of this node: by the Node's capacity, or listed by the plugin itself in its
        ``DeviceList`` (see :meth:`agent.core.detect.chips.ChipNames.valid`; read only for a name the capacity
        refuses). The lists count only while they name no more chips than the capacity: a node's chips with a
        gap in their ids, not a list of garbage."""
        if self.names.valid(name):
            return True
        if not self.listing:
            return False
        if self._listed is None:
            listed = listed_chips(self.listing)
            self._listed = listed if len(listed) <= self.names.limit else frozenset()
        return self.names.valid(name, self._listed)

    def chips(self, names: Iterable[str]) -> list[str]:
        """The names that are chips of this node; the others are noted in `bad_names` (one rejection later)."""
        out: list[str] = []
        for name in names:
            if self.is_chip(name):
                out.append(name)
            else:
                self.bad_names.append(name)
        return out

    def fault(
        self,
        kind: FaultKind,
        level: FaultLevel,
        chips: tuple[str, ...],
        codes: tuple[str, ...],
        signal: datetime,
        reason: str,
        ok: bool,
    ) -> Fault:
        return Fault(kind, level, self.node, chips, codes, signal, self.now, self.source, reason, ok)

    def fault_element(self, el: object, prefix: str, base_time: datetime, ok: bool, snap: DeviceSnapshot) -> None:
        what = f"{prefix}-Fault[]"
        rej = self.rej
        if not isinstance(el, dict):
            rej.add("wrong-type", f"{what}: expected object, got {json_type(el)}")
            return
        ftype = el.get("fault_type")
        kind_unknown = _FAULT_TYPES.get(ftype) if isinstance(ftype, str) else None
        if kind_unknown is None:
            rej.add("unknown-fault-type", f"{what}.fault_type: {str(ftype)[:40]!r}; read as CardUnhealthy")
            kind_unknown = _FAULT_TYPES["CardUnhealthy"]
            ftype = "CardUnhealthy"
        kind, unknown = kind_unknown
        name = el.get("npu_name", "")
        if not isinstance(name, str):
            rej.add("wrong-type", f"{what}.npu_name: expected string, got {json_type(name)}")
            name = ""
        name = name.strip()
        if not name and kind is not FaultKind.NODE:
            rej.add("missing-key", f"{what}: npu_name is missing or empty")
            return
        if name and not self.is_chip(name):
            self.bad_names.append(name)
            if kind is not FaultKind.NODE:
                return
            name = ""  # a node-wide fault stays one, whatever chip it names
        reported: FaultLevel | None = None
        for fld in _LEVEL_FIELDS:
            if fld in el:
                if isinstance(el[fld], str) and el[fld].strip() in _HEALTHY_LEVELS:
                    return
                reported = parse_level(el[fld], f"{what}.{fld}", rej)
                break
        else:
            rej.add("missing-key", f"{what}: no fault_handling/large_model_fault_level/fault_level")
        raw_codes = el.get("fault_code", "")
        if isinstance(raw_codes, str):
            codes = parse_codes(split_list(raw_codes), f"{what}.fault_code", rej, plugin=True)
        elif isinstance(raw_codes, list):
            codes = parse_codes(raw_codes, f"{what}.fault_code", rej, plugin=True)
        else:
            rej.add("wrong-type", f"{what}.fault_code: expected string, got {json_type(raw_codes)}")
            codes = ()
        by_code: dict[str, FaultLevel] = {}
        signal: datetime | None = None
        tl_map = el.get("fault_time_and_level_map")
        if tl_map is not None and not isinstance(tl_map, dict):
            rej.add("wrong-type", f"{what}.fault_time_and_level_map: expected object, got {json_type(tl_map)}")
        elif tl_map:
            for code, entry in tl_map.items():
                cwhat = f"{what}.fault_time_and_level_map[{str(code)[:12]}]"
                if not isinstance(entry, dict):
                    rej.add("wrong-type", f"{cwhat}: expected object, got {json_type(entry)}")
                    continue
                ucode = code.strip().upper()
                if not is_code(ucode):  # the 8-digit form first: the common case, no second look
                    ucode = plugin_code(ucode) or ucode
                entry_level = entry.get("fault_level")
                if isinstance(entry_level, str) and entry_level.strip() in _HEALTHY_LEVELS:
                    continue
                if "fault_level" in entry:
                    lvl = parse_level(entry["fault_level"], f"{cwhat}.fault_level", rej)
                    if lvl is not None:
                        by_code[ucode] = lvl
                if "fault_time" in entry:
                    unit = 1 if ftype in _SECONDS_FAULT_TIME else 1000
                    t = unix_time(entry["fault_time"], unit, f"{cwhat}.fault_time", self.now, rej)
                    if t is not None and (signal is None or t < signal):
                        signal = t
        level = self.table.resolve(codes, reported, by_code, unknown)
        chips = (name,) if name else ()
        reason = ftype if isinstance(ftype, str) else "CardUnhealthy"
        fault = self.fault(kind, level, chips, codes, signal or base_time, reason, ok)
        _add(snap.faults, ("fault", kind.value, chips, codes), fault)

    def device_list(self, dl: dict[str, Any], base_time: datetime, ok: bool, snap: DeviceSnapshot) -> None:
        lists: dict[str, dict[str, list[str]]] = {}
        fault_strings: dict[str, str] = {}
        for key, value in dl.items():
            if not isinstance(value, str):
                self.rej.add("wrong-type", f"DeviceList[{key[:60]}]: expected string, got {json_type(value)}")
                continue
            for suffix in _SUFFIXES:
                if key.endswith(suffix):
                    prefix = key[: -len(suffix)]
                    if suffix == "-Fault":
                        fault_strings[prefix] = value
                    else:
                        lists.setdefault(prefix, {})[suffix] = self.chips(split_list(value))
                    break
        for prefix, text in fault_strings.items():
            arr = parse_json(text, f"{prefix}-Fault", self.rej) if text.strip() else []
            if arr is None:
                snap.broken_prefixes.add(prefix)
                continue
            if not isinstance(arr, list):
                self.rej.add("wrong-type", f"{prefix}-Fault: expected array, got {json_type(arr)}")
                snap.broken_prefixes.add(prefix)
                continue
            for el in arr:
                self.fault_element(el, prefix, base_time, ok, snap)
        covered: dict[FaultKind, set[str]] = {FaultKind.CHIP: set(), FaultKind.NETWORK: set()}
        for f in snap.faults.values():
            if f.kind in covered:
                covered[f.kind].update(f.chips)
        unknown_chip = self.table.unknown["chip"]
        unknown_net = self.table.unknown["network"]
        for by_suffix in lists.values():
            for chip in by_suffix.get("-Unhealthy", ()):
                if chip not in covered[FaultKind.CHIP]:
                    f = self.fault(FaultKind.CHIP, unknown_chip, (chip,), (), base_time, "CardUnhealthy", ok)
                    _add(snap.faults, ("list", FaultKind.CHIP.value, chip), f)
            for chip in by_suffix.get("-NetworkUnhealthy", ()):
                if chip not in covered[FaultKind.NETWORK]:
                    f = self.fault(FaultKind.NETWORK, unknown_net, (chip,), (), base_time, "CardNetworkUnhealthy", ok)
                    _add(snap.faults, ("list", FaultKind.NETWORK.value, chip), f)
            unhealthy = set(by_suffix.get("-Unhealthy", ()))
            for chip in by_suffix.get("-Recovering", ()):
                if chip not in covered[FaultKind.CHIP] and chip not in unhealthy:
                    # NotHandle, not RestartNPU: a hot reset in progress is the plugin's own repair, not a fault
                    # that justifies restarting the job (MindCluster reschedules nothing for it either).
                    f = self.fault(FaultKind.CHIP, FaultLevel.NOT_HANDLE, (chip,), (), base_time, "Recovering", ok)
                    _add(snap.faults, ("recovering", chip), f)

    def manual(self, text: str, base_time: datetime) -> dict[Identity, Fault]:
        out: dict[Identity, Fault] = {}
        if len(text) > MAX_VALUE_BYTES:  # the apiserver's own limit; each name is checked, so no less is needed
            self.rej.add("value-too-large", f"{KEY_MANUAL}: {len(text)} characters")
            return out
        for chip in self.chips(split_list(text)):
            f = self.fault(
                FaultKind.CHIP, FaultLevel.MANUALLY_SEPARATE, (chip,), (), base_time, "ManuallySeparateNPU", True
            )
            out[("manual", chip)] = f
        return out

    def switch(self, text: str, base_time: datetime) -> dict[Identity, Fault]:
        out: dict[Identity, Fault] = {}
        if not text.strip():
            return out
        obj = parse_json(text, KEY_SWITCH, self.rej)
        if obj is None:
            return out
        if not isinstance(obj, dict):
            self.rej.add("wrong-type", f"{KEY_SWITCH}: expected object, got {json_type(obj)}")
            return out
        return parse_switch_info(obj, self.node, self.source, self.table, base_time, self.now, self.rej)


@dataclass(slots=True)
class _State:
    cfg: str | Mapping[str, Any] | None  # a dict for ClusterD entries (kept for set_table)
    manual: str | None
    switch: str | None
    device_list: dict[str, Any] | None
    update_time: datetime | None
    check_code_ok: bool
    dev_view: View
    side_view: View
    rejections: frozenset[tuple[str, str]]
    resource_version: str = ""


def parse_device_info(
    cfg: str | Mapping[str, Any],
    node: str,
    source: ObjectRef,
    table: LevelTable,
    now: datetime,
    rej: Rejections,
    *,
    previous_list: Mapping[str, Any] | None = None,
    chips: NodeChips | None = None,
    bad_names: list[str] | None = None,
    check_code: bool = True,
) -> DeviceSnapshot:
    """Parse a ``DeviceInfoCfg`` value (the JSON text, or an already parsed object of the same shape).

    When the ``DeviceList`` equals `previous_list`, classification is skipped and ``snap.unchanged`` is set
    (the CheckCode and UpdateTime are still read). With `check_code` False there is no CheckCode to verify
    (ClusterD's flat entries: ClusterD verified the per-node hash before aggregating) and none is expected.

    Chip names are checked against the node (agent.core.detect.chips.ChipNames with `chips`, the Node's NPU resource
    and capacity, when known): an entry naming no chip of the node is skipped (a node-wide fault is kept
    without the name). The names refused go to `bad_names` when given (the caller reports them with its own);
    otherwise they make one ``bad-chip-name`` rejection. At most :func:`max_faults` faults are kept (the most
    severe), the rest make one ``too-many-faults`` rejection.

    Returns:
        The snapshot; what could not be read is in `rej` (reasons: ``value-too-large``, ``json-truncated``,
        ``json-invalid``, ``wrong-type``, ``missing-key``, ``bad-check-code``, ``missing-check-code``,
        ``bad-timestamp``, ``unknown-level``, ``empty-level``, ``unknown-fault-type``, ``bad-code``). Never raises.
    """
    snap = DeviceSnapshot(node)
    obj = parse_json(cfg, KEY_DEVICE_INFO, rej) if isinstance(cfg, str) else cfg
    if obj is None:
        return snap
    if not isinstance(obj, Mapping):
        rej.add("wrong-type", f"{KEY_DEVICE_INFO}: expected object, got {json_type(obj)}")
        return snap
    info = obj.get("DeviceInfo")
    if not isinstance(info, dict):
        rej.add(
            "missing-key" if info is None else "wrong-type", f"{KEY_DEVICE_INFO}.DeviceInfo missing or not an object"
        )
        return snap
    dl = info.get("DeviceList")
    null_list = "DeviceList" in info and dl is None  # Go reads null as an empty (nil) map: no chips, healthy
    if not isinstance(dl, dict) and not null_list:
        rej.add("missing-key" if dl is None else "wrong-type", "DeviceInfo.DeviceList missing or not an object")
        dl = None
    ut_raw = info.get("UpdateTime")
    if ut_raw is None:
        rej.add("missing-key", "DeviceInfo.UpdateTime is missing")
    else:
        snap.update_time = unix_time(ut_raw, 1, "DeviceInfo.UpdateTime", now, rej)
    code = obj.get("CheckCode")
    if not check_code:
        pass
    elif not isinstance(code, str) or not code:
        rej.add("missing-check-code", f"{KEY_DEVICE_INFO}.CheckCode missing or not a string")
        snap.check_code_ok = False
    elif not verify_check_code(
        {"DeviceList": go_map(dl) if dl is not None else None, "UpdateTime": 0 if ut_raw is None else ut_raw}, code
    ):
        rej.add("bad-check-code", f"CheckCode {code[:64]} does not match the DeviceInfo content")
        snap.check_code_ok = False
    if null_list:
        dl = {}
    if dl is None:
        return snap
    snap.device_list = dl
    if previous_list is not None and dl == previous_list:
        snap.unchanged = True
        return snap
    names = chip_names(node, resource_prefixes(dl), chips)
    reader = _Reader(source, node, table, now, rej, names, bad_names, dl)
    reader.device_list(dl, snap.update_time or now, snap.check_code_ok, snap)
    if bad_names is None and reader.bad_names:
        rej.add("bad-chip-name", describe_bad_names(reader.bad_names, names))
    snap.faults = bounded(snap.faults, max_faults(names), rej)
    return snap


def bounded(faults: dict[Identity, Fault], limit: int, rej: Rejections) -> dict[Identity, Fault]:
    """`faults` when there are at most `limit`; else the `limit` most severe (a ``too-many-faults`` rejection)."""
    if len(faults) <= limit:
        return faults
    keep = sorted(faults.items(), key=lambda item: item[1].level, reverse=True)[:limit]
    rej.add("too-many-faults", f"{len(faults)} faults in one ConfigMap; the {limit} most severe are kept")
    return dict(keep)


_NONE_SEEN: frozenset[tuple[str, str]] = frozenset()
"""The rejections remembered for a ConfigMap that had none: one object shared by every such ConfigMap."""


class DeviceInfoDetector:
    """Keeps the last view of every device ConfigMap and turns updates into new and cleared faults.

    Args:
        table: the level table (swap it with :meth:`set_table` when the fault config changes).
        on_mismatch: ``"use"`` the data of a ConfigMap whose CheckCode does not match (faults carry
            ``check_code_ok=False``), or ``"ignore"`` such an update (keep the previous view). Both reject it
            once as ``bad-check-code`` (settings: detect.check_code_mismatch).
        flapping: escalates chips that fault repeatedly; None disables it.
        name_prefix: ConfigMap name prefix before the node name.
        fast_path: skip unchanged content cheaply (off only to measure the benchmark's baseline).
        nodes: looks up the ConfigMap's Node (its NPU resource and capacity); None: no Node is consulted and chip
            names are only checked for their form. A ConfigMap whose Node does not exist is rejected as
            ``unknown-node`` and yields no faults (those it reported before are cleared); call :meth:`recheck`
            when the Node appears, goes or changes its capacity.
        check_code: the content carries a CheckCode to verify (False for ClusterD's flat entries).

    Fast paths: an update whose ``DeviceInfoCfg``, ``ManuallySeparateNPU`` and ``SwitchInfoCfg`` strings are
    unchanged costs three string compares; a rewrite with a new ``UpdateTime`` but the same ``DeviceList`` costs
    one JSON parse and the CheckCode, not the classification.
    """

    def __init__(
        self,
        table: LevelTable,
        *,
        on_mismatch: OnMismatch = "use",
        flapping: FlapTracker | None = None,
        name_prefix: str = DEVICE_INFO_PREFIX,
        fast_path: bool = True,
        nodes: NodeLookup | None = None,
        check_code: bool = True,
    ):
        self.nodes = nodes
        self.table = table
        self.fast_path = fast_path
        self.check_code = check_code
        self.on_mismatch = on_mismatch
        self.flapping = flapping
        self.name_prefix = name_prefix
        self._state: dict[tuple[str, str], _State] = {}
        self._bad_names: set[tuple[str, str]] = set()
        # clears of an isolated (flapping) chip's faults, held until the chip is released (see tick)
        self._held: dict[Any, FaultCleared] = {}
        # ConfigMaps whose views hold a fault with a code under a FaultDuration rule (what tick looks at)
        self._timed: set[tuple[str, str]] = set()

    def __len__(self) -> int:
        return len(self._state)

    def update(self, cm: ConfigMapRecord, now: datetime) -> DetectResult:
        """Read a new version of a device ConfigMap (added or modified); returns what changed. Never raises.

        Rejections besides :func:`parse_device_info`'s: ``unexpected-name`` (not ``mindx-dl-deviceinfo-<node>``:
        the object is skipped), ``missing-key`` (no ``DeviceInfoCfg``), ``unknown-node`` (no such Node: no
        faults), and one ``bad-chip-name`` for every name of the update that is not a chip of the node (the
        ``-Fault`` elements, the lists and ``ManuallySeparateNPU`` together). Each new write reports its
        rejections, even when they read as the previous write's did; a re-read of content already seen
        (:meth:`set_table`, :meth:`recheck`, ClusterD's embedded objects) does not repeat them.
        """
        return self.update_data(cm.namespace, cm.name, cm.data, now, uid=cm.uid, resource_version=cm.resource_version)

    def update_data(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, Any],
        now: datetime,
        *,
        uid: str = "",
        source: ObjectRef | None = None,
        replay: bool = False,
        resource_version: str = "",
    ) -> DetectResult:
        """As :meth:`update`, from the ConfigMap's `data` dict (values normally str; ClusterD may embed objects).
        `replay`: the content is read again, not newly written (its known rejections are not repeated), as is
        a write whose `resource_version` is the previous one's."""
        out = DetectResult()
        key = (namespace, name)
        src = source or ObjectRef("ConfigMap", namespace, name, uid)
        cfg = data.get(KEY_DEVICE_INFO)
        manual = data.get(KEY_MANUAL)
        switch = data.get(KEY_SWITCH)
        prev = self._state.get(key)
        if (
            self.fast_path
            and prev is not None
            and isinstance(cfg, str)
            and cfg == prev.cfg
            and manual == prev.manual
            and switch == prev.switch
        ):
            return out
        rej = Rejections(src)
        node = node_of(name, self.name_prefix)
        if node is None:
            if key not in self._bad_names:
                self._bad_names.add(key)
                rej.add("unexpected-name", f"{name[:80]!r} is not {self.name_prefix}<node>")
            out.rejections = rej.items
            return out
        replay = (
            replay
            or isinstance(cfg, dict)
            or (bool(resource_version) and prev is not None and prev.resource_version == resource_version)
        )
        chips: NodeChips | None = None
        if self.nodes is not None:
            chips = self.nodes(node)
            if chips is None:
                return self._unknown_node(key, resource_version, src, node, data, prev, now, rej, out, replay)
        bad_names: list[str] = []
        base_view: View = prev.dev_view if prev else {}
        dev_view = base_view
        device_list = prev.device_list if prev else None
        update_time = prev.update_time if prev else None
        check_ok = prev.check_code_ok if prev else True
        fresh_all: list[tuple[View, Identity]] = []
        if cfg is None:
            rej.add("missing-key", f"{KEY_DEVICE_INFO} is missing")
        elif not isinstance(cfg, (str, dict)):
            rej.add("wrong-type", f"{KEY_DEVICE_INFO}: expected string, got {json_type(cfg)}")
        elif prev is not None and cfg == prev.cfg:
            pass
        else:
            previous_list = prev.device_list if self.fast_path and prev is not None else None
            snap = parse_device_info(
                cfg,
                node,
                src,
                self.table,
                now,
                rej,
                previous_list=previous_list,
                chips=chips,
                bad_names=bad_names,
                check_code=self.check_code,
            )
            if snap.unchanged and prev is not None and snap.check_code_ok != prev.check_code_ok:
                rej = Rejections(src)  # the CheckCode verdict flipped: classify again so faults carry it
                bad_names.clear()
                snap = parse_device_info(
                    cfg, node, src, self.table, now, rej, chips=chips, bad_names=bad_names, check_code=self.check_code
                )
            if not snap.check_code_ok and self.on_mismatch == "ignore":
                pass
            elif snap.unchanged:
                update_time, device_list = snap.update_time, snap.device_list
            elif snap.device_list is not None or prev is None:
                new = snap.faults
                if snap.broken_prefixes and prev is not None:
                    new = self._carry_over(new, prev.dev_view)
                dev_view, fresh = diff_views(base_view, new, now, src, out)
                fresh_all.extend((dev_view, i) for i in fresh)
                update_time, device_list, check_ok = snap.update_time, snap.device_list, snap.check_code_ok
        side_base: View = prev.side_view if prev else {}
        side_view = side_base
        names = chip_names(node, resource_prefixes(device_list or {}), chips)
        if prev is None or manual != prev.manual or switch != prev.switch:
            reader = _Reader(src, node, self.table, now, rej, names, bad_names, device_list)
            t = update_time or now
            side: dict[Identity, Fault] = {}
            if isinstance(manual, str):
                side.update(reader.manual(manual, t))
            elif manual is not None:
                rej.add("wrong-type", f"{KEY_MANUAL}: expected string, got {json_type(manual)}")
            if isinstance(switch, str):
                side.update(reader.switch(switch, t))
            elif switch is not None:
                rej.add("wrong-type", f"{KEY_SWITCH}: expected string, got {json_type(switch)}")
            side_view, fresh = diff_views(side_base, bounded(side, max_faults(names), rej), now, src, out)
            fresh_all.extend((side_view, i) for i in fresh)
        for view, ident in fresh_all:
            seen = view[ident]
            fault = self.flapping.observe(seen.fault) if self.flapping else seen.fault
            if fault is not seen.fault:
                view[ident] = Seen(seen.level, fault)
            self._held.pop(fault.key, None)  # the chip faults again: the held clear is superseded
            out.faults.append(fault)
        self._hold_isolated(out, now)
        if bad_names:
            rej.add("bad-chip-name", describe_bad_names(bad_names, names))
        seen_rej = self._report(rej, prev, out, replay)
        self._state[key] = _State(
            cfg if isinstance(cfg, (str, dict)) else None,
            manual if isinstance(manual, str) else None,
            switch if isinstance(switch, str) else None,
            device_list,
            update_time,
            check_ok,
            dev_view,
            side_view,
            seen_rej,
            resource_version,
        )
        self._note_timed(key, dev_view, side_view)
        return out

    def _note_timed(self, key: tuple[str, str], *views: View) -> None:
        rules = self.flapping.rules.duration if self.flapping is not None else None
        if rules and any(c in rules for view in views for seen in view.values() for c in seen.fault.codes):
            self._timed.add(key)
        else:
            self._timed.discard(key)

    def delete(self, namespace: str, name: str, now: datetime, *, uid: str = "") -> DetectResult:
        """The ConfigMap was deleted: every fault it reported is cleared."""
        out = DetectResult()
        prev = self._state.pop((namespace, name), None)
        self._timed.discard((namespace, name))
        self._bad_names.discard((namespace, name))  # a bad name that comes back is reported again
        if prev is not None:
            src = ObjectRef("ConfigMap", namespace, name, uid)
            clear_all(prev.dev_view, now, src, out)
            clear_all(prev.side_view, now, src, out)
            self._hold_isolated(out, now)
        return out

    def _hold_isolated(self, out: DetectResult, now: datetime) -> None:
        """Tell the flap tracker what cleared, and keep back the clears of an isolated chip's faults: the chip
        stays out (its fault active) until :meth:`tick` finds it released."""
        if self.flapping is None or not out.cleared:
            return
        kept: list[FaultCleared] = []
        for c in out.cleared:
            f = c.fault
            self.flapping.cleared(f, now)
            if f.reason.endswith(FLAPPING_SUFFIX) and self.flapping.is_isolated(f.node, f.chips):
                if not any(n.key == f.key for n in out.faults):  # not re-raised in the same update
                    self._held[f.key] = c
                continue
            kept.append(c)
        out.cleared = kept

    def tick(self, now: datetime) -> DetectResult:
        """Time-based flapping (agent.core.detect.flapping): the held clears of chips released at `now`, and faults
        still active past a ``FaultDuration`` rule's timeout, cleared and raised again at the rule's level (the
        result's `cleared` come before its `faults` of the same key: emit them in that order)."""
        out = DetectResult()
        if self.flapping is None:
            return out
        released = set(self.flapping.released(now))
        for key, c in list(self._held.items()):
            if not self.flapping.is_isolated(c.fault.node, c.fault.chips) or released.intersection(
                (c.fault.node, chip) for chip in c.fault.chips
            ):
                del self._held[key]
                out.cleared.append(FaultCleared(c.fault, now, c.source))
        if not self.flapping.rules.duration:
            return out
        for key in list(self._timed):
            st = self._state.get(key)
            if st is None:
                self._timed.discard(key)
                continue
            for view in (st.dev_view, st.side_view):
                for ident, seen in list(view.items()):
                    level = self.flapping.duration_level(seen.fault, now)
                    if level is None or level <= seen.fault.level:
                        continue
                    new = replace(seen.fault, level=level, observed_at=now)
                    view[ident] = Seen(seen.level, new)
                    out.cleared.append(FaultCleared(seen.fault, now, seen.fault.source))
                    out.faults.append(new)
        return out

    def set_table(self, table: LevelTable, now: datetime) -> DetectResult:
        """Use a new level table (fault config reloaded) and re-classify every known ConfigMap with it.

        Faults whose level changed are cleared and emitted again at the new level.
        """
        self.table = table
        if self.flapping is not None:
            self.flapping.set_rules(table.customization)
        out = DetectResult()
        for (ns, name), st in list(self._state.items()):
            data: dict[str, Any] = {}
            if st.cfg is not None:
                data[KEY_DEVICE_INFO] = st.cfg
            if st.manual is not None:
                data[KEY_MANUAL] = st.manual
            if st.switch is not None:
                data[KEY_SWITCH] = st.switch
            self._state[(ns, name)] = _State(
                None, None, None, None, st.update_time, st.check_code_ok, st.dev_view, st.side_view, st.rejections
            )
            src = next((s.fault.source for s in (*st.dev_view.values(), *st.side_view.values())), None)
            out.extend(self.update_data(ns, name, data, now, source=src, replay=True))
        return out

    def recheck(self, cm: ConfigMapRecord, now: datetime) -> DetectResult:
        """Read `cm` again because its Node appeared, went, or changed its NPU capacity: its faults follow what
        the chip names mean for the node now (a Node that appeared makes them count, one that went clears them).
        Rejections already reported for the same content are not repeated."""
        self.forget_content(cm.namespace, cm.name)
        return self.update_data(cm.namespace, cm.name, cm.data, now, uid=cm.uid, replay=True)

    def forget_content(self, namespace: str, name: str) -> None:
        """Forget the content last read for ConfigMap (or ClusterD entry) `name`, keeping its faults and the
        rejections it reported, so that the next read of the same content classifies it again (against a Node that
        changed: :meth:`recheck`, agent.core.detect.clusterd.ClusterDDetector.recheck)."""
        key = (namespace, name)
        st = self._state.get(key)
        if st is not None:  # the fast path and the unchanged-content check compare these
            self._state[key] = _State(
                None, None, None, None, st.update_time, st.check_code_ok, st.dev_view, st.side_view, st.rejections
            )

    @staticmethod
    def _report(rej: Rejections, prev: _State | None, out: DetectResult, replay: bool) -> frozenset[tuple[str, str]]:
        """Put this update's rejections on `out` (a replay drops those the previous read already reported);
        returns what to remember as reported."""
        seen = frozenset((r.reason, r.detail) for r in rej.items) if rej.items else _NONE_SEEN  # one for all
        old = prev.rejections if prev else _NONE_SEEN
        out.rejections = [r for r in rej.items if not replay or (r.reason, r.detail) not in old]
        return seen

    def _unknown_node(
        self,
        key: tuple[str, str],
        resource_version: str,
        src: ObjectRef,
        node: str,
        data: Mapping[str, Any],
        prev: _State | None,
        now: datetime,
        rej: Rejections,
        out: DetectResult,
        replay: bool,
    ) -> DetectResult:
        """The ConfigMap names a node that does not exist: reported, no faults (earlier ones are cleared)."""
        rej.add("unknown-node", f"node {node[:80]!r} does not exist: its device ConfigMap is not acted on")
        if prev is not None:
            clear_all(prev.dev_view, now, src, out)
            clear_all(prev.side_view, now, src, out)
        seen = self._report(rej, prev, out, replay)
        cfg, manual, switch = data.get(KEY_DEVICE_INFO), data.get(KEY_MANUAL), data.get(KEY_SWITCH)
        self._state[key] = _State(
            cfg if isinstance(cfg, str) else None,
            manual if isinstance(manual, str) else None,
            switch if isinstance(switch, str) else None,
            None,
            None,
            True,
            {},
            {},
            seen,
            resource_version,
        )
        return out

    @staticmethod
    def _carry_over(new: dict[Identity, Fault], old: View) -> dict[Identity, Fault]:
        """A broken ``-Fault`` string: keep the previously read faults of chips the lists still name."""
        merged = dict(new)
        for ident, fault in list(new.items()):
            if ident[0] != "list":
                continue
            kept = [
                (i, s)
                for i, s in old.items()
                if i[0] == "fault" and s.fault.kind == fault.kind and s.fault.chips == fault.chips
            ]
            if kept:
                del merged[ident]
                for i, s in kept:
                    merged[i] = s.fault if s.fault.level == s.level else replace(s.fault, level=s.level)
        return merged
