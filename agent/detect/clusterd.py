"""ClusterD's cluster-wide ConfigMaps in mindx-dl (label ``mx-consumer-volcano: "true"``), an optional source.

Format (DOMAIN.md §1.3): ``cluster-info-device-<m>`` (one per 1000 nodes) and ``cluster-info-node-cm``; the data
key equals the ConfigMap name and holds a JSON map from a per-node ConfigMap name (``mindx-dl-deviceinfo-<node>``,
``mindx-dl-nodeinfo-<node>``) to that node's content: the same object the per-node ConfigMap holds under
``DeviceInfoCfg`` / ``NodeInfo``, embedded either as an object or as a JSON string. Each entry is read by the
per-node detectors, so the faults are the same as from the per-node ConfigMaps (their `source` names the
ClusterD ConfigMap); an entry that disappears from the map clears its faults.
"""

from __future__ import annotations

from datetime import datetime

from agent.detect.common import DetectResult, Rejections, parse_json
from agent.detect.deviceinfo import KEY_DEVICE_INFO, DeviceInfoDetector, NodeLookup, OnMismatch
from agent.detect.levels import LevelTable
from agent.detect.nodeinfo import KEY_NODE_INFO, NodeInfoDetector
from agent.model import ObjectRef
from agent.records import ConfigMapRecord

DEVICE_PREFIX = "cluster-info-device-"
NODE_CM = "cluster-info-node-cm"


class ClusterDDetector:
    """Splits ClusterD ConfigMaps into per-node entries and runs the per-node detectors on them.

    Args:
        table: the level table; on_mismatch: as the per-node detectors.
        nodes: the Node lookup of :class:`DeviceInfoDetector` (chip names and unknown nodes are checked per entry).
    """

    def __init__(self, table: LevelTable, *, on_mismatch: OnMismatch = "use", nodes: NodeLookup | None = None):
        self.devices = DeviceInfoDetector(table, on_mismatch=on_mismatch, nodes=nodes)
        self.nodes = NodeInfoDetector(table, on_mismatch=on_mismatch)
        self._entries: dict[tuple[str, str], set[str]] = {}

    def update(self, cm: ConfigMapRecord, now: datetime) -> DetectResult:
        """Read a new version of a ClusterD ConfigMap. Never raises.

        Rejections: ``unexpected-name`` (neither form of name), ``missing-key`` (no key named like the
        ConfigMap), JSON and ``wrong-type`` errors of the map, plus the per-node detectors' own.
        """
        out = DetectResult()
        src = ObjectRef("ConfigMap", cm.namespace, cm.name, cm.uid)
        rej = Rejections(src)
        is_device = cm.name.startswith(DEVICE_PREFIX)
        if not is_device and cm.name != NODE_CM:
            rej.add("unexpected-name", f"{cm.name[:80]!r} is not a ClusterD ConfigMap name")
            out.rejections = rej.items
            return out
        text = cm.data.get(cm.name)
        if not isinstance(text, str):
            rej.add("missing-key", f"key {cm.name[:80]!r} is missing")
            out.rejections = rej.items
            return out
        obj = parse_json(text, cm.name, rej)
        if obj is None:
            out.rejections = rej.items
            return out
        if not isinstance(obj, dict):
            rej.add("wrong-type", f"{cm.name}: expected object, got {type(obj).__name__}")
            out.rejections = rej.items
            return out
        out.rejections = rej.items
        key = (cm.namespace, cm.name)
        old = self._entries.get(key, set())
        seen: set[str] = set()
        for entry_name, content in obj.items():
            seen.add(entry_name)
            if is_device:
                res = self.devices.update_data(cm.namespace, entry_name, {KEY_DEVICE_INFO: content}, now, source=src)
            else:
                res = self.nodes.update_data(cm.namespace, entry_name, {KEY_NODE_INFO: content}, now, source=src)
            out.extend(res)
        for gone in old - seen:
            det = self.devices if is_device else self.nodes
            out.extend(det.delete(cm.namespace, gone, now, uid=cm.uid))
        self._entries[key] = seen
        return out

    def delete(self, namespace: str, name: str, now: datetime) -> DetectResult:
        """The ClusterD ConfigMap was deleted: every fault read from it is cleared."""
        out = DetectResult()
        for entry in self._entries.pop((namespace, name), set()):
            det = self.devices if name.startswith(DEVICE_PREFIX) else self.nodes
            out.extend(det.delete(namespace, entry, now))
        return out
