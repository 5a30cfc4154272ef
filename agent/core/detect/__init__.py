"""Fault detection and classification: MindCluster ConfigMaps, Nodes and Pods in, Fault / FaultCleared out.

Pure (no I/O, no clock reads, no Kubernetes or Kafka client imports). Each detector keeps the previous view of
the objects it has seen so that a rewrite with the same faults yields nothing, a new fault a ``Fault`` and a
fault that went away a ``FaultCleared``; bad input yields ``Rejection`` records, never exceptions.
"""

from agent.core.detect.checkcode import check_code, go_marshal, verify_check_code
from agent.core.detect.clusterd import ClusterDDetector
from agent.core.detect.common import DetectResult
from agent.core.detect.deviceinfo import DeviceInfoDetector, parse_device_info
from agent.core.detect.flapping import FlapTracker
from agent.core.detect.levels import LevelTable, load_shipped_table, parse_fault_config
from agent.core.detect.nodeinfo import NodeInfoDetector, parse_node_info
from agent.core.detect.nodes import NodeDetector
from agent.core.detect.pods import PodDetector, pod_faults
from agent.core.detect.publicfault import PublicFaultDetector

__all__ = [
    "ClusterDDetector",
    "DetectResult",
    "DeviceInfoDetector",
    "FlapTracker",
    "LevelTable",
    "NodeDetector",
    "NodeInfoDetector",
    "PodDetector",
    "PublicFaultDetector",
    "check_code",
    "go_marshal",
    "load_shipped_table",
    "parse_device_info",
    "parse_fault_config",
    "parse_node_info",
    "pod_faults",
    "verify_check_code",
]
