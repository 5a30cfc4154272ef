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

Modules: ``wire`` (the names, keys and key suffixes), ``faults`` (a read's faults by identity), ``parse`` (one
``DeviceInfoCfg`` value: envelope, CheckCode, then its faults), ``detector`` (:class:`DeviceInfoDetector`: each
ConfigMap's last view and what an update changes). This package's names are the public face.
"""

from agent.core.detect.chips import NodeChips
from agent.core.detect.deviceinfo.detector import DeviceInfoDetector, NodeLookup, OnMismatch
from agent.core.detect.deviceinfo.faults import DeviceSnapshot
from agent.core.detect.deviceinfo.parse import parse_device_info
from agent.core.detect.deviceinfo.wire import (
    DEVICE_INFO_PREFIX,
    KEY_DEVICE_INFO,
    KEY_MANUAL,
    KEY_SWITCH,
    node_of,
)

__all__ = [
    "DEVICE_INFO_PREFIX",
    "KEY_DEVICE_INFO",
    "KEY_MANUAL",
    "KEY_SWITCH",
    "DeviceInfoDetector",
    "DeviceSnapshot",
    "NodeChips",
    "NodeLookup",
    "OnMismatch",
    "node_of",
    "parse_device_info",
]
