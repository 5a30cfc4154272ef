"""Fault construction: a device ConfigMap's ``DeviceList``, ``ManuallySeparateNPU`` and ``SwitchInfoCfg`` as Faults.

:class:`FaultReader` turns one read into :class:`~agent.core.faults.Fault` values by identity (``("fault", kind,
chips, codes)`` for a ``-Fault`` element, ``("list", kind, chip)`` for a listed chip without one,
``("recovering", chip)``, ``("manual", chip)``), checking chip names against the node (agent.core.detect.chips).
Times: ``fault_time`` in ms (s for ClusterD's public faults), ``UpdateTime`` in s, both UTC. What cannot be read is a
:class:`~agent.core.detect.common.Rejections` entry (``wrong-type``, ``missing-key``, ``unknown-fault-type``,
``bad-code``, ``unknown-level``, ``bad-timestamp``, ``value-too-large``, ``too-many-faults``); names refused go to
``bad_names`` for one ``bad-chip-name`` rejection. Never raises. MindCluster: component/ascend-device-plugin
pkg/common/fault_code.go; component/clusterd/pkg/application/publicfault/fault_collector.go.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agent.core.detect.chips import ChipNames, NodeChips
from agent.core.detect.common import (
    MAX_VALUE_BYTES,
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
from agent.core.detect.deviceinfo.wire import (
    DEVICE_LIST_SUFFIXES,
    FAULT_TYPES,
    HEALTHY_LEVELS,
    KEY_MANUAL,
    KEY_SWITCH,
    LEVEL_FIELDS,
    SECONDS_FAULT_TIME,
    listed_chips,
)
from agent.core.detect.levels import LevelTable
from agent.core.detect.switchinfo import parse_switch_info
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef


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


def _add(faults: dict[Identity, Fault], ident: Identity, fault: Fault) -> None:
    prev = faults.get(ident)
    if prev is None or fault.level > prev.level:
        faults[ident] = fault


class FaultReader:
    """One parse of one device ConfigMap's data: its faults by identity, its refused chip names."""

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
        kind_unknown = FAULT_TYPES.get(ftype) if isinstance(ftype, str) else None
        if kind_unknown is None:
            rej.add("unknown-fault-type", f"{what}.fault_type: {str(ftype)[:40]!r}; read as CardUnhealthy")
            kind_unknown = FAULT_TYPES["CardUnhealthy"]
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
        for fld in LEVEL_FIELDS:
            if fld in el:
                if isinstance(el[fld], str) and el[fld].strip() in HEALTHY_LEVELS:
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
                if isinstance(entry_level, str) and entry_level.strip() in HEALTHY_LEVELS:
                    continue
                if "fault_level" in entry:
                    lvl = parse_level(entry["fault_level"], f"{cwhat}.fault_level", rej)
                    if lvl is not None:
                        by_code[ucode] = lvl
                if "fault_time" in entry:
                    unit = 1 if ftype in SECONDS_FAULT_TIME else 1000
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
            for suffix in DEVICE_LIST_SUFFIXES:
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


def bounded(faults: dict[Identity, Fault], limit: int, rej: Rejections) -> dict[Identity, Fault]:
    """`faults` when there are at most `limit`; else the `limit` most severe (a ``too-many-faults`` rejection)."""
    if len(faults) <= limit:
        return faults
    keep = sorted(faults.items(), key=lambda item: item[1].level, reverse=True)[:limit]
    rej.add("too-many-faults", f"{len(faults)} faults in one ConfigMap; the {limit} most severe are kept")
    return dict(keep)
