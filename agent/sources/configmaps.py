"""ConfigMaps → :class:`~agent.core.cluster.ConfigMapRecord` (device plugin, NodeD, fault config, ClusterD).

The data is kept as the strings the producers wrote; the detectors parse it (DOMAIN.md §1.1–§1.3). Here
only the object's shape is checked, plus the producer's own timestamp for the lag counter.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from agent.core.cluster import ConfigMapRecord
from agent.core.faults import Rejection
from agent.sources.common import Bad, Metadata, intern, object_ref, parse_time, str_map

FAULT_CONFIG_NAME = "mindx-dl-fault-config"
CLUSTER_INFO_PREFIX = "cluster-info-"
DEVICE_INFO_KEY = "DeviceInfoCfg"
NODE_INFO_TIME_KEY = "updateTime"

# "UpdateTime":<unix seconds> inside DeviceInfoCfg; a regex avoids parsing kilobytes of JSON for a timestamp.
_UPDATE_TIME = re.compile(r'"UpdateTime"\s*:\s*(\d{1,12})')


def convert_configmap(obj: dict[str, Any]) -> ConfigMapRecord | Rejection:
    """Raw ConfigMap dict → ConfigMapRecord, or a Rejection (``missing-metadata``, ``wrong-type``). Never raises.

    ``binaryData`` is ignored: no producer the agent reads uses it.
    """
    try:
        m = Metadata(obj, "ConfigMap")
        data = str_map(obj, "data", "configmap")
    except Bad as e:
        return Rejection(object_ref(obj, "ConfigMap"), e.reason, e.detail)
    return ConfigMapRecord(
        namespace=m.namespace,
        name=m.name,
        uid=m.uid,
        resource_version=m.rv,
        labels=tuple((intern(k), intern(v)) for k, v in m.labels.items()),
        data=dict(data),
    )


def device_info_signal_time(rec: ConfigMapRecord) -> datetime | None:
    """The device plugin's ``DeviceInfo.UpdateTime`` (Unix seconds) as a UTC datetime, or None."""
    text = rec.data.get(DEVICE_INFO_KEY)
    if not text:
        return None
    match = _UPDATE_TIME.search(text)
    if match is None:
        return None
    try:
        return datetime.fromtimestamp(int(match.group(1)), tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def node_info_signal_time(rec: ConfigMapRecord) -> datetime | None:
    """NodeD's ``updateTime`` key (RFC 3339), or None when absent or unreadable."""
    try:
        return parse_time(rec.data.get(NODE_INFO_TIME_KEY), "data.updateTime")
    except Bad:
        return None
