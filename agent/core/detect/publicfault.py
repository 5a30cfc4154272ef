"""Public faults: ConfigMaps other monitors write for MindCluster (label ``mc-consumer-publicfault=true``).

Format (MindCluster ``component/ascend-common/api/publicfault.go``; checks in
``component/clusterd/pkg/application/publicfault/checker.go``): monitors such as CCAE, fd-online, pingmesh, Netmind
or dpcStorage write a ConfigMap (at most 1 MiB) whose key ``PublicFault`` holds ``{"id": str, "timestamp": int ms,
"version": "1.0", "resource": str, "faults": [fault, …]}`` where ``id`` is 8-128 characters of ``[A-Za-z0-9._-]``,
``timestamp`` a 13-digit millisecond time after 2025-01-01 and ``faults`` 1 to 100 items of ``{"faultId": str
(8-128 chars), "faultType": "NPU"|"Node"|"Network"|"Storage", "faultCode": str (9 characters),
"faultTime": int ms, "assertion": "occur"|"recover"|"once", "faultLocation": {str: str} (optional),
"influence": [{"nodeName": str, "nodeSN": str, "deviceIds": [int, …]}], "description": str (optional)}``.

Semantics, as ClusterD's collector has them (``component/clusterd/pkg/application/publicfault/fault_collector.go``,
``pkg/domain/publicfault/cache.go``, ``pkg/application/faultmanager/fault_process_center.go``):

- A fault is held per node under ``resource`` + ``faultId``, across ConfigMaps: a ``recover`` written by any
  ConfigMap of the same resource clears it.
- ``occur`` raises it when it is not held (an ``occur`` of a held fault changes nothing: the first one stays);
  ``recover`` clears it; ``once`` raises it and clears it :data:`ONCE_HOLD` later (at :meth:`tick`).
- Only ``recover`` (or ``once``'s hold running out) clears: a rewrite that no longer lists a fault and the
  deletion of the ConfigMap keep it, as ClusterD ignores both.
- Node: ``nodeName`` when it is not empty, else the node whose annotation ``product-serial-number``
  (``api.NodeSNAnnotation``, ``component/clusterd/pkg/domain/node/node_storage.go``) is ``nodeSN``; an unknown
  SN drops that influence entry (``unknown-node-sn``).
- Chips: ``<device type>-<deviceId>`` where the device type is the node's NPU resource without ``huawei.com/``
  (``Ascend910``, ``npu``; ClusterD takes its device ConfigMap's ``DeviceType``,
  ``pkg/application/faultmanager/cmprocess/publicfault/pub_fault_processor.go``); ``Ascend910`` when the node or
  its resource is not known (yet).
- Level: the ``mindx-dl-fault-config`` override for the code, else ClusterD's public-fault table
  (``agent/core/detect/data/public_fault_levels.yaml``, generated from ``component/clusterd/build/
  publicFaultConfiguration.json``), else the configured default (``detect.public_fault_default_level``).

Each raised fault gives one :class:`~agent.core.faults.Fault` per influenced node: kind ``CHIP`` for ``NPU``,
``NETWORK`` for ``Network`` (chips when device ids are given), ``NODE`` for ``Node`` and ``Storage``; codes
``(faultCode,)``; reason ``PublicFault:<resource>``; signal time ``faultTime``.

Where the agent deliberately differs from ClusterD:

- A code the table does not list: ClusterD discards the whole fault; the agent reports it at the default level
  (reason ``PublicFault:<resource>:unknown-code``), which never restarts or isolates a job on its own (the
  operator opts codes in through the fault-level override ConfigMap).
- ClusterD keeps a fault at least 5 s before a ``recover`` takes effect and remembers a ``recover`` that came
  before its ``occur`` for 5 s; the agent clears at once, a ``recover`` of a fault not held does nothing, and an
  ``occur`` followed by its ``recover`` in one document raises nothing.
- ClusterD requires 1-32 distinct device ids, each 0-31, in every influence entry and discards the whole fault
  when one entry breaks that (``checkDeviceIds``). The agent takes the same ids as chips, 0 to
  :data:`MAX_DEVICE_ID`, and keeps them when the entry also holds others: an id outside that range (``200``,
  ``40000``, a string) is dropped, never a valid chip beside it, and all such ids of one document are one
  ``bad-device-id`` rejection with their count and the first few (not one per id: a 1 MiB document holds
  100,000 of them). An entry whose ids are all bad is skipped. A ``Node``/``Storage``/``Network`` fault
  without ids is accepted (a node-wide fault).
- ClusterD drops a document whose ``resource`` is not in its table's ``publicFaultResource`` list (and rate-limits
  each resource); the agent accepts any resource.
- ClusterD re-reads a ConfigMap on every change of the object; the agent skips a rewrite whose ``PublicFault``
  text did not change (so an unchanged ``once`` is not raised again).

Envelope errors (unreadable JSON, missing or mistyped top-level keys, ``bad-version``, ``bad-id``,
``bad-timestamp``, ``bad-fault-count``) make the whole document unusable: it is rejected. Errors inside one fault
(``unknown-fault-type``, ``bad-assertion``, ``empty-influence``, ``bad-fault-id``, ``bad-code``,
``bad-device-id``, ``unknown-node-sn``, …) drop that fault (or that influence entry) only. Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.chips import NodeChips, short_name
from agent.core.detect.common import DetectResult, Rejections, json_type, parse_json, unix_time
from agent.core.detect.levels import LevelTable
from agent.core.faults import Fault, FaultCleared, FaultKind, FaultLevel, ObjectRef, Rejection

KEY_PUBLIC_FAULT = "PublicFault"
LABEL = "mc-consumer-publicfault"
"""The label MindCluster's public-fault ConfigMaps carry (value ``true``; the watch selects on it)."""
VERSION = "1.0"
DEFAULT_DEVICE_TYPE = "Ascend910"
"""The chip name prefix when the node's NPU resource is not known (the device plugin's ``Ascend910-<id>``)."""
ONCE_HOLD = timedelta(seconds=5)
"""How long a ``once`` fault stays raised (ClusterD's ``diffTime``, fault_collector.go)."""
ASSERTIONS = ("occur", "recover", "once")
MAX_FAULTS = 100
MAX_DEVICE_ID = 31
"""The highest chip id ClusterD accepts in ``deviceIds`` (checker.go ``checkDeviceIds``: 0-31)."""
MAX_REJECTIONS = 20
"""Rejections listed per document; more are one ``more-rejections`` line with their count (a document of bad
entries must not turn into thousands of log lines)."""
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
        rej.add("wrong-type", f"{what}.{key}: expected string, got {json_type(value)}")
        return None
    return value


def _ms(value: object, what: str, now: datetime, rej: Rejections) -> datetime | None:
    """A millisecond time after 2025-01-01 (and at most a day after `now`), or None with a rejection."""
    ts = unix_time(value, 1000, what, now, rej)
    if ts is not None and ts < EARLIEST:
        rej.add("bad-timestamp", f"{what}: {value} is before 2025-01-01")
        return None
    return ts


HeldKey = tuple[str, str, str]
"""(node, resource, faultId): ClusterD's per-node fault key (``resource + faultId``)."""


@dataclass(frozen=True, slots=True)
class _Op:
    """One influenced node of one fault element, in document order."""

    assertion: str  # one of ASSERTIONS
    key: HeldKey
    fault: Fault
    code: str


@dataclass(slots=True)
class _Held:
    fault: Fault
    code: str
    expires: datetime | None  # `once`: cleared at this time


NodeLookup = Callable[[str], NodeChips | None]
"""Node name → its NPU resource and capacity, None when the node is not known."""
SerialLookup = Callable[[str], str | None]
"""Node serial number (annotation ``product-serial-number``) → node name, None when no node has it."""


class _Parser:
    """Reads one ``PublicFault`` document into operations; never raises."""

    def __init__(
        self,
        table: LevelTable,
        default_level: FaultLevel,
        source: ObjectRef,
        now: datetime,
        nodes: NodeLookup,
        serials: SerialLookup,
    ):
        self.table = table
        self.default_level = default_level
        self.source = source
        self.now = now
        self.nodes = nodes
        self.serials = serials
        self.rej = Rejections(source)
        self.bad_ids: list[str] = []  # the document's ids that are no chip id, as written (first few)
        self.bad_id_count = 0
        self.bad_id_entries: list[str] = []  # the influence entries that held them

    def finish(self) -> list[Rejection]:
        """The document's rejections, bounded: the bad device ids as one, at most :data:`MAX_REJECTIONS` listed."""
        items = list(self.rej.items)
        if self.bad_id_count:
            where = self.bad_id_entries[0] + (
                f" and {len(self.bad_id_entries) - 1} more entr{'y' if len(self.bad_id_entries) == 2 else 'ies'}"
                if len(self.bad_id_entries) > 1
                else ""
            )
            sample = ", ".join(self.bad_ids) + (" …" if self.bad_id_count > len(self.bad_ids) else "")
            detail = f"{self.bad_id_count} device id(s) are not chip ids 0-{MAX_DEVICE_ID} ({where}): {sample}"
            items.insert(0, Rejection(self.source, "bad-device-id", detail[:200]))  # never cut by the bound
        if len(items) > MAX_REJECTIONS:
            rest = items[MAX_REJECTIONS:]
            reasons = ", ".join(sorted({r.reason for r in rest}))
            more = Rejection(self.source, "more-rejections", f"{len(rest)} more rejection(s) not listed: {reasons}")
            items = [*items[:MAX_REJECTIONS], more]
        return items

    def document(self, text: str) -> list[_Op] | None:
        """The document's operations in order, or None when its envelope is unusable."""
        rej = self.rej
        obj = parse_json(text, KEY_PUBLIC_FAULT, rej)
        if obj is None:
            return None
        if not isinstance(obj, dict):
            rej.add("wrong-type", f"{KEY_PUBLIC_FAULT}: expected object, got {json_type(obj)}")
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
            rej.add("wrong-type", f"faults: expected array, got {json_type(faults)}")
            return None
        if not 1 <= len(faults) <= MAX_FAULTS:
            rej.add("bad-fault-count", f"faults: {len(faults)} items, expected 1 to {MAX_FAULTS}")
            return None
        if not ok or resource is None:
            return None
        out: list[_Op] = []
        for i, el in enumerate(faults):
            self.fault(el, f"faults[{i}]", resource.strip(), out)
        return out

    def fault(self, el: object, what: str, resource: str, out: list[_Op]) -> None:
        """Append one fault element's operations (one per influenced node) to `out`; a bad element is skipped."""
        rej = self.rej
        if not isinstance(el, dict):
            rej.add("wrong-type", f"{what}: expected object, got {json_type(el)}")
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
        if assertion not in ASSERTIONS:
            rej.add("bad-assertion", f"{what}.assertion {assertion[:20]!r}, expected one of {', '.join(ASSERTIONS)}")
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
            rej.add("wrong-type", f"{what}.influence: expected array, got {json_type(influence)}")
            return
        if not influence:
            rej.add("empty-influence", f"{what}.influence is empty")
            return
        chips_by_node: dict[str, set[int]] = {}
        for j, inf in enumerate(influence):
            self.influence(inf, f"{what}.influence[{j}]", kind, chips_by_node)
        known = self.table.public_level(code.upper())
        level = known or self.default_level
        reason = f"PublicFault:{resource}" if known is not None else f"PublicFault:{resource}:unknown-code"
        for node, ids in chips_by_node.items():
            chips: tuple[str, ...] = ()
            if kind is not FaultKind.NODE:
                chips = tuple(f"{self.device_type(node)}-{d}" for d in sorted(ids))
            f = Fault(kind, level, node, chips, (code,), signal, self.now, self.source, reason)
            out.append(_Op(assertion, (node, resource, fault_id), f, code.upper()))

    def device_type(self, node: str) -> str:
        """The chip name prefix on `node`: its NPU resource without ``huawei.com/``, else the default."""
        chips = self.nodes(node)
        if chips is not None and chips.resource:
            return short_name(chips.resource)
        return DEFAULT_DEVICE_TYPE

    def influence(self, inf: object, what: str, kind: FaultKind, out: dict[str, set[int]]) -> None:
        """Add one influence entry (node → device ids) to `out`; a bad entry is skipped, bad ids dropped."""
        rej = self.rej
        if not isinstance(inf, dict):
            rej.add("wrong-type", f"{what}: expected object, got {json_type(inf)}")
            return
        name, sn = inf.get("nodeName"), inf.get("nodeSN")
        for key, value in (("nodeName", name), ("nodeSN", sn)):
            if value is not None and not isinstance(value, str):
                rej.add("wrong-type", f"{what}.{key}: expected string, got {json_type(value)}")
                return
        node = (name or "").strip()
        if not node:
            serial = (sn or "").strip()
            if not serial:
                rej.add("missing-key", f"{what}: neither nodeName nor nodeSN is given")
                return
            found = self.serials(serial)
            if found is None:
                rej.add("unknown-node-sn", f"{what}.nodeSN {serial[:40]!r}: no node has that product-serial-number")
                return
            node = found
        raw = inf.get("deviceIds", [])
        if raw is None:
            raw = []
        if not isinstance(raw, list):
            rej.add("wrong-type", f"{what}.deviceIds: expected array, got {json_type(raw)}")
            raw = []
        ids: set[int] = set()
        bad = 0
        for d in raw:
            if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_DEVICE_ID:
                bad += 1
                if len(self.bad_ids) < 3:
                    self.bad_ids.append(ascii(d)[:20] if isinstance(d, str) else str(d)[:20])
                continue
            ids.add(d)
        if bad:
            self.bad_id_count += bad
            self.bad_id_entries.append(f"{what}.deviceIds")
            if not ids and kind is not FaultKind.NODE:
                return  # only bad ids: not widened to the whole node; counted in the bad-device-id rejection
        if kind is FaultKind.CHIP and not ids:
            rej.add("empty-device-ids", f"{what}: an NPU fault without device ids")
            return
        out.setdefault(node, set()).update(ids)


def _no_node(_: str) -> NodeChips | None:
    return None


def _no_serial(_: str) -> str | None:
    return None


class PublicFaultDetector:
    """Holds the public faults raised and not recovered (module docstring: ClusterD's semantics).

    Args:
        table: level table (codes it knows take its level; overrides apply).
        default_level: level of a code the table does not know (see the module docstring).
        nodes: node name → its NPU resource (for chip names); default: nothing known (``Ascend910-<id>``).
        serials: node serial number → node name (for ``nodeSN``); default: no node has one.
    """

    def __init__(
        self,
        table: LevelTable,
        default_level: FaultLevel = FaultLevel.SUB_HEALTH,
        *,
        nodes: NodeLookup = _no_node,
        serials: SerialLookup = _no_serial,
    ):
        self.table = table
        self.default_level = default_level
        self.nodes = nodes
        self.serials = serials
        self._texts: dict[tuple[str, str], str | None] = {}
        self._held: dict[HeldKey, _Held] = {}

    def __len__(self) -> int:
        """Public faults held (raised and not recovered), one per node and ``resource`` + ``faultId``."""
        return len(self._held)

    def held(self) -> list[Fault]:
        """The faults held now, in the order they were raised."""
        return [h.fault for h in self._held.values()]

    def update(self, cm: ConfigMapRecord, now: datetime) -> DetectResult:
        """Read a new version of a public-fault ConfigMap and apply its operations in order. Never raises.

        Returns the faults raised and cleared by it (an ``occur`` and its ``recover`` in the same document give
        neither). An unusable document is rejected and changes nothing. Rejections: ``missing-key`` (no
        ``PublicFault``), ``value-too-large`` (the ConfigMap's data over 1 MiB) and those listed in the module
        docstring.
        """
        out = DetectResult()
        key = (cm.namespace, cm.name)
        text = cm.data.get(KEY_PUBLIC_FAULT)
        if key in self._texts and text is not None and text == self._texts[key]:
            return out
        self._texts[key] = text
        src = ObjectRef("ConfigMap", cm.namespace, cm.name, cm.uid)
        parser = _Parser(self.table, self.default_level, src, now, self.nodes, self.serials)
        size = sum(len(k) + len(v) for k, v in cm.data.items())
        if text is None:
            parser.rej.add("missing-key", f"{KEY_PUBLIC_FAULT} is missing")
        elif size > 1 << 20:
            parser.rej.add("value-too-large", f"ConfigMap data is {size} characters, limit {1 << 20}")
        else:
            ops = parser.document(text)
            if ops is not None:
                self._apply(ops, now, src, out)
        out.rejections = parser.finish()
        return out

    def _apply(self, ops: list[_Op], now: datetime, src: ObjectRef, out: DetectResult) -> None:
        raised: dict[HeldKey, Fault] = {}  # raised by this document: a recover of one of them nets it out
        for op in ops:
            held = self._held.get(op.key)
            if op.assertion == "recover":
                if held is None:
                    continue
                del self._held[op.key]
                if op.key in raised:
                    out.faults.remove(raised.pop(op.key))
                else:
                    out.cleared.append(FaultCleared(held.fault, now, src))
            elif held is None:
                expires = now + ONCE_HOLD if op.assertion == "once" else None
                self._held[op.key] = _Held(op.fault, op.code, expires)
                raised[op.key] = op.fault
                out.faults.append(op.fault)

    def tick(self, now: datetime) -> DetectResult:
        """Clear the ``once`` faults raised :data:`ONCE_HOLD` or more before `now`."""
        out = DetectResult()
        for key, held in list(self._held.items()):
            if held.expires is not None and held.expires <= now:
                del self._held[key]
                out.cleared.append(FaultCleared(held.fault, now, held.fault.source))
        return out

    def set_table(self, table: LevelTable, now: datetime) -> DetectResult:
        """Use a new level table (fault config reloaded): a held fault whose level changed is cleared and raised
        again at the new level (its signal time kept); the others stay as they were."""
        self.table = table
        out = DetectResult()
        for (_, resource, _), held in self._held.items():
            known = table.public_level(held.code)
            level = known or self.default_level
            if level is held.fault.level:
                continue
            reason = f"PublicFault:{resource}" if known is not None else f"PublicFault:{resource}:unknown-code"
            fault = dataclasses.replace(held.fault, level=level, observed_at=now, reason=reason)
            out.cleared.append(FaultCleared(held.fault, now, held.fault.source))
            out.faults.append(fault)
            held.fault = fault
        return out

    def delete(self, namespace: str, name: str, now: datetime, *, uid: str = "") -> DetectResult:
        """The ConfigMap was deleted. ClusterD ignores the deletion and so does the agent: its faults stay held
        until a ``recover`` (from any ConfigMap of the same resource). Returns an empty result."""
        self._texts.pop((namespace, name), None)
        return DetectResult()
