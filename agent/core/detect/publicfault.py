"""Public faults: ConfigMaps other monitors write for MindCluster (label ``mc-consumer-publicfault=true``).

Format (MindCluster ClusterD public-fault ConfigMap interface, DOMAIN.md §1.3): monitors such as CCAE,
fd-online, pingmesh, Netmind or dpcStorage write a ConfigMap (at most 1 MiB) whose key ``PublicFault`` holds
``{"id": str, "timestamp": int ms, "version": "1.0", "resource": str, "faults": [fault, …]}`` where ``id`` is
8-128 characters of ``[A-Za-z0-9._-]``, ``timestamp`` a 13-digit millisecond time after 2025-01-01 and
``faults`` 1 to 100 items of ``{"faultId": str (8-128 chars), "faultType": "NPU"|"Node"|"Network"|"Storage",
"faultCode": str (9 characters, user-defined), "faultTime": int ms, "assertion": "occur"|"recover",
"faultLocation": {str: str} (optional), "influence": [{"nodeName": str, "nodeSN": str (optional),
"deviceIds": [int, …]}], "description": str (optional)}``.

Each ``occur`` fault gives one :class:`~agent.core.faults.Fault` per influenced node: kind ``CHIP`` for ``NPU`` (chips
``Ascend910-<deviceId>``), ``NETWORK`` for ``Network`` (chips when device ids are given), ``NODE`` for ``Node``
and ``Storage``; codes ``(faultCode,)``; reason ``PublicFault:<resource>``; signal time ``faultTime``. The
faults are processed in order, so a later ``recover`` of a ``faultId`` cancels an earlier ``occur``. A fault
absent from a rewrite (or recovered) is cleared; deleting the ConfigMap clears all of its faults.

Level: the ``mindx-dl-fault-config`` override for the code, else ClusterD's public-fault table
(``agent/detect/data/public_fault_levels.yaml``, generated from component/clusterd/build/
publicFaultConfiguration.json: its SeparateNPU codes are SeparateNPU here too), else the configured default
(``detect.public_fault_default_level``, ``SubHealthFault``). MindCluster discards a code its table does not list;
the agent reports it at the default level instead, which never restarts or isolates a training job on its own (the
operator opts codes in through the fault-level override ConfigMap).

Envelope errors (unreadable JSON, missing or mistyped top-level keys, ``bad-version``, ``bad-id``,
``bad-timestamp``, ``bad-fault-count``) make the whole document unusable: it is rejected and the previous view
kept. Errors inside one fault (``unknown-fault-type``, ``bad-assertion``, ``empty-influence``, ``bad-fault-id``,
``bad-code``, ``bad-device-id``, …) drop that fault (or that influence entry) only. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.common import DetectResult, Identity, Rejections, parse_json, unix_time
from agent.core.detect.diff import View, clear_all, diff_views
from agent.core.detect.levels import LevelTable
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef

KEY_PUBLIC_FAULT = "PublicFault"
LABEL = "mc-consumer-publicfault"
VERSION = "1.0"
CHIP_PREFIX = "Ascend910-"
"""Chip names as the device plugin and the pod allocation annotation spell them."""
MAX_FAULTS = 100
EARLIEST = datetime(2025, 1, 1, tzinfo=UTC)
"""The interface requires timestamps after 2025-01-01."""

FAULT_TYPES: Mapping[str, FaultKind] = {
    "NPU": FaultKind.CHIP,
    "Network": FaultKind.NETWORK,
    "Node": FaultKind.NODE,
    "Storage": FaultKind.NODE,
}

_ID = re.compile(r"[A-Za-z0-9._-]{8,128}")
_CODE = re.compile(r"\S{9}")


def _str(obj: Mapping[str, Any], key: str, what: str, rej: Rejections) -> str | None:
    value = obj.get(key)
    if value is None:
        rej.add("missing-key", f"{what}.{key} is missing")
        return None
    if not isinstance(value, str):
        rej.add("wrong-type", f"{what}.{key}: expected string, got {type(value).__name__}")
        return None
    return value


def _ms(value: object, what: str, now: datetime, rej: Rejections) -> datetime | None:
    """A millisecond time after 2025-01-01 (and at most a day after `now`), or None with a rejection."""
    ts = unix_time(value, 1000, what, now, rej)
    if ts is not None and ts < EARLIEST:
        rej.add("bad-timestamp", f"{what}: {value} is before 2025-01-01")
        return None
    return ts


class _Parser:
    """Reads one ``PublicFault`` document; never raises."""

    def __init__(self, table: LevelTable, default_level: FaultLevel, source: ObjectRef, now: datetime):
        self.table = table
        self.default_level = default_level
        self.source = source
        self.now = now
        self.rej = Rejections(source)

    def document(self, text: str) -> dict[Identity, Fault] | None:
        """identity → Fault for the whole document, or None when its envelope is unusable."""
        rej = self.rej
        obj = parse_json(text, KEY_PUBLIC_FAULT, rej)
        if obj is None:
            return None
        if not isinstance(obj, dict):
            rej.add("wrong-type", f"{KEY_PUBLIC_FAULT}: expected object, got {type(obj).__name__}")
            return None
        version = _str(obj, "version", KEY_PUBLIC_FAULT, rej)
        doc_id = _str(obj, "id", KEY_PUBLIC_FAULT, rej)
        resource = _str(obj, "resource", KEY_PUBLIC_FAULT, rej)
        ok = version is not None and doc_id is not None and resource is not None
        if version is not None and version != VERSION:
            rej.add("bad-version", f"version {version[:20]!r}, expected {VERSION!r}")
            ok = False
        if doc_id is not None and not _ID.fullmatch(doc_id):
            rej.add("bad-id", f"id {doc_id[:40]!r} is not 8-128 characters of [A-Za-z0-9._-]")
            ok = False
        if resource is not None and not resource.strip():
            rej.add("missing-key", f"{KEY_PUBLIC_FAULT}.resource is empty")
            ok = False
        if "timestamp" not in obj:
            rej.add("missing-key", f"{KEY_PUBLIC_FAULT}.timestamp is missing")
            ok = False
        elif _ms(obj["timestamp"], "timestamp", self.now, rej) is None:
            ok = False
        faults = obj.get("faults")
        if faults is None:
            rej.add("missing-key", f"{KEY_PUBLIC_FAULT}.faults is missing")
            return None
        if not isinstance(faults, list):
            rej.add("wrong-type", f"faults: expected array, got {type(faults).__name__}")
            return None
        if not 1 <= len(faults) <= MAX_FAULTS:
            rej.add("bad-fault-count", f"faults: {len(faults)} items, expected 1 to {MAX_FAULTS}")
            return None
        if not ok or resource is None:
            return None
        out: dict[Identity, Fault] = {}
        for i, el in enumerate(faults):
            self.fault(el, f"faults[{i}]", resource.strip(), out)
        return out

    def fault(self, el: object, what: str, resource: str, out: dict[Identity, Fault]) -> None:
        """Apply one fault element to `out` (occur adds, recover removes); a bad element is skipped."""
        rej = self.rej
        if not isinstance(el, dict):
            rej.add("wrong-type", f"{what}: expected object, got {type(el).__name__}")
            return
        fault_id = _str(el, "faultId", what, rej)
        if fault_id is None:
            return
        if not 8 <= len(fault_id) <= 128:
            rej.add("bad-fault-id", f"{what}.faultId {fault_id[:40]!r} is not 8-128 characters")
            return
        assertion = _str(el, "assertion", what, rej)
        if assertion is None:
            return
        if assertion not in ("occur", "recover"):
            rej.add("bad-assertion", f"{what}.assertion {assertion[:20]!r}")
            return
        if assertion == "recover":
            for ident in [k for k in out if k[0] == fault_id]:
                del out[ident]
            return
        ftype = _str(el, "faultType", what, rej)
        if ftype is None:
            return
        kind = FAULT_TYPES.get(ftype)
        if kind is None:
            rej.add("unknown-fault-type", f"{what}.faultType {ftype[:20]!r}")
            return
        code = _str(el, "faultCode", what, rej)
        if code is None:
            return
        code = code.strip()
        if not _CODE.fullmatch(code):
            rej.add("bad-code", f"{what}.faultCode {code[:40]!r} is not 9 characters")
            return
        if "faultTime" not in el:
            rej.add("missing-key", f"{what}.faultTime is missing")
            return
        signal = _ms(el["faultTime"], f"{what}.faultTime", self.now, rej)
        if signal is None:
            return
        loc = el.get("faultLocation")
        if loc is not None and (not isinstance(loc, dict) or not all(isinstance(v, str) for v in loc.values())):
            rej.add("wrong-type", f"{what}.faultLocation: expected an object of strings")
        influence = el.get("influence")
        if influence is None:
            rej.add("missing-key", f"{what}.influence is missing")
            return
        if not isinstance(influence, list):
            rej.add("wrong-type", f"{what}.influence: expected array, got {type(influence).__name__}")
            return
        if not influence:
            rej.add("empty-influence", f"{what}.influence is empty")
            return
        chips_by_node: dict[str, set[int]] = {}
        for j, inf in enumerate(influence):
            self.influence(inf, f"{what}.influence[{j}]", kind, chips_by_node)
        level = self.table.public_level(code.upper()) or self.default_level
        for node, ids in chips_by_node.items():
            chips = tuple(f"{CHIP_PREFIX}{d}" for d in sorted(ids)) if kind is not FaultKind.NODE else ()
            reason = f"PublicFault:{resource}"
            f = Fault(kind, level, node, chips, (code,), signal, self.now, self.source, reason)
            out[(fault_id, node, kind.value, chips, code)] = f

    def influence(self, inf: object, what: str, kind: FaultKind, out: dict[str, set[int]]) -> None:
        """Add one influence entry (node → device ids) to `out`; a bad entry is skipped, bad ids dropped."""
        rej = self.rej
        if not isinstance(inf, dict):
            rej.add("wrong-type", f"{what}: expected object, got {type(inf).__name__}")
            return
        node = _str(inf, "nodeName", what, rej)
        if node is None:
            return
        node = node.strip()
        if not node:
            rej.add("missing-key", f"{what}.nodeName is empty")
            return
        raw = inf.get("deviceIds", [])
        if raw is None:
            raw = []
        if not isinstance(raw, list):
            rej.add("wrong-type", f"{what}.deviceIds: expected array, got {type(raw).__name__}")
            raw = []
        ids: set[int] = set()
        for d in raw:
            if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d < 1 << 16:
                rej.add("bad-device-id", f"{what}.deviceIds: {str(d)[:20]!r} is not a chip id")
                continue
            ids.add(d)
        if kind is FaultKind.CHIP and not ids:
            rej.add("empty-device-ids", f"{what}: an NPU fault without device ids")
            return
        out.setdefault(node, set()).update(ids)


class PublicFaultDetector:
    """Keeps the last view of every public-fault ConfigMap; rewrites give new and cleared faults.

    Args:
        table: level table (codes it knows take its level; overrides apply).
        default_level: level of a code the table does not know (see the module docstring).
    """

    def __init__(self, table: LevelTable, default_level: FaultLevel = FaultLevel.SUB_HEALTH):
        self.table = table
        self.default_level = default_level
        self._state: dict[tuple[str, str], tuple[str | None, View]] = {}

    def __len__(self) -> int:
        return len(self._state)

    def update(self, cm: ConfigMapRecord, now: datetime) -> DetectResult:
        """Read a new version of a public-fault ConfigMap. Never raises.

        An unusable document is rejected and the previous faults are kept. Rejections: ``missing-key`` (no
        ``PublicFault``), ``value-too-large`` (the ConfigMap's data over 1 MiB) and those listed in the module
        docstring.
        """
        out = DetectResult()
        key = (cm.namespace, cm.name)
        prev = self._state.get(key)
        text = cm.data.get(KEY_PUBLIC_FAULT)
        if prev is not None and text is not None and text == prev[0]:
            return out
        src = ObjectRef("ConfigMap", cm.namespace, cm.name, cm.uid)
        parser = _Parser(self.table, self.default_level, src, now)
        old: View = prev[1] if prev else {}
        view = old
        size = sum(len(k) + len(v) for k, v in cm.data.items())
        if text is None:
            parser.rej.add("missing-key", f"{KEY_PUBLIC_FAULT} is missing")
        elif size > 1 << 20:
            parser.rej.add("value-too-large", f"ConfigMap data is {size} characters, limit {1 << 20}")
        else:
            faults = parser.document(text)
            if faults is not None:
                view, fresh = diff_views(old, faults, now, src, out)
                out.faults.extend(view[i].fault for i in fresh)
        out.rejections = parser.rej.items
        self._state[key] = (text, view)
        return out

    def set_table(self, table: LevelTable, now: datetime) -> DetectResult:
        """Use a new level table (fault config reloaded) and read every held document again with it: a fault
        whose level changed is cleared and raised again at the new level; the others stay as they were. The
        documents' rejections were reported when they were written and are not reported again."""
        self.table = table
        out = DetectResult()
        for key, (text, view) in list(self._state.items()):
            if text is None or not view:
                continue
            src = next(iter(view.values())).fault.source
            faults = _Parser(table, self.default_level, src, now).document(text)
            if faults is None:
                continue
            new_view, fresh = diff_views(view, faults, now, src, out)
            out.faults.extend(new_view[i].fault for i in fresh)
            self._state[key] = (text, new_view)
        return out

    def delete(self, namespace: str, name: str, now: datetime, *, uid: str = "") -> DetectResult:
        """The ConfigMap was deleted: every fault read from it is cleared."""
        out = DetectResult()
        prev = self._state.pop((namespace, name), None)
        if prev is not None:
            clear_all(prev[1], now, ObjectRef("ConfigMap", namespace, name, uid), out)
        return out
