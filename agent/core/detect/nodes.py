"""Node objects: a node that is down (Ready False/Unknown or unreachable/not-ready taints, past a grace) and
node-problem-detector conditions. Pure: the caller passes `now` and calls :meth:`NodeDetector.tick` periodically
so a node whose grace runs out between two updates is still reported.

After the agent itself lost the apiserver (:meth:`NodeDetector.resumed`, the node watch answering again at R),
what the node objects say about readiness was written while nobody, the agent included, could see heartbeats:
the lifecycle controller marks healthy nodes Ready=Unknown with a transition time from inside the outage. So a
node not Ready then is not down until its health is re-established: a heartbeat of its own seen after R (a
newer Ready ``lastHeartbeatTime`` than it had at R; Ready True from before the outage is not one), or
``health_recheck`` elapsed since R without one (the controller's
own grace, kube-controller-manager's node-monitor-grace-period). And its not-ready period counts from R at the
earliest, never from a timestamp written during the agent's blindness. A node already reported down stays so.

Formats: core/v1 Node conditions and the taints the node lifecycle controller sets
(``node.kubernetes.io/unreachable``, ``node.kubernetes.io/not-ready``); problem condition types are configurable
(settings: detect.problem_condition_types); GPU conditions (NVSentinel's, node-problem-detector's) are read by
agent.core.detect.gpu.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from agent.core.cluster import NodeCondition, NodeRecord
from agent.core.detect.common import DetectResult, Identity
from agent.core.detect.diff import View, clear_all, diff_views
from agent.core.detect.gpu import MAX_DETAIL, is_gpu_condition, read_gpu_condition
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef

TAINT_REASONS = {"node.kubernetes.io/unreachable": "Unreachable", "node.kubernetes.io/not-ready": "NotReadyTaint"}
NODE_DOWN_LEVEL = FaultLevel.SEPARATE
PROBLEM_LEVEL = FaultLevel.SEPARATE
"""A True problem condition (kernel deadlock, read-only filesystem, NPU problem) can hang a job without failing
it, so it moves jobs off the node like a node that is down. A GPU condition takes its level from what it says
instead (:func:`problem_fault`)."""


def problem_fault(node: str, c: NodeCondition, now: datetime, src: ObjectRef) -> Fault:
    """The node fault a True problem condition `c` reports. Reason: the condition's type.

    A GPU condition (agent.core.detect.gpu.is_gpu_condition: NVSentinel's checks, ``GPUProblem``, or an XID or
    NVSentinel action in its text) gets the level its recommended action, XID or check asks for
    (agent.core.detect.gpu.read_gpu_condition), its XIDs as codes, the GPUs it names as devices and its reason and
    message as detail. Any other gets :data:`PROBLEM_LEVEL`, its reason and message as detail. The device plugin
    does not say which pod holds which GPU, so either is a fault of the whole node."""
    since = c.last_transition or now
    if is_gpu_condition(c.type, c.reason, c.message):
        gpu = read_gpu_condition(c.type, c.reason, c.message)
        return Fault(
            FaultKind.NODE, gpu.level, node, (), gpu.codes, since, now, src, c.type,
            detail=gpu.detail, devices=gpu.devices,
        )  # fmt: skip
    detail = f"{c.reason}: {c.message}" if c.reason and c.message else (c.reason or c.message)
    return Fault(FaultKind.NODE, PROBLEM_LEVEL, node, (), (), since, now, src, c.type, detail=detail[:MAX_DETAIL])


class NodeDetector:
    """Node faults from Node records.

    Args:
        not_ready_grace: how long Ready may be False/Unknown before the node is down (settings:
            detect.node_not_ready_grace_s, default 5 s instead of Kubernetes' 40 s + 300 s).
        problem_condition_types: condition types meaning a node fault when True.
        health_recheck: after the agent's node watch came back, how long a node not Ready waits for a heartbeat
            before it is believed down (settings: detect.node_health_recheck_s, default 50 s).
    """

    def __init__(
        self,
        *,
        not_ready_grace: timedelta,
        problem_condition_types: Iterable[str],
        health_recheck: timedelta = timedelta(seconds=50),
    ):
        self.grace = not_ready_grace
        self.problem_types = frozenset(problem_condition_types)
        self.health_recheck = health_recheck
        self._records: dict[str, NodeRecord] = {}
        self._views: dict[str, View] = {}
        self._first_not_ready: dict[str, datetime] = {}
        self._resumed_at: datetime | None = None  # when the node watch last came back after losing the apiserver
        # nodes whose health is not re-established since then -> their Ready lastHeartbeatTime at that moment
        self._unconfirmed: dict[str, datetime | None] = {}

    def resumed(self, now: datetime) -> None:
        """The node watch answers again after the agent lost the apiserver: every node's health must be
        re-established before it can be reported down (module docstring)."""
        self._resumed_at = now
        for name, rec in self._records.items():
            ready = rec.condition("Ready")
            self._unconfirmed[name] = ready.last_heartbeat if ready is not None else None

    def _health_unconfirmed(self, node: NodeRecord, now: datetime) -> bool:
        """Whether `node`'s readiness is still unknown since the agent's blindness ended (and forget it when not)."""
        if self._resumed_at is None or now - self._resumed_at >= self.health_recheck:
            self._unconfirmed.pop(node.name, None)
            return False
        if node.name not in self._unconfirmed:
            return False
        ready = node.condition("Ready")
        baseline = self._unconfirmed[node.name]
        # A heartbeat of its own after the agent came back. Ready True alone is not one: the list that follows
        # the return shows the status from before the outage, and the controller's Unknown keeps the heartbeat.
        beat = ready.last_heartbeat if ready is not None else None
        if beat is not None and (baseline is None or beat > baseline):
            del self._unconfirmed[node.name]
            return False
        return True

    def update(self, node: NodeRecord, now: datetime) -> DetectResult:
        """Read a new version of a Node; returns new and cleared faults. Never raises."""
        if node.name not in self._records and self._resumed_at is not None:  # first seen since the watch came back
            ready = node.condition("Ready")
            self._unconfirmed[node.name] = ready.last_heartbeat if ready is not None else None
        self._records[node.name] = node
        return self._evaluate(node, now)

    def delete(self, name: str, now: datetime) -> DetectResult:
        """The Node object was deleted: its faults are cleared (its pods surface their own faults)."""
        out = DetectResult()
        self._records.pop(name, None)
        self._first_not_ready.pop(name, None)
        self._unconfirmed.pop(name, None)
        view = self._views.pop(name, None)
        if view:
            clear_all(view, now, ObjectRef("Node", "", name), out)
        return out

    def tick(self, now: datetime) -> DetectResult:
        """Re-evaluate nodes whose Ready condition is not True (their grace may have run out)."""
        out = DetectResult()
        for name in list(self._first_not_ready):
            rec = self._records.get(name)
            if rec is not None:
                out.extend(self._evaluate(rec, now))
        return out

    def down_nodes(self) -> frozenset[str]:
        """Names of nodes currently reported down (for stuck-terminating pod detection)."""
        return frozenset(n for n, v in self._views.items() if ("down",) in v)

    def _evaluate(self, node: NodeRecord, now: datetime) -> DetectResult:
        out = DetectResult()
        src = ObjectRef("Node", "", node.name, node.uid)
        faults: dict[Identity, Fault] = {}
        ready = node.condition("Ready")
        down_reason = ""
        down_since: datetime | None = None
        unconfirmed = self._health_unconfirmed(node, now)
        # The lifecycle controller's taints count only while Ready is not True: while a node recovers it lifts
        # them in separate writes, and a leftover taint on a Ready node is not a new fault.
        taint = ""
        if ready is None or ready.status != "True":
            taint = next((TAINT_REASONS[t.key] for t in node.taints if t.key in TAINT_REASONS), "")
        if (ready is not None and ready.status != "True") or taint:
            first = self._first_not_ready.setdefault(node.name, now)
            # Unknown -> False (kubelet back but not ready) moves lastTransitionTime although the node never
            # became Ready: the not-ready period starts at the earlier of the two, so the node stays down.
            since = min(ready.last_transition, first) if ready is not None and ready.last_transition else first
            if self._resumed_at is not None and ("down",) not in self._views.get(node.name, {}):
                since = max(since, self._resumed_at)  # not from a time the agent could not see
            # The grace holds for the condition and the taints alike: the controller manager adds its
            # not-ready/unreachable taint the moment Ready leaves True, so a short blip carries one too.
            if not unconfirmed and now - since >= self.grace:
                down_since = since
                if ready is not None and ready.status != "True":
                    down_reason = "NotReady" if ready.status == "False" else "NodeUnknown"
                else:
                    down_reason = taint
        else:
            self._first_not_ready.pop(node.name, None)
        if down_reason:
            faults[("down",)] = Fault(
                FaultKind.NODE, NODE_DOWN_LEVEL, node.name, (), (), down_since or now, now, src, down_reason
            )
        elif unconfirmed and ("down",) in self._views.get(node.name, {}):
            faults[("down",)] = self._views[node.name][("down",)].fault  # reported before: stays down
        for c in node.conditions:
            if c.type in self.problem_types and c.status == "True":
                faults[("condition", c.type)] = problem_fault(node.name, c, now, src)
        view, fresh = diff_views(self._views.get(node.name, {}), faults, now, src, out)
        out.faults.extend(view[i].fault for i in fresh)
        if view:
            self._views[node.name] = view
        else:
            self._views.pop(node.name, None)
        return out
