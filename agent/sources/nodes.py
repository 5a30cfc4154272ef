"""Nodes → :class:`~agent.core.cluster.NodeRecord` (core/v1 Node: conditions, taints, a few labels, NPU allocatable and
capacity)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agent.core.cluster import NODE_SN_ANNOTATION, NodeCondition, NodeRecord, Taint
from agent.core.detect.gpu import NVSENTINEL_LABEL_KEYS, NVSENTINEL_QUARANTINE_ANNOTATIONS
from agent.core.faults import Rejection
from agent.sources.common import Bad, Metadata, get_dict, get_list, get_str, intern, object_ref, parse_time

DEFAULT_NODE_LABELS = ("host-arch", "accelerator-type", "node.kubernetes.io/npu.chip.name", "kubernetes.io/hostname")
DEFAULT_NPU_RESOURCES = ("huawei.com/Ascend910", "huawei.com/npu")


class NodeConverter:
    """Callable raw Node dict → NodeRecord, or a Rejection.

    Args:
        label_keys: node labels kept on the record (others are dropped to keep the cache slim).
        npu_resources: resource names counted as NPUs (allocatable and capacity), first present wins.
        annotation_keys: node annotations kept on the record (the agent's quarantine hold; others dropped);
            the serial number annotation (``product-serial-number``, for public faults' ``nodeSN``) is always kept.
        NVSentinel's marks (its state and cordon-by labels, fault-quarantine's cordon annotation:
        agent.core.detect.gpu.nvsentinel_mark) are always kept too, so the agent can leave its nodes to it.

    Rejection reasons: ``missing-metadata``, ``wrong-type``, ``bad-timestamp``, ``bad-allocatable``.
    """

    def __init__(
        self,
        label_keys: tuple[str, ...] = DEFAULT_NODE_LABELS,
        npu_resources: tuple[str, ...] = DEFAULT_NPU_RESOURCES,
        annotation_keys: tuple[str, ...] = (),
    ) -> None:
        self.label_keys = tuple(dict.fromkeys((*label_keys, *NVSENTINEL_LABEL_KEYS)))
        self.npu_resources = npu_resources
        self.annotation_keys = tuple(
            dict.fromkeys((*annotation_keys, NODE_SN_ANNOTATION, *NVSENTINEL_QUARANTINE_ANNOTATIONS))
        )

    def __call__(self, obj: dict[str, Any]) -> NodeRecord | Rejection:
        """Convert one node. Never raises."""
        try:
            return self._convert(obj)
        except Bad as e:
            return Rejection(object_ref(obj, "Node"), e.reason, e.detail)

    def _convert(self, obj: dict[str, Any]) -> NodeRecord:
        m = Metadata(obj, "Node")
        spec = get_dict(obj, "spec", "node")
        status = get_dict(obj, "status", "node")
        conditions = []
        for c in get_list(status, "conditions", "status"):
            if not isinstance(c, dict):
                raise Bad("wrong-type", "status.conditions[] is not an object")
            conditions.append(
                NodeCondition(
                    type=intern(get_str(c, "type", "status.conditions[]")),
                    status=intern(get_str(c, "status", "status.conditions[]")),
                    reason=intern(get_str(c, "reason", "status.conditions[]")),
                    last_transition=parse_time(c.get("lastTransitionTime"), "conditions[].lastTransitionTime"),
                    last_heartbeat=parse_time(c.get("lastHeartbeatTime"), "conditions[].lastHeartbeatTime"),
                    message=_problem_message(c),
                )
            )
        taints = []
        for t in get_list(spec, "taints", "spec"):
            if not isinstance(t, dict):
                raise Bad("wrong-type", "spec.taints[] is not an object")
            taints.append(
                Taint(
                    key=intern(get_str(t, "key", "spec.taints[]")),
                    value=intern(get_str(t, "value", "spec.taints[]")),
                    effect=intern(get_str(t, "effect", "spec.taints[]")),
                )
            )
        labels = tuple((intern(k), intern(m.labels[k])) for k in self.label_keys if k in m.labels)
        annotations = tuple((k, m.annotations[k]) for k in self.annotation_keys if k in m.annotations)
        npu: int | None = None
        capacity: int | None = None
        resource = ""
        alloc = get_dict(status, "allocatable", "status")
        cap = get_dict(status, "capacity", "status")
        for res in self.npu_resources:
            q = alloc.get(res)
            c = cap.get(res)
            if q is None and c is None:
                continue
            if q is not None and not _whole_number(q):
                raise Bad("bad-allocatable", f"status.allocatable[{res!r}]={q!r} is not a whole number")
            if c is not None and not _whole_number(c):
                raise Bad("bad-allocatable", f"status.capacity[{res!r}]={c!r} is not a whole number")
            npu = int(q) if q is not None else None
            capacity = int(c) if c is not None else None
            resource = res
            break
        unsched = spec.get("unschedulable", False)
        if not isinstance(unsched, bool):
            raise Bad("wrong-type", "spec.unschedulable is not a boolean")
        return NodeRecord(
            name=intern(m.name),
            uid=m.uid,
            resource_version=m.rv,
            conditions=tuple(conditions),
            taints=tuple(taints),
            labels=labels,
            unschedulable=unsched,
            npu_allocatable=npu,
            annotations=annotations,
            npu_capacity=capacity,
            npu_resource=intern(resource),
        )


MAX_CONDITION_MESSAGE = 1024
"""Characters of a True condition's message kept (NVSentinel's connector writes at most 1024 by default)."""


def _problem_message(c: dict[str, Any]) -> str:
    """A True condition's message (not Ready's: it never names a fault), cut to MAX_CONDITION_MESSAGE; else ""."""
    message = c.get("message")
    if c.get("status") != "True" or c.get("type") == "Ready" or not isinstance(message, str):
        return ""
    return message[:MAX_CONDITION_MESSAGE]


def _whole_number(quantity: object) -> bool:
    """True for a resource quantity of ASCII digits only (``"8"``): ``str.isdigit`` also takes ``"²"`` (which
    ``int`` refuses) and fullwidth ``"８"``, which no apiserver writes."""
    return isinstance(quantity, str) and quantity.isascii() and quantity.isdigit()


def node_signal_time(rec: NodeRecord) -> datetime | None:
    """The node's newest condition lastTransitionTime (a heartbeat alone does not move it)."""
    newest: datetime | None = None
    for c in rec.conditions:
        if c.last_transition is not None and (newest is None or c.last_transition > newest):
            newest = c.last_transition
    return newest
