"""Fault injector for the testbed: writes what MindCluster's components and the kubelet would write.

- chip faults: the device plugin's ``kube-system/mindx-dl-deviceinfo-<node>`` ConfigMap (``DeviceInfoCfg`` with
  the ``-Fault`` JSON string, the health lists, ``UpdateTime`` in seconds, fault times in milliseconds and a real
  ``CheckCode``), and the node's allocatable NPU count lowered as the kubelet would;
- node hardware faults: NodeD's ``mindx-dl/mindx-dl-nodeinfo-<node>`` ConfigMap (deleted when healthy);
- node NotReady: kwok's heartbeat is switched off for the node (label) and its Ready condition set;
- training-process failure: a pod's status set to Failed with a terminated container and exit code.

The CheckCode encoder here is written independently of the agent's verifier (``agent/core/detect``), so the
end-to-end tests check one against the other. Formats: shared/DOMAIN.md §1.1–§1.4.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

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


def go_json(value: Any) -> str:
    """Go's encoding/json output for maps/strings/ints: sorted map keys, no spaces, HTML-safe escapes."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def chip_name(index: int) -> str:
    """Device plugin spelling of chip `index`, e.g. ``Ascend910-3``."""
    return f"Ascend910-{index}"


@dataclass(frozen=True)
class ChipFault:
    """One faulty chip: its index, codes (8 hex digits each), level name and card fault type."""

    chip: int
    codes: tuple[str, ...] = ("80E3A201",)
    level: str = "SeparateNPU"
    fault_type: str = "CardUnhealthy"  # or CardNetworkUnhealthy


def device_info_cm(node: str, faults: Sequence[ChipFault] = (), *, now: datetime) -> dict[str, Any]:
    """The device plugin's ConfigMap for `node` with `faults` (empty = all 8 chips healthy), written at `now`
    (``UpdateTime`` in whole seconds, each fault's ``fault_time`` in milliseconds of the same second)."""
    now_s = int(now.timestamp())
    now_ms = now_s * 1000
    bad = {f.chip for f in faults if f.fault_type == "CardUnhealthy"}
    net_bad = {f.chip for f in faults if f.fault_type == "CardNetworkUnhealthy"}
    healthy = [chip_name(i) for i in range(CHIPS_PER_NODE) if i not in bad]
    elements = []
    for f in faults:
        # Struct field order as the plugin marshals it; the whole array is stored as a string.
        elements.append(
            {
                "fault_type": f.fault_type,
                "npu_name": chip_name(f.chip),
                "large_model_fault_level": f.level,
                "fault_level": f.level,
                "fault_handling": f.level,
                "fault_code": ",".join(f.codes),
                "fault_time_and_level_map": {c: {"fault_time": now_ms, "fault_level": f.level} for c in f.codes},
            }
        )
    fault_text = json.dumps(elements, separators=(",", ":")) if elements else "[]"
    device_list = {
        PREFIX: ",".join(healthy),
        f"{PREFIX}-Fault": fault_text,
        f"{PREFIX}-NetworkUnhealthy": ",".join(chip_name(i) for i in sorted(net_bad)),
        f"{PREFIX}-Recovering": "",
        f"{PREFIX}-Unhealthy": ",".join(chip_name(i) for i in sorted(bad)),
    }
    device_info = {"DeviceList": device_list, "UpdateTime": now_s}
    check = hashlib.sha256(go_json(device_info).encode()).hexdigest()
    cfg = '{"DeviceInfo":' + go_json(device_info) + ',"SuperPodID":-2,"ServerIndex":-2,"CheckCode":"' + check + '"}'
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"mindx-dl-deviceinfo-{node}",
            "namespace": DEVICE_NS,
            "labels": {"mx-consumer-cim": "true"},
        },
        "data": {"DeviceInfoCfg": cfg, "ManuallySeparateNPU": "", "UpgradeFaultReason": "{}"},
    }


def node_info_cm(
    node: str, codes: Sequence[str] = ("00000011",), level: str = "SeparateFault", *, now: datetime
) -> dict[str, Any]:
    """NodeD's ConfigMap for `node` reporting one CPU fault at `level`, written at `now` (``updateTime``)."""
    status = {"SeparateFault": "UnHealthy", "PreSeparateFault": "PreSeparate"}.get(level, "Healthy")
    # Go marshals structs in field order (not sorted): build the text in that order.
    dev_text = (
        '{"DeviceType":"CPU","DeviceId":1,"FaultCode":'
        + json.dumps(list(codes), separators=(",", ":"))
        + ',"FaultLevel":'
        + json.dumps(level)
        + "}"
    )
    inner_text = '{"FaultDevList":[' + dev_text + '],"NodeStatus":' + json.dumps(status) + "}"
    check = hashlib.sha256(inner_text.encode()).hexdigest()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"mindx-dl-nodeinfo-{node}", "namespace": NODED_NS, "labels": {"mx-consumer-cim": "true"}},
        "data": {
            "NodeInfo": '{"NodeInfo":' + inner_text + ',"CheckCode":"' + check + '"}',
            "updateTime": rfc3339(now),
        },
    }


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


class Injector:
    """Writes faults into a testbed through its admin REST client. Every method checks its input (and that
    the node exists) before writing anything, raising InjectError. `clock` stamps every write (update times,
    fault times, heartbeat and transition times); tests that read back what was written pass their own."""

    def __init__(self, rest: Rest, clock: Clock = wall_clock) -> None:
        self.rest = rest
        self.clock = clock

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
            self._put_configmap(device_info_cm(name, now=self.clock()))

    def delete_nodes(self, names: Iterable[str]) -> None:
        for name in names:
            for path in (
                f"/api/v1/nodes/{name}",
                f"/api/v1/namespaces/{DEVICE_NS}/configmaps/mindx-dl-deviceinfo-{name}",
                f"/api/v1/namespaces/{NODED_NS}/configmaps/mindx-dl-nodeinfo-{name}",
            ):
                self._delete(path)

    # --- faults ----------------------------------------------------------------------------------------------
    def chip_fault(self, node: str, faults: Sequence[ChipFault]) -> None:
        """Report `faults` on `node` as the device plugin would, and lower allocatable as the kubelet would."""
        for f in faults:
            check_chip_fault(f)
        self.require_node(node)
        self._put_configmap(device_info_cm(node, faults, now=self.clock()))
        lost = len({f.chip for f in faults if f.fault_type == "CardUnhealthy"})
        self._set_allocatable(node, CHIPS_PER_NODE - lost)

    def chip_healthy(self, node: str) -> None:
        """All chips of `node` healthy again."""
        self.require_node(node)
        self._put_configmap(device_info_cm(node, now=self.clock()))
        self._set_allocatable(node, CHIPS_PER_NODE)

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
