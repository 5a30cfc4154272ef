"""ClusterD's cluster-wide ConfigMaps in mindx-dl (label ``mx-consumer-volcano: "true"``), an optional source.

Format (MindCluster, repository Ascend/mind-cluster): ClusterD writes ``cluster-info-device-<m>``,
``cluster-info-node-cm`` and ``cluster-info-switch-<x>`` (component/clusterd/pkg/common/constant/configmap.go)
from component/clusterd/pkg/application/resource/report.go. Each has one data key, named like the ConfigMap,
whose value is a JSON map from a per-node ConfigMap name to that node's **flat** entry, with no CheckCode (ClusterD
verified the per-node hash before aggregating); the entry structs are in
component/clusterd/pkg/common/constant/type.go:

- device (``DeviceInfo``), key ``mindx-dl-deviceinfo-<node>``: ``{"DeviceList":{…},"UpdateTime":<unix s>,
  "CmName":str,"SuperPodID":int,"RackID":int,"ServerIndex":int}``; ``DeviceList`` as the device plugin writes it
  (``-Fault`` may hold ``PublicFault`` elements ClusterD joined in), read by
  :class:`agent.core.detect.deviceinfo.DeviceInfoDetector`;
- node (``NodeInfo``), key ``mindx-dl-nodeinfo-<node>``: ``{"FaultDevList":[…],"NodeStatus":str,"CmName":str,
  "UpdateTime":<unix ms>}`` (milliseconds: component/clusterd/pkg/domain/node/node_util.go; 0 when NodeD's
  ``updateTime`` was missing), read by :class:`agent.core.detect.nodeinfo.NodeInfoDetector`;
- switch (``SwitchInfoFromCM``), key ``mindx-dl-switchinfo-<node>``: the device plugin's ``SwitchInfoCfg`` fields
  plus ``CmName``, read by :class:`agent.core.detect.switchinfo.SwitchInfoDetector`.

An entry that is not a JSON object (``null``, a string) is rejected as ``wrong-type`` and changes nothing: the
faults read from it before stay, as for an unreadable per-node ConfigMap (MindCluster's scheduler plugin fails
the whole map on a string entry and keeps its old cache: component/ascend-for-volcano/common/k8s/cmmgr.go
``dealClusterDeviceInfo``; a ``null`` entry it reads as an empty one).

An **empty string** is what ClusterD writes when it has nothing to report in that ConfigMap (no node, or fewer
chunks than before): every fault read earlier from that ConfigMap clears. So does an entry that disappears from
the map, or the ConfigMap's deletion, unless another chunk has reported that entry since (a node that moved to
another chunk, which may be read before the old chunk drops it). Faults name the ClusterD ConfigMap as their
`source`.

Where we differ from MindCluster: its scheduler plugin (component/ascend-for-volcano/common/k8s/cmmgr.go) fails to
unmarshal an empty string and keeps its old cache; we read it as "all healthy", which is what ClusterD means by
it. ClusterD splits the device and switch maps into chunks by size (800 KB) with no fixed node → chunk order
(component/clusterd/pkg/common/util/util.go ``SplitMapToSafeChunks``); an entry is cleared only by the chunk that
reported it last, so a node that moves to another chunk keeps its faults when the new chunk is read first and is
cleared and raised again when the old chunk is read first.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.chips import NodeChips
from agent.core.detect.common import DetectResult, Rejections, json_type, parse_json
from agent.core.detect.deviceinfo import (
    DEVICE_INFO_PREFIX,
    KEY_DEVICE_INFO,
    DeviceInfoDetector,
    NodeLookup,
    OnMismatch,
    node_of,
)
from agent.core.detect.flapping import FlapTracker
from agent.core.detect.levels import LevelTable
from agent.core.detect.nesting import MAX_NESTING, too_deep, too_deep_message
from agent.core.detect.nodeinfo import KEY_NODE_INFO, KEY_UPDATE_TIME, NODE_INFO_PREFIX, NodeInfoDetector
from agent.core.detect.switchinfo import SWITCH_INFO_PREFIX, SwitchInfoDetector
from agent.core.faults import ObjectRef

DEVICE_PREFIX = "cluster-info-device-"
NODE_CM = "cluster-info-node-cm"
SWITCH_PREFIX = "cluster-info-switch-"


def family(name: str) -> str | None:
    """``device``, ``node`` or ``switch`` for a ClusterD ConfigMap name, None for any other name."""
    if name.startswith(DEVICE_PREFIX) and len(name) > len(DEVICE_PREFIX):
        return "device"
    if name == NODE_CM:
        return "node"
    if name.startswith(SWITCH_PREFIX) and len(name) > len(SWITCH_PREFIX):
        return "switch"
    return None


def _node_time(value: object) -> object:
    """A node entry's ``UpdateTime`` (Unix ms; 0 = unknown) as the RFC 3339 text NodeD's own key would hold."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    try:
        return datetime.fromtimestamp(value / 1000, tz=UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return str(value)  # rejected as bad-timestamp by the node detector


class ClusterDDetector:
    """Splits ClusterD ConfigMaps into per-node entries and runs the per-node detectors on them.

    Args:
        table: the level table; on_mismatch: accepted for symmetry with the per-node detectors (the entries
            carry no CheckCode, so it never applies).
        nodes: the Node lookup of :class:`DeviceInfoDetector`: every entry (device, node and switch) naming a Node
            that does not exist is rejected as ``unknown-node`` and gives no fault; device entries' chip names are
            checked against the Node. When a Node appears, goes or changes its NPU capacity, :meth:`recheck` reads
            its entries again, without waiting for ClusterD's next write.
        flapping: the per-chip flapping tracker (shared with the per-node device detector: one occurrence, one
            signal time, is counted once whichever source reports it); None disables it.
        fast_path: skip a device or node entry equal to the one last read while its Node looks the same (exists or
            not, same NPU resource and capacity). ClusterD rewrites a whole chunk (up to ~800 KB, ~1,900 healthy
            nodes) whenever one node's report changes, up to 5 times a second (report.go ``maxTimePerSecond``), so
            every other entry of the chunk is such a repeat. False: every entry goes through its detector (the
            benchmark's baseline, bench/bench_clusterd.py; the result is the same).
    """

    def __init__(
        self,
        table: LevelTable,
        *,
        on_mismatch: OnMismatch = "use",
        nodes: NodeLookup | None = None,
        flapping: FlapTracker | None = None,
        fast_path: bool = True,
    ):
        self.devices = DeviceInfoDetector(
            table, on_mismatch=on_mismatch, nodes=nodes, check_code=False, flapping=flapping
        )
        self.nodes = NodeInfoDetector(table, on_mismatch=on_mismatch, check_code=False, nodes=nodes)
        self.switches = SwitchInfoDetector(table, nodes=nodes)
        self._entries: dict[tuple[str, str], set[str]] = {}
        # (namespace, family, entry name) -> the ConfigMap that reported it last: an entry that moved to another
        # chunk is cleared only by the chunk that holds it now (the old chunk may be read after the new one); by
        # family, so that a name misplaced in another family's ConfigMap never takes a real entry over
        self._holder: dict[tuple[str, str, str], str] = {}
        self._lookup = nodes
        self.fast_path = fast_path
        # (namespace, family, entry name) -> a device or node entry as last read, its Node then and the level
        # table's generation then (see fast_path; what recheck reads again)
        self._read: dict[tuple[str, str, str], tuple[dict[str, Any], NodeChips | None, int]] = {}
        self._generation = 0  # of the level table: a reload has every entry classified again at its next read
        self._sources: dict[tuple[str, str], ObjectRef] = {}  # (namespace, ConfigMap name) -> as last read
        # (namespace, ConfigMap name) -> its entries that are not objects, as last read (reported once)
        self._not_objects: dict[tuple[str, str], set[str]] = {}

    def set_table(self, table: LevelTable, now: datetime) -> DetectResult:
        """Use a new level table; device entries are re-classified (see DeviceInfoDetector.set_table)."""
        out = self.devices.set_table(table, now)
        self._generation += 1  # the node entries are classified with the new table at ClusterD's next write
        self.nodes.table = table
        self.switches.table = table
        return out

    def tick(self, now: datetime) -> DetectResult:
        """Time-based flapping of the device entries (see DeviceInfoDetector.tick)."""
        return self.devices.tick(now)

    def update(self, cm: ConfigMapRecord, now: datetime) -> DetectResult:
        """Read a new version of a ClusterD ConfigMap. Never raises.

        Rejections: ``unexpected-name`` (not one of the three name forms), ``missing-key`` (no key named like the
        ConfigMap), JSON and ``wrong-type`` errors of the map or of an entry, plus the per-node detectors' own.
        """
        out = DetectResult()
        src = ObjectRef("ConfigMap", cm.namespace, cm.name, cm.uid)
        rej = Rejections(src)
        kind = family(cm.name)
        if kind is None:
            rej.add("unexpected-name", f"{cm.name[:80]!r} is not a ClusterD ConfigMap name")
            out.rejections = rej.items
            return out
        text = cm.data.get(cm.name)
        if not isinstance(text, str):
            rej.add("missing-key", f"key {cm.name[:80]!r} is missing")
            out.rejections = rej.items
            return out
        # each entry's nesting is checked alone, below: one entry nested too deep does not hide the others
        obj = parse_json(text, cm.name, rej, limit=None) if text.strip() else {}
        if obj is None:
            out.rejections = rej.items
            return out
        if not isinstance(obj, dict):
            rej.add("wrong-type", f"{cm.name}: expected object, got {json_type(obj)}")
            out.rejections = rej.items
            return out
        key = (cm.namespace, cm.name)
        self._sources[key] = src
        old = self._entries.get(key, set())
        reported = self._not_objects.get(key, set())
        seen: set[str] = set()
        not_objects: set[str] = set()
        for entry_name, entry in obj.items():
            if not isinstance(entry, dict) or too_deep(entry, MAX_NESTING):
                seen.add(entry_name)  # unreadable: its faults as read before stay, as for a per-node ConfigMap
                not_objects.add(entry_name)
                if entry_name not in reported and not isinstance(entry, dict):  # once, not at every rewrite
                    rej.add("wrong-type", f"{str(entry_name)[:80]}: expected object, got {json_type(entry)}")
                elif entry_name not in reported:
                    rej.add("too-deep", f"{str(entry_name)[:80]}: {too_deep_message()}")
                continue
            seen.add(entry_name)
            self._holder[(cm.namespace, kind, entry_name)] = cm.name
            if not self._read_already(kind, cm.namespace, entry_name, entry):
                try:
                    out.extend(self._entry(kind, cm.namespace, entry_name, entry, now, src))
                except Exception:  # not handled here, raised on: the entry is read again at the next write, not skipped
                    self._read.pop((cm.namespace, kind, entry_name), None)
                    raise
        out.rejections[:0] = rej.items
        for gone in old - seen:
            out.extend(self._drop(kind, cm.namespace, cm.name, gone, now, src))
        self._entries[key] = seen
        self._not_objects[key] = not_objects
        return out

    def _drop(self, kind: str, namespace: str, cm_name: str, entry: str, now: datetime, src: ObjectRef) -> DetectResult:
        """ConfigMap `cm_name` no longer holds `entry`: its faults clear unless another chunk reported it since."""
        if self._holder.get((namespace, kind, entry)) != cm_name:
            return DetectResult()
        del self._holder[(namespace, kind, entry)]
        return self._gone(kind, namespace, entry, now, src)

    def _read_already(self, kind: str, namespace: str, name: str, entry: dict[str, Any]) -> bool:
        """True when the device or node entry `name` is the one last read and its Node looks as it did then (see
        `fast_path`); else the entry and the Node now are remembered, for the next write and :meth:`recheck`. A
        device entry whose Node changed is classified again even when the entry did not (its chip names mean other
        chips now). The switch detector keeps its entries and skips the unchanged ones itself."""
        if kind == "switch":
            return False
        node = node_of(name, DEVICE_INFO_PREFIX if kind == "device" else NODE_INFO_PREFIX)
        if node is None:
            return False
        seen = self._lookup(node) if self._lookup is not None else None
        key = (namespace, kind, name)
        last = self._read.get(key)
        if last is not None and last[1] != seen and kind == "device":
            self.devices.forget_content(namespace, name)  # the same entry names other chips of the Node now
        if self.fast_path and last is not None and last[2] == self._generation and last[1] == seen and last[0] == entry:
            return True
        self._read[key] = (entry, seen, self._generation)
        return False

    def _entry(
        self, kind: str, namespace: str, name: str, entry: dict[str, Any], now: datetime, src: ObjectRef
    ) -> DetectResult:
        if kind == "device":
            # a missing DeviceList stays missing (refused); a null one is an empty list, as Go reads it
            info = {k: entry[k] for k in ("DeviceList",) if k in entry} | {"UpdateTime": entry.get("UpdateTime")}
            cfg = {"DeviceInfo": info}
            return self.devices.update_data(namespace, name, {KEY_DEVICE_INFO: cfg}, now, source=src)
        if kind == "node":
            info = {"NodeInfo": {"FaultDevList": entry.get("FaultDevList"), "NodeStatus": entry.get("NodeStatus")}}
            data: dict[str, Any] = {KEY_NODE_INFO: info}
            if (ut := _node_time(entry.get("UpdateTime"))) is not None:
                data[KEY_UPDATE_TIME] = ut
            return self.nodes.update_data(namespace, name, data, now, source=src)
        return self.switches.update_entry(namespace, name, entry, now, src)

    def _gone(self, kind: str, namespace: str, name: str, now: datetime, src: ObjectRef) -> DetectResult:
        self._read.pop((namespace, kind, name), None)
        if kind == "device":
            return self.devices.delete(namespace, name, now, uid=src.uid)
        if kind == "node":
            return self.nodes.delete(namespace, name, now, uid=src.uid)
        return self.switches.delete(namespace, name, now, src)

    def recheck(self, node: str, now: datetime) -> DetectResult:
        """Node `node` appeared, went or changed its NPU resource or capacity: its device, node and switch entries
        as last read are read again against the Node now (a Node that appeared makes their faults count, one that
        went clears them and its entries are rejected as ``unknown-node``), as agent.engine.detecting does for the
        per-node ConfigMaps: ClusterD writes again only when some entry of the chunk changes. Never raises."""
        out = DetectResult()
        namespaces = sorted({ns for ns, _ in self._entries})
        kinds = (("device", DEVICE_INFO_PREFIX), ("node", NODE_INFO_PREFIX), ("switch", SWITCH_INFO_PREFIX))
        for kind, prefix in kinds:
            name = prefix + node
            for ns in namespaces:
                holder = self._holder.get((ns, kind, name))
                if holder is None:
                    continue
                src = self._sources.get((ns, holder)) or ObjectRef("ConfigMap", ns, holder)
                if kind == "switch":
                    out.extend(self.switches.recheck(ns, name, now, src))
                    continue
                last = self._read.get((ns, kind, name))
                if last is not None and not self._read_already(kind, ns, name, last[0]):  # else: Node as it was
                    out.extend(self._entry(kind, ns, name, last[0], now, src))
        return out

    def delete(self, namespace: str, name: str, now: datetime) -> DetectResult:
        """The ClusterD ConfigMap was deleted: every fault read from it is cleared."""
        out = DetectResult()
        kind = family(name)
        src = self._sources.pop((namespace, name), None) or ObjectRef("ConfigMap", namespace, name)
        self._not_objects.pop((namespace, name), None)
        for entry in self._entries.pop((namespace, name), set()):
            if kind is not None:
                out.extend(self._drop(kind, namespace, name, entry, now, src))
        return out
