"""A stand-in for the Ascend device plugin's chip allocation, for kwok nodes that have no kubelet.

On a real cluster MindCluster's scheduler plugin records the chips it picked in the pod's
``huawei.com/Ascend910`` annotation (``Ascend910-0,Ascend910-1``), and the device plugin, once the kubelet
allocated them, the chips really bound in ``huawei.com/AscendReal`` (Ascend/mind-cluster
component/ascend-device-plugin/pkg/device/ascendcommon.go ``AddPodAnnotation``; the agent reads AscendReal first).
Here, this process watches pods and, for every pod bound to a node that requests ``huawei.com/Ascend910`` and has
no such annotation yet, picks the lowest free chips of that node (skipping the chips the real plugin would not hand
out: :func:`withheld_chips`) and writes both annotations with the same, sorted, chips, and with them the device
plugin's ``ascend.kubectl.kubernetes.io/ascend-910-configuration`` (:func:`configuration`), which MindCluster's Ascend
Operator reads to build the rank table (the testbed's operator stand-in does the same).

Run as a testbed component: ``python -m testbed.npu_plugin --kubeconfig FILE``.
"""

from __future__ import annotations

import argparse
import json
import signal
import ssl
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from testbed.inject import CHIPS_PER_NODE, DEVICE_NS, PREFIX, chip_name
from testbed.rest import Rest, RestError

REAL_ANNOTATION = "huawei.com/AscendReal"
CONFIG_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"


def device_ip(host_ip: str, chip: int) -> str:
    """The testbed's stand-in for chip `chip`'s RoCE address on the node at `host_ip` (the real plugin reads it from
    the chip): ``192.<100 + chip>.<the host IP's last two octets>``: unique per chip, and per node where the nodes'
    IPs differ (kwok gives every node 127.0.0.1, so on the testbed they do not)."""
    octets = host_ip.split(".")
    tail = ".".join(octets[-2:]) if len(octets) == 4 else "0.0"
    return f"192.{100 + chip}.{tail}"


def configuration(pod: dict[str, Any], chips: list[str], host_ip: str) -> str:
    """The device plugin's configuration annotation for `pod` holding `chips` (``Ascend910-<n>`` names) on the node
    at `host_ip`: compact JSON ``{"pod_name", "server_id": the pod UID, "host_ip", "devices": [{"device_id": "<n>",
    "device_ip"}]}`` in chip order (Ascend/mind-cluster component/ascend-device-plugin pkg/common/common.go
    ``GetPodConfiguration``, pkg/device/ascendcommon.go ``getConfigAnno``; the A5 and super-pod fields left out).

    Raises:
        ValueError: a chip name does not end in ``-<n>``."""
    ids = sorted(int(c.rsplit("-", 1)[1]) for c in chips)
    meta = pod.get("metadata", {})
    body = {
        "pod_name": meta.get("name", ""),
        "server_id": meta.get("uid", ""),
        "host_ip": host_ip,
        "devices": [{"device_id": str(i), "device_ip": device_ip(host_ip, i)} for i in ids],
    }
    return json.dumps(body, separators=(",", ":"))


def _requested(pod: dict[str, Any]) -> int:
    total = 0
    for c in pod.get("spec", {}).get("containers", []):
        res = c.get("resources", {})
        value = res.get("limits", {}).get(PREFIX) or res.get("requests", {}).get(PREFIX)
        if value is not None:
            try:
                total += int(value)
            except ValueError:
                continue
    return total


MANUAL_KEY = "ManuallySeparateNPU"


def withheld_chips(data: dict[str, Any]) -> set[str]:
    """The chips of a node the device plugin does not hand out, from its ConfigMap's `data`: those in the
    ``<prefix>-Unhealthy`` and ``<prefix>-NetworkUnhealthy`` lists of ``DeviceInfoCfg`` and those in the
    ``ManuallySeparateNPU`` key (comma lists of chip names). MindCluster's plugin reports a chip of its manual
    separation cache unhealthy to the kubelet (Ascend/mind-cluster component/ascend-device-plugin
    pkg/device/ascendcommon.go ``isHealthy`` → pkg/common/fault_code.go ``GetFaultType``), writes that cache as the
    ``ManuallySeparateNPU`` key and drops from the cache a chip an operator removed from the key
    (``handleManuallySeparateNPUFaultInfo``), and at its start loads the key back into the cache
    (``LoadDeviceInfoCm``): a chip listed there is not allocated, even after its fault is gone. Unreadable JSON
    withholds nothing from the lists (the key still counts)."""
    out = {c.strip() for c in str(data.get(MANUAL_KEY, "")).split(",") if c.strip()}
    try:
        cfg = json.loads(data.get("DeviceInfoCfg", "{}"))
        dl = cfg.get("DeviceInfo", {}).get("DeviceList", {})
        text = ",".join(str(dl.get(f"{PREFIX}-{k}", "")) for k in ("Unhealthy", "NetworkUnhealthy"))
    except (ValueError, AttributeError):
        return out
    return out | {c for c in text.split(",") if c}


class Allocator:
    """Tracks which chips each node's live pods hold and picks free ones."""

    def __init__(self, rest: Rest) -> None:
        self.rest = rest
        self.held: dict[str, dict[str, set[str]]] = {}  # node -> pod uid -> chips

    def node_ip(self, node: str) -> str:
        """`node`'s InternalIP ("" when it has none or cannot be read; read each time: a node deleted and added
        again under its name may get another)."""
        try:
            addresses = self.rest.get(f"/api/v1/nodes/{node}").get("status", {}).get("addresses") or []
        except RestError:
            return ""
        return next((str(a.get("address", "")) for a in addresses if a.get("type") == "InternalIP"), "")

    def unhealthy(self, node: str) -> set[str]:
        try:
            cm = self.rest.get(f"/api/v1/namespaces/{DEVICE_NS}/configmaps/mindx-dl-deviceinfo-{node}")
        except RestError:
            return set()
        data = cm.get("data") if isinstance(cm, dict) else None
        return withheld_chips(data) if isinstance(data, dict) else set()

    def observe(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata", {})
        uid = meta.get("uid", "")
        node = pod.get("spec", {}).get("nodeName") or ""
        phase = pod.get("status", {}).get("phase", "")
        gone = kind == "DELETED" or phase in ("Succeeded", "Failed")
        if gone:
            for pods in self.held.values():
                pods.pop(uid, None)
            return
        annotation = meta.get("annotations", {}).get(PREFIX)
        if node and annotation:
            self.held.setdefault(node, {})[uid] = set(annotation.split(","))
            return
        want = _requested(pod)
        if not node or want <= 0 or uid in self.held.get(node, {}):
            return  # (already given chips: an event from before this process's own annotation landed)
        taken = set().union(*self.held.get(node, {}).values()) | self.unhealthy(node)
        free = [chip_name(i) for i in range(CHIPS_PER_NODE) if chip_name(i) not in taken]
        if len(free) < want:
            print(
                f"npu-plugin: node {node} has {len(free)} free chips, pod {meta.get('name')} wants {want}",
                file=sys.stderr,
                flush=True,
            )
            free = [chip_name(i) for i in range(CHIPS_PER_NODE)]  # over-commit rather than leave it unlabelled
        chips = free[:want]
        path = f"/api/v1/namespaces/{meta.get('namespace')}/pods/{meta.get('name')}"
        try:
            value = ",".join(chips)
            config = configuration(pod, chips, self.node_ip(node))
            annotations = {PREFIX: value, REAL_ANNOTATION: value, CONFIG_ANNOTATION: config}
            self.rest.merge_patch(path, {"metadata": {"annotations": annotations}})
        except RestError as e:
            if e.status != 404:
                print(f"npu-plugin: annotating {path} failed: {e}", file=sys.stderr, flush=True)
            return
        self.held.setdefault(node, {})[uid] = set(chips)


def _watch(rest: Rest, allocator: Allocator) -> None:
    listing = rest.get("/api/v1/pods")
    for pod in listing.get("items", []):
        allocator.observe("ADDED", pod)
    rv = listing["metadata"]["resourceVersion"]
    query = urllib.parse.urlencode({"watch": "1", "resourceVersion": rv, "timeoutSeconds": "300"})
    req = urllib.request.Request(f"{rest.base}/api/v1/pods?{query}")
    req.add_header("Authorization", f"Bearer {rest.token}")
    with urllib.request.urlopen(req, timeout=330, context=rest.ctx) as resp:
        for line in resp:
            event = json.loads(line)
            if event.get("type") == "ERROR":
                return
            allocator.observe(event["type"], event["object"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args(argv)
    cfg = yaml.safe_load(Path(args.kubeconfig).read_text())
    cluster = cfg["clusters"][0]["cluster"]
    rest = Rest(cluster["server"], cfg["users"][0]["user"]["token"], Path(cluster["certificate-authority"]))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("npu-plugin: watching pods", file=sys.stderr, flush=True)
    while True:
        allocator = Allocator(rest)
        try:
            _watch(rest, allocator)
        except (RestError, OSError, ssl.SSLError, ValueError, KeyError) as e:
            print(f"npu-plugin: watch ended: {e}; re-listing", file=sys.stderr, flush=True)
            time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
