"""NodeD ConfigMaps (``mindx-dl-nodeinfo-<node>`` in mindx-dl): node hardware faults (CPU, memory, disk, …).

Format (DOMAIN.md §1.2, MindCluster NodeD): key ``NodeInfo`` =
``{"NodeInfo":{"FaultDevList":[{"DeviceType":str,"DeviceId":int,"FaultCode":[hex,…],"FaultLevel":str}],
"NodeStatus":"Healthy|PreSeparate|UnHealthy"},"CheckCode":hex}``; key ``updateTime`` (RFC 3339) is the signal
time. The CheckCode is the SHA-256 of Go's ``json.Marshal`` of the inner object (fields in the order above).
The ConfigMap exists only while the node has faults: its deletion clears them all.

A ConfigMap naming a node that does not exist (when the detector has a Node lookup) is rejected as ``unknown-node``
and gives no fault, as the device plugin's does (:mod:`agent.core.detect.deviceinfo`): nothing from it may taint or
restart anything; it is read again when that Node appears.

One node fault per ``FaultDevList`` element (reason ``NodeD-<DeviceType>``, level from ``FaultLevel``:
``NotHandleFault``/``PreSeparateFault``/``SeparateFault``); a non-healthy ``NodeStatus`` gives one fault at the
status's level (reason ``NodeD-<NodeStatus>``) unless an element is already at least as severe: an ``UnHealthy``
node whose list holds only milder entries is still out of service, as MindCluster's scheduler has it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.checkcode import verify_check_code
from agent.core.detect.common import (
    DetectResult,
    Identity,
    Rejections,
    json_type,
    parse_codes,
    parse_json,
    parse_level,
    parse_rfc3339,
)
from agent.core.detect.deviceinfo import NodeLookup, node_of
from agent.core.detect.diff import View, clear_all, diff_views
from agent.core.detect.levels import NODED_REASON_PREFIX, LevelTable
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef

NODE_INFO_PREFIX = "mindx-dl-nodeinfo-"
KEY_NODE_INFO = "NodeInfo"
KEY_UPDATE_TIME = "updateTime"

_STATUS_LEVELS: Mapping[str, FaultLevel | None] = {
    "Healthy": None,
    "PreSeparate": FaultLevel.PRE_SEPARATE,
    "UnHealthy": FaultLevel.SEPARATE,
}


def parse_node_info(
    value: str | Mapping[str, Any],
    node: str,
    source: ObjectRef,
    table: LevelTable,
    signal_time: datetime,
    now: datetime,
    rej: Rejections,
    *,
    on_mismatch: Literal["use", "ignore"] = "use",
    check_code: bool = True,
) -> dict[Identity, Fault] | None:
    """Parse a ``NodeInfo`` value (JSON text, or an already parsed object of the same shape) into node faults.

    With `check_code` False no CheckCode is expected (ClusterD's flat ``cluster-info-node-cm`` entries).

    Returns:
        identity → Fault, or None when nothing usable could be read (the caller keeps its previous view).
        Rejections: ``json-truncated``, ``json-invalid``, ``value-too-large``, ``wrong-type``, ``missing-key``,
        ``bad-check-code``, ``missing-check-code``, ``unknown-level``, ``empty-level``, ``unknown-node-status``,
        ``bad-code``. Never raises.
    """
    obj = parse_json(value, KEY_NODE_INFO, rej) if isinstance(value, str) else value
    if obj is None:
        return None
    if not isinstance(obj, Mapping):
        rej.add("wrong-type", f"{KEY_NODE_INFO}: expected object, got {json_type(obj)}")
        return None
    inner = obj.get("NodeInfo")
    if not isinstance(inner, dict):
        rej.add("missing-key" if inner is None else "wrong-type", "NodeInfo.NodeInfo missing or not an object")
        return None
    devs = inner.get("FaultDevList")
    status = inner.get("NodeStatus")
    code = obj.get("CheckCode")
    ok = True
    if not check_code:
        pass
    elif not isinstance(code, str) or not code:
        rej.add("missing-check-code", "NodeInfo.CheckCode missing or not a string")
        ok = False
    else:
        go_devs = None
        if isinstance(devs, list):
            go_devs = [
                {k: d.get(k) for k in ("DeviceType", "DeviceId", "FaultCode", "FaultLevel")}
                if isinstance(d, dict)
                else d
                for d in devs
            ]
        if not verify_check_code({"FaultDevList": go_devs, "NodeStatus": status}, code):
            rej.add("bad-check-code", f"CheckCode {code[:64]} does not match the NodeInfo content")
            ok = False
    if not ok and on_mismatch == "ignore":
        return None
    faults: dict[Identity, Fault] = {}
    if devs is None:
        devs = []
    if not isinstance(devs, list):
        rej.add("wrong-type", f"FaultDevList: expected array, got {json_type(devs)}")
        devs = []
    for i, d in enumerate(devs):
        what = f"FaultDevList[{i}]"
        if not isinstance(d, dict):
            rej.add("wrong-type", f"{what}: expected object, got {json_type(d)}")
            continue
        dtype = d.get("DeviceType")
        if not isinstance(dtype, str) or not dtype:
            rej.add("missing-key" if dtype is None else "wrong-type", f"{what}.DeviceType missing or not a string")
            dtype = "Unknown"
        dev_id = d.get("DeviceId")
        if dev_id is not None and (isinstance(dev_id, bool) or not isinstance(dev_id, int)):
            rej.add("wrong-type", f"{what}.DeviceId: expected integer, got {json_type(dev_id)}")
            dev_id = None
        raw_codes = d.get("FaultCode", [])
        if isinstance(raw_codes, str):
            raw_codes = [raw_codes]
        if not isinstance(raw_codes, list):
            rej.add("wrong-type", f"{what}.FaultCode: expected array, got {json_type(raw_codes)}")
            raw_codes = []
        codes = parse_codes(raw_codes, f"{what}.FaultCode", rej)
        reported = _level(d.get("FaultLevel"), f"{what}.FaultLevel", rej)
        level = table.resolve(codes, reported, {}, "chip", "node") if reported is None else reported
        f = Fault(FaultKind.NODE, level, node, (), codes, signal_time, now, source, f"{NODED_REASON_PREFIX}{dtype}", ok)
        ident: Identity = ("noded", dtype, dev_id, codes)
        prev = faults.get(ident)
        if prev is None or f.level > prev.level:
            faults[ident] = f
    if status is not None and not isinstance(status, str):
        rej.add("wrong-type", f"NodeStatus: expected string, got {json_type(status)}")
    elif status is not None and status not in _STATUS_LEVELS:
        rej.add("unknown-node-status", f"NodeStatus {status[:40]!r}")
    elif status is not None:
        # The status is NodeD's verdict on the whole node and MindCluster's scheduler follows it whatever the list
        # holds (internal/rescheduling/node.go setNodeHealthyByNodeD): it is a fault of its own unless a device
        # fault is already at least as severe.
        lvl = _STATUS_LEVELS[status]
        if lvl is not None and all(f.level < lvl for f in faults.values()):
            f = Fault(FaultKind.NODE, lvl, node, (), (), signal_time, now, source, f"{NODED_REASON_PREFIX}{status}", ok)
            faults[("noded-status",)] = f
    return faults


def _level(value: object, what: str, rej: Rejections) -> FaultLevel | None:
    if value is None:
        rej.add("missing-key", f"{what} is missing")
        return None
    return parse_level(value, what, rej)


class NodeInfoDetector:
    """Keeps the last view of every NodeD ConfigMap; updates give new/cleared node faults, deletion clears all.

    Args:
        table: level table for elements whose ``FaultLevel`` is unreadable.
        on_mismatch: as :class:`agent.core.detect.deviceinfo.DeviceInfoDetector`.
        check_code: the content carries a CheckCode to verify (False for ClusterD's flat entries).
        nodes: looks up the ConfigMap's Node (only whether it exists matters here); None: no Node is consulted.
            A ConfigMap whose Node does not exist is rejected as ``unknown-node`` and yields no faults (those it
            reported before are cleared); call :meth:`recheck` when the Node appears or goes.
    """

    def __init__(
        self,
        table: LevelTable,
        *,
        on_mismatch: Literal["use", "ignore"] = "use",
        name_prefix: str = NODE_INFO_PREFIX,
        check_code: bool = True,
        nodes: NodeLookup | None = None,
    ):
        self.nodes = nodes
        self.table = table
        self.check_code = check_code
        self.on_mismatch = on_mismatch
        self.name_prefix = name_prefix
        self._state: dict[tuple[str, str], tuple[object, object, View, frozenset[tuple[str, str]], str]] = {}
        self._bad_names: set[tuple[str, str]] = set()

    def __len__(self) -> int:
        return len(self._state)

    def update(self, cm: ConfigMapRecord, now: datetime) -> DetectResult:
        """Read a new version of a NodeD ConfigMap. Never raises.

        Rejections besides :func:`parse_node_info`'s: ``unexpected-name``, ``missing-key`` (no ``NodeInfo``),
        ``bad-timestamp`` (``updateTime``; the read time is used instead), ``unknown-node`` (no such Node: no
        faults). Each new write reports its own; a re-read (:meth:`recheck`) does not repeat them.
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
        resource_version: str = "",
        replay: bool = False,
    ) -> DetectResult:
        """As :meth:`update`, from the ConfigMap's `data` dict (`resource_version`: the write it comes from).
        `replay`: the content is read again, not newly written (its known rejections are not repeated)."""
        out = DetectResult()
        key = (namespace, name)
        value = data.get(KEY_NODE_INFO)
        ut = data.get(KEY_UPDATE_TIME)
        prev = self._state.get(key)
        if prev is not None and isinstance(value, str) and value == prev[0] and ut == prev[1]:
            return out
        src = source or ObjectRef("ConfigMap", namespace, name, uid)
        rej = Rejections(src)
        node = node_of(name, self.name_prefix)
        if node is None:
            if key not in self._bad_names:
                self._bad_names.add(key)
                rej.add("unexpected-name", f"{name[:80]!r} is not {self.name_prefix}<node>")
            out.rejections = rej.items
            return out
        if self.nodes is not None and self.nodes(node) is None:
            rej.add("unknown-node", f"node {node[:80]!r} does not exist: its NodeD ConfigMap is not acted on")
            if prev is not None:
                clear_all(prev[2], now, src, out)
            return self._finish(key, value, ut, {}, rej, prev, out, resource_version, replay)
        signal = now
        if ut is not None:
            signal = parse_rfc3339(ut, KEY_UPDATE_TIME, now, rej) or now
        old_view: View = prev[2] if prev else {}
        view = old_view
        if value is None:
            rej.add("missing-key", f"{KEY_NODE_INFO} is missing")
        elif not isinstance(value, (str, dict)):
            rej.add("wrong-type", f"{KEY_NODE_INFO}: expected string, got {json_type(value)}")
        else:
            faults = parse_node_info(
                value, node, src, self.table, signal, now, rej, on_mismatch=self.on_mismatch, check_code=self.check_code
            )
            if faults is not None:
                view, fresh = diff_views(old_view, faults, now, src, out)
                out.faults.extend(view[i].fault for i in fresh)
        return self._finish(key, value, ut, view, rej, prev, out, resource_version, replay)

    def _finish(
        self,
        key: tuple[str, str],
        value: object,
        ut: object,
        view: View,
        rej: Rejections,
        prev: tuple[object, object, View, frozenset[tuple[str, str]], str] | None,
        out: DetectResult,
        resource_version: str,
        replay: bool,
    ) -> DetectResult:
        """Put this read's rejections on `out` and remember what it saw."""
        seen = frozenset((r.reason, r.detail) for r in rej.items)
        # A new write reports its rejections even when they read as the previous write's did; the same write seen
        # again, a re-read (recheck) and ClusterD's embedded objects (read again on every ClusterD write) report
        # only what is new.
        again = replay or (bool(resource_version) and prev is not None and prev[4] == resource_version)
        old = prev[3] if prev and (again or isinstance(value, dict)) else frozenset()
        out.rejections = [r for r in rej.items if (r.reason, r.detail) not in old]
        # the unknown-node read keeps the strings too: the same content written again is skipped, not re-reported
        self._state[key] = (value if isinstance(value, str) else None, ut, view, seen, resource_version)
        return out

    def recheck(self, cm: ConfigMapRecord, now: datetime) -> DetectResult:
        """Read `cm` again because its Node appeared or went: a Node that appeared makes its faults count, one that
        went clears them (``unknown-node``). Rejections already reported for the same content are not repeated."""
        key = (cm.namespace, cm.name)
        st = self._state.get(key)
        if st is not None:  # forget the strings so the unchanged-content skip does not hide the content
            self._state[key] = (None, None, st[2], st[3], st[4])
        return self.update_data(
            cm.namespace, cm.name, cm.data, now, uid=cm.uid, resource_version=cm.resource_version, replay=True
        )

    def delete(self, namespace: str, name: str, now: datetime, *, uid: str = "") -> DetectResult:
        """The ConfigMap was deleted: NodeD's signal that the node is healthy again; all its faults clear."""
        out = DetectResult()
        prev = self._state.pop((namespace, name), None)
        self._bad_names.discard((namespace, name))  # a bad name that comes back is reported again
        if prev is not None:
            clear_all(prev[2], now, ObjectRef("ConfigMap", namespace, name, uid), out)
        return out
