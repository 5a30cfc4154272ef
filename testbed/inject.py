"""Fault injector for the testbed: writes what MindCluster's components and the kubelet would write.

- chip faults: the device plugin's ``kube-system/mindx-dl-deviceinfo-<node>`` ConfigMap (``DeviceInfoCfg`` with
  the ``-Fault`` JSON string, the health lists, ``UpdateTime`` in seconds, fault times in milliseconds and a real
  ``CheckCode``), and the node's allocatable NPU count lowered as the kubelet would;
- A3 switch faults: the same ConfigMap's ``SwitchInfoCfg`` (one string-encoded event per fault, the switch level
  vocabulary, ``NodeStatus`` from the most severe event), which ClusterD reports as ``mindx-dl-switchinfo-<node>``;
- node hardware faults: NodeD's ``mindx-dl/mindx-dl-nodeinfo-<node>`` ConfigMap (deleted when healthy);
- public faults: a ConfigMap labelled ``mc-consumer-publicfault=true`` with key ``PublicFault``, as other monitors
  write it for ClusterD;
- node NotReady: kwok's heartbeat is switched off for the node (label) and its Ready condition set;
- training-process failure: a pod's status set to Failed with a terminated container and exit code.

Every MindCluster ConfigMap is encoded by our Go program (testbed/mcencode, through :mod:`testbed.encoder`)
with MindCluster's field names and types, so byte layout and CheckCode are Go's own and no Python encoder can
share a mistake with the agent's parsers. Python says only which faults to write. Formats: the files named in
testbed/mcencode/shapes.go (Ascend/mind-cluster, commit 22bb3d98).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from testbed.encoder import EncodeError, shared
from testbed.rest import Rest, RestError

PREFIX = "huawei.com/Ascend910"
DEVICE_NS = "kube-system"
NODED_NS = "mindx-dl"
HEARTBEAT_LABEL = "testbed.fault-agent.io/heartbeat"
CHIPS_PER_NODE = 8

Clock = Callable[[], datetime]
"""The time the simulated component stamps on what it writes (aware UTC). Every builder takes the instant as an
argument and the Injector holds one clock, so a test passes the same instant to what it writes and to what
reads it; only a live testbed uses :func:`wall_clock`."""


def wall_clock() -> datetime:
    """The machine's current UTC time: what the device plugin, NodeD and the kubelet stamp on a real cluster."""
    return datetime.now(UTC)


def rfc3339(at: datetime) -> str:
    """`at` as Kubernetes writes a metav1.Time: ``2026-11-29T12:00:00Z`` (seconds, UTC)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def chip_name(index: int) -> str:
    """Device plugin spelling of chip `index`, e.g. ``Ascend910-3``."""
    return f"Ascend910-{index}"


@dataclass(frozen=True)
class ChipFault:
    """One faulty chip: its index, codes (8 hex digits each), level name and card fault type; `age_s`: how long
    before the write the chip faulted (its ``fault_time``; 0: at the write)."""

    chip: int
    codes: tuple[str, ...] = ("80E3A201",)
    level: str = "SeparateNPU"
    fault_type: str = "CardUnhealthy"  # or CardNetworkUnhealthy
    age_s: float = 0.0


@dataclass(frozen=True)
class SwitchFault:
    """One A3 switch event: its assembled code (component/ascend-device-plugin/build/SwitchFaultCode.json), the
    switch chip and port it was raised on, and its level in the switch vocabulary."""

    code: str = "[0x00f103b0,155907,na,na]"
    switch_chip: int = 0
    port: int = 3
    level: str = "Separate"


@dataclass(frozen=True)
class PublicFault:
    """One public fault as a monitor reports it (MindCluster ``api.Fault``): 9-character code, fault type
    (``NPU``, ``Node``, ``Network``, ``Storage``), ``occur``/``recover``/``once``, the chips it hits on `node`."""

    node: str
    code: str = "220001001"
    fault_type: str = "NPU"
    chips: tuple[int, ...] = (0,)
    assertion: str = "occur"
    fault_id: str = "testbed-fault-0001"
    node_sn: str = ""
    description: str = "injected by the testbed"


@dataclass
class _NodeDevices:
    """What the simulated device plugin of one node reports now (it rewrites the whole ConfigMap each time)."""

    chips: list[ChipFault] = field(default_factory=list)
    switch: list[SwitchFault] | None = None  # None: not an A3 node (no SwitchInfoCfg key)


def _device_request(
    node: str, faults: Sequence[ChipFault], switch: Sequence[SwitchFault] | None, now: datetime
) -> dict[str, Any]:
    now_s = int(now.timestamp())
    # fault times in milliseconds, as the device plugin writes them (the chip's alarm time): two faults of one chip
    # written within one second are two occurrences to a flap count keyed by fault time (agent.core.detect.flapping)
    now_ms = int(now.timestamp() * 1000)
    req: dict[str, Any] = {
        "node": node,
        "update_time": now_s,
        "faults": [
            {
                "chip": f.chip,
                "codes": list(f.codes),
                "level": f.level,
                "fault_type": f.fault_type,
                "time_ms": now_ms - int(f.age_s * 1000),
            }
            for f in faults
        ],
    }
    if switch is not None:
        req["switch"] = {
            "enabled": True,
            "events": [
                {
                    "code": e.code,
                    "switch_chip": e.switch_chip,
                    "port": e.port,
                    "level": e.level,
                    "time_ms": now_ms,
                }
                for e in switch
            ],
        }
    return req


def device_info_cm(
    node: str, faults: Sequence[ChipFault] = (), *, now: datetime, switch: Sequence[SwitchFault] | None = None
) -> dict[str, Any]:
    """The device plugin's ConfigMap for `node` with `faults` (empty = all 8 chips healthy), written at `now`
    (``UpdateTime`` in whole seconds, each fault's ``fault_time`` the same instant in milliseconds); `switch`
    (A3 only) adds ``SwitchInfoCfg`` with those events (empty = a healthy switch). Encoded by Go (mcencode).

    Raises:
        InjectError: a fault the encoder refuses (chip out of range, unknown level or code shape).
    """
    try:
        return shared().device_cm(_device_request(node, faults, switch, now))
    except EncodeError as e:
        raise InjectError(str(e)) from e


def device_info_cms(nodes: Sequence[str], *, now: datetime) -> list[dict[str, Any]]:
    """Healthy device-plugin ConfigMaps for `nodes` in one encoder round trip (the benchmarks' fast path)."""
    return shared().device_cms([_device_request(n, (), None, now) for n in nodes])


def node_info_cm(
    node: str, codes: Sequence[str] = ("00000011",), level: str = "SeparateFault", *, now: datetime
) -> dict[str, Any]:
    """NodeD's ConfigMap for `node` reporting one CPU fault at `level`, written at `now` (``updateTime``).
    Encoded by Go (mcencode).

    Raises:
        InjectError: a level NodeD does not write.
    """
    req = {
        "node": node,
        "update_time": int(now.timestamp()),
        "devs": [{"device_type": "CPU", "device_id": 1, "codes": list(codes), "level": level}],
    }
    try:
        return shared().node_cm(req)
    except EncodeError as e:
        raise InjectError(str(e)) from e


def public_fault_cm(
    name: str, namespace: str, faults: Sequence[PublicFault], *, now: datetime, resource: str = "testbed"
) -> dict[str, Any]:
    """A public-fault ConfigMap `namespace`/`name` reporting `faults` at `now` (``timestamp`` and each
    ``faultTime`` in milliseconds), as a monitor writes it for ClusterD. Encoded by Go (mcencode).

    Raises:
        InjectError: the encoder refused the request.
    """
    now_ms = int(now.timestamp()) * 1000
    info = {
        "id": f"{resource}-{name}"[:128],
        "timestamp": now_ms,
        "version": "1.0",
        "resource": resource,
        "faults": [
            {
                "faultId": f.fault_id,
                "faultType": f.fault_type,
                "faultCode": f.code,
                "faultTime": now_ms,
                "assertion": f.assertion,
                "faultLocation": {},
                "influence": [{"nodeName": f.node, "nodeSN": f.node_sn, "deviceIds": list(f.chips)}],
                "description": f.description,
            }
            for f in faults
        ],
    }
    try:
        return shared().public_cm(name, namespace, info)
    except EncodeError as e:
        raise InjectError(str(e)) from e


def kwok_node(name: str, *, chips: int = CHIPS_PER_NODE) -> dict[str, Any]:
    """A kwok Node labelled like the guide's Atlas A2 nodes with `chips` allocatable NPUs."""
    resources = {"cpu": "192", "memory": "1536Gi", "pods": "110", PREFIX: str(chips)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "host-arch": "huawei-x86",
                "accelerator-type": "module-910b-8",
                "node-role.kubernetes.io/worker": "worker",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {},
        "status": {"allocatable": resources, "capacity": dict(resources)},
    }


GPU_RESOURCE = "nvidia.com/gpu"
GPUS_PER_NODE = 8


def kwok_gpu_node(name: str, *, gpus: int = GPUS_PER_NODE) -> dict[str, Any]:
    """A kwok Node like a GPU node that NVIDIA's device plugin and GPU feature discovery run on: `gpus`
    allocatable ``nvidia.com/gpu`` and the label ``nvidia.com/gpu.present=true``. No device ConfigMap: GPU faults
    reach the agent as node conditions (NVSentinel's, node-problem-detector's)."""
    resources = {"cpu": "128", "memory": "2048Gi", "pods": "110", GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "node-role.kubernetes.io/worker": "worker",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {},
        "status": {"allocatable": resources, "capacity": dict(resources)},
    }


CHIP_LEVELS = (
    "NotHandleFault",
    "SubHealthFault",
    "RestartRequest",
    "RestartBusiness",
    "FreeRestartNPU",
    "RestartNPU",
    "PreSeparateNPU",
    "SeparateNPU",
    "ManuallySeparateNPU",
)
NODE_LEVELS = ("NotHandleFault", "PreSeparateFault", "SeparateFault")
SWITCH_LEVELS = ("NotHandle", "SubHealthFault", "RestartRequest", "PreSeparate", "Separate")
PUBLIC_FAULT_TYPES = ("NPU", "Node", "Network", "Storage")
PUBLIC_ASSERTIONS = ("occur", "recover", "once")


class InjectError(ValueError):
    """The requested fault cannot be written (unknown node, chip index out of range, malformed code or level).
    Nothing was written."""


def check_chip_fault(fault: ChipFault) -> None:
    """Raise InjectError unless `fault` is one the device plugin could report."""
    if not 0 <= fault.chip < CHIPS_PER_NODE:
        raise InjectError(f"chip index {fault.chip} is out of range 0-{CHIPS_PER_NODE - 1}")
    for code in fault.codes:
        if len(code) != 8 or any(c not in "0123456789ABCDEFabcdef" for c in code):
            raise InjectError(f"fault code {code!r} is not 8 hexadecimal digits")
    if fault.level not in CHIP_LEVELS:
        raise InjectError(f"fault level {fault.level!r} is not one of {', '.join(CHIP_LEVELS)}")
    if not 0 <= fault.age_s <= 3600:
        raise InjectError(f"fault age {fault.age_s!r} s is not within 0-3600 s")


def check_switch_fault(fault: SwitchFault) -> None:
    """Raise InjectError unless `fault` is a switch event an A3 device plugin could report."""
    if fault.level not in SWITCH_LEVELS:
        raise InjectError(f"switch fault level {fault.level!r} is not one of {', '.join(SWITCH_LEVELS)}")
    if not fault.code or fault.switch_chip < 0 or fault.port < 0:
        raise InjectError(f"switch fault {fault} needs a code and non-negative switch chip and port")


def check_public_fault(fault: PublicFault) -> None:
    """Raise InjectError unless `fault` is one MindCluster's public-fault interface accepts."""
    if len(fault.code) != 9:
        raise InjectError(f"public fault code {fault.code!r} is not 9 characters")
    if fault.fault_type not in PUBLIC_FAULT_TYPES:
        raise InjectError(f"public fault type {fault.fault_type!r} is not one of {', '.join(PUBLIC_FAULT_TYPES)}")
    if fault.assertion not in PUBLIC_ASSERTIONS:
        raise InjectError(f"assertion {fault.assertion!r} is not one of {', '.join(PUBLIC_ASSERTIONS)}")
    if not 8 <= len(fault.fault_id) <= 128:
        raise InjectError(f"fault id {fault.fault_id!r} must be 8 to 128 characters")
    for chip in fault.chips:
        if not 0 <= chip < CHIPS_PER_NODE:
            raise InjectError(f"chip index {chip} is out of range 0-{CHIPS_PER_NODE - 1}")


class Injector:
    """Writes faults into a testbed through its admin REST client. Every method checks its input (and that
    the node exists) before writing anything, raising InjectError. `clock` stamps every write (update times,
    fault times, heartbeat and transition times); tests that read back what was written pass their own.

    Like the device plugin it stands in for, it rewrites a node's whole device ConfigMap on each change; it
    remembers per node what it reported (chip faults, and switch events once the node reported any, which makes
    it an A3 node), so a chip fault written after a switch fault keeps the switch fault and vice versa."""

    def __init__(self, rest: Rest, clock: Clock = wall_clock) -> None:
        self.rest = rest
        self.clock = clock
        self._devices: dict[str, _NodeDevices] = {}

    def _write_devices(self, node: str) -> None:
        st = self._devices.setdefault(node, _NodeDevices())
        self._put_configmap(device_info_cm(node, st.chips, now=self.clock(), switch=st.switch))

    def require_node(self, node: str) -> None:
        """Raise InjectError if `node` does not exist."""
        try:
            self.rest.get(f"/api/v1/nodes/{node}")
        except RestError as e:
            if e.status == 404:
                raise InjectError(f"node {node!r} does not exist (python -m testbed nodes N adds some)") from e
            raise

    # --- cluster set-up --------------------------------------------------------------------------------------
    def add_nodes(self, names: Iterable[str]) -> None:
        """Create kwok nodes (idempotent) with healthy device-plugin ConfigMaps."""
        for name in names:
            self.rest.apply(kwok_node(name))
            self._devices[name] = _NodeDevices()
            self._write_devices(name)

    def add_gpu_nodes(self, names: Iterable[str]) -> None:
        """Create kwok GPU nodes (idempotent, :func:`kwok_gpu_node`)."""
        for name in names:
            self.rest.apply(kwok_gpu_node(name))

    def delete_nodes(self, names: Iterable[str]) -> None:
        for name in names:
            self._devices.pop(name, None)
            for path in (
                f"/api/v1/nodes/{name}",
                f"/api/v1/namespaces/{DEVICE_NS}/configmaps/mindx-dl-deviceinfo-{name}",
                f"/api/v1/namespaces/{NODED_NS}/configmaps/mindx-dl-nodeinfo-{name}",
            ):
                self._delete(path)

    # --- faults ----------------------------------------------------------------------------------------------
    def chip_fault(self, node: str, faults: Sequence[ChipFault]) -> None:
        """Lower `node`'s allocatable as the kubelet would, then report `faults` as the device plugin would."""
        for f in faults:
            check_chip_fault(f)
        self.require_node(node)
        lost = len({f.chip for f in faults if f.fault_type == "CardUnhealthy"})
        # allocatable first: the agent acts on the ConfigMap within milliseconds, and a replacement pod the
        # scheduler placed before the node lost its chip would land on the faulty chip (what the kubelet and the
        # device plugin do in no fixed order; a test needs the node full once the agent can act)
        self._set_allocatable(node, CHIPS_PER_NODE - lost)
        self._devices.setdefault(node, _NodeDevices()).chips = list(faults)
        self._write_devices(node)

    def chip_healthy(self, node: str) -> None:
        """All chips of `node` healthy again (its switch, if it reported one, as it was)."""
        self.require_node(node)
        self._devices.setdefault(node, _NodeDevices()).chips = []
        self._write_devices(node)
        self._set_allocatable(node, CHIPS_PER_NODE)

    def switch_fault(self, node: str, faults: Sequence[SwitchFault] = (SwitchFault(),)) -> None:
        """An A3 device plugin reports `faults` on `node`'s switch (``SwitchInfoCfg``; empty = healthy switch).
        A ``Separate`` event makes the node's NodeStatus ``UnHealthy``: the whole node is out."""
        for f in faults:
            check_switch_fault(f)
        self.require_node(node)
        self._devices.setdefault(node, _NodeDevices()).switch = list(faults)
        self._write_devices(node)

    def switch_healthy(self, node: str) -> None:
        """`node`'s switch healthy again (``SwitchInfoCfg`` with no event, NodeStatus ``Healthy``)."""
        self.switch_fault(node, ())

    def public_fault(
        self, faults: Sequence[PublicFault], *, name: str = "testbed-public-fault", namespace: str = NODED_NS
    ) -> None:
        """A monitor writes (or rewrites) its public-fault ConfigMap `namespace`/`name` with `faults`."""
        for f in faults:
            check_public_fault(f)
        for node in {f.node for f in faults}:
            self.require_node(node)
        self._put_configmap(public_fault_cm(name, namespace, faults, now=self.clock()))

    def public_fault_deleted(self, *, name: str = "testbed-public-fault", namespace: str = NODED_NS) -> None:
        """The monitor deletes its public-fault ConfigMap (MindCluster keeps the faults until a ``recover``)."""
        self._delete(f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    def flapping_chip(
        self, node: str, chip: int, times: int, *, pause_s: float = 1.0, codes: tuple[str, ...] = ("80E18402",)
    ) -> None:
        """Fault and heal the same chip `times` times (UpdateTime must move: the plugin writes once a second)."""
        if times < 1:
            raise InjectError(f"times must be at least 1, got {times}")
        if not 0 <= pause_s <= 3600:  # also refuses NaN
            raise InjectError(f"pause must be 0 to 3600 seconds, got {pause_s}")
        self.require_node(node)
        for _ in range(times):
            self.chip_fault(node, [ChipFault(chip, codes)])
            time.sleep(pause_s)
            self.chip_healthy(node)
            time.sleep(pause_s)

    def node_fault(self, node: str, level: str = "SeparateFault", codes: Sequence[str] = ("00000011",)) -> None:
        """NodeD reports a node hardware fault."""
        if level not in NODE_LEVELS:
            raise InjectError(f"NodeD fault level {level!r} is not one of {', '.join(NODE_LEVELS)}")
        self.require_node(node)
        self._put_configmap(node_info_cm(node, codes, level, now=self.clock()))

    def node_fault_cleared(self, node: str) -> None:
        """NodeD deletes its ConfigMap when the node is healthy again."""
        self.require_node(node)
        self._delete(f"/api/v1/namespaces/{NODED_NS}/configmaps/mindx-dl-nodeinfo-{node}")

    def node_not_ready(self, node: str, status: str = "Unknown") -> None:
        """Stop kwok's heartbeat for `node` and set its Ready condition to `status` (Unknown or False)."""
        self.require_node(node)
        self.rest.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {HEARTBEAT_LABEL: "off"}}})
        now = rfc3339(self.clock())
        node_obj = self.rest.get(f"/api/v1/nodes/{node}")
        conditions = [c for c in node_obj.get("status", {}).get("conditions", []) if c.get("type") != "Ready"]
        conditions.append(
            {
                "type": "Ready",
                "status": status,
                "reason": "NodeStatusUnknown",
                "message": "injected by the testbed",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        )
        self.rest.request(
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            {"status": {"conditions": conditions}},
            content_type="application/strategic-merge-patch+json",
        )

    def node_ready(self, node: str) -> None:
        """Give `node` back to kwok, which makes it Ready again."""
        self.require_node(node)
        self.rest.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {HEARTBEAT_LABEL: None}}})
        now = rfc3339(self.clock())
        node_obj = self.rest.get(f"/api/v1/nodes/{node}")
        conditions = [c for c in node_obj.get("status", {}).get("conditions", []) if c.get("type") != "Ready"]
        conditions.append(
            {
                "type": "Ready",
                "status": "False",
                "reason": "Recovering",
                "message": "",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        )
        # kwok's node-ready stage picks up nodes whose Ready is not True.
        self.rest.request(
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            {"status": {"conditions": conditions}},
            content_type="application/strategic-merge-patch+json",
        )

    def pod_failed(self, namespace: str, pod: str, exit_code: int = 1, reason: str = "Error") -> None:
        """The training process in `pod` exits with `exit_code`: the pod turns Failed."""
        try:
            obj = self.rest.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
        except RestError as e:
            if e.status == 404:
                raise InjectError(f"pod {namespace}/{pod} does not exist") from e
            raise
        now = rfc3339(self.clock())
        statuses = []
        for c in obj["spec"]["containers"]:
            statuses.append(
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {"exitCode": exit_code, "reason": reason, "startedAt": now, "finishedAt": now}
                    },
                }
            )
        conditions = [
            {"type": "Ready", "status": "False", "lastTransitionTime": now, "reason": "PodFailed"},
            {"type": "ContainersReady", "status": "False", "lastTransitionTime": now, "reason": "PodFailed"},
        ]
        self.rest.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{pod}/status",
            {"status": {"phase": "Failed", "containerStatuses": statuses, "conditions": conditions}},
            content_type="application/strategic-merge-patch+json",
        )

    def pod_evicted(self, namespace: str, pod: str) -> None:
        """The kubelet evicts `pod` (node pressure): phase Failed, reason ``Evicted``."""
        try:
            self.rest.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
        except RestError as e:
            if e.status == 404:
                raise InjectError(f"pod {namespace}/{pod} does not exist") from e
            raise
        self.rest.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{pod}/status",
            {"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}},
            content_type="application/strategic-merge-patch+json",
        )

    def pod_evicted_by_api(self, namespace: str, pod: str) -> None:
        """Evict `pod` through the Eviction API (policy/v1 ``pods/eviction``, as ``kubectl drain`` does): the
        apiserver deletes it with its grace period, so Volcano's job controller sees the pod deleted, its
        ``PodEvicted`` event (a job's ``PodEvicted -> RestartJob`` policy restarts the job). Unlike
        :meth:`pod_evicted` (the kubelet's eviction: phase Failed, which Volcano reports as ``PodFailed``).

        Raises:
            InjectError: the pod does not exist.
        """
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
        try:
            self.rest.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", body)
        except RestError as e:
            if e.status == 404:
                raise InjectError(f"pod {namespace}/{pod} does not exist") from e
            raise

    # --- internals -------------------------------------------------------------------------------------------
    def _put_configmap(self, cm: dict[str, Any]) -> None:
        ns, name = cm["metadata"]["namespace"], cm["metadata"]["name"]
        try:
            self.rest.request("PUT", f"/api/v1/namespaces/{ns}/configmaps/{name}", cm)
        except RestError as e:
            if e.status != 404:
                raise
            self.rest.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm)

    def _set_allocatable(self, node: str, chips: int) -> None:
        self.rest.request(
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            {"status": {"allocatable": {PREFIX: str(chips)}}},
            content_type="application/strategic-merge-patch+json",
        )

    def _delete(self, path: str) -> None:
        try:
            self.rest.request("DELETE", path)
        except RestError as e:
            if e.status != 404:
                raise
