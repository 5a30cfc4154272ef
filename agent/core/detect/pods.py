"""Pod records: business-plane failures, disruptions and pods stuck terminating on a dead node. Pure.

- business failure (kind business, level RestartBusiness): phase Failed, or a container terminated with a
  non-zero exit code (current or last state); ``codes`` is the exit code as text, ``reason`` the container's
  (``Error``, ``OOMKilled``, …), signal time its ``finishedAt``;
- disruption (kind disruption, level RestartBusiness): ``status.reason`` Evicted/Preempting or a True
  ``DisruptionTarget`` condition; a disrupted pod's container exits are not business failures (kept apart so
  evictions never consume the business retry budget);
- stuck terminating (kind disruption, reason ``StuckTerminating``): deletion requested more than
  `stuck_terminating` ago and the pod's node is down;
- ClusterD's ``fault-type`` pod label (``component/clusterd/pkg/application/faultmanager/jobprocess/relationfault/
  relation_fault_processor.go``, ``pkg/application/recover/hot_switch_controller.go``), as MindCluster's rescheduler
  reads it (``component/ascend-for-volcano/internal/rescheduling/task.go`` ``getRelationFault``,
  ``getTaskIsSoftwareFault``; ``reschedule.go`` ``getTaskHealthState``, ``setTaskCardHealthCode``; ``job.go``
  ``IsNormalJobNeedRestart``): a fault of that one pod (``Fault.pod`` set; kind chip, on the pod's chips and node),
  signal time when the agent saw the label (it carries none), cleared when the label goes. ``Separate``: level
  ``SeparateNPU``, reason ``RelationFaultSeparate`` (the task is a fault task: the job, or with pod rescheduling
  the pod, is restarted); ``SubHealth``: level ``SubHealthFault`` (the job's ``subHealthyStrategy`` decides);
  ``software``: level ``PreSeparateNPU``, reason ``SoftwareFault`` (no fault task: MindCluster leaves the job
  to be restarted "by the platform", i.e. its own failure). Any other value is ignored, as MindCluster does.
- hot switch delete (kind chip, level SubHealthFault, reason ``HotSwitchDelete``, naming the pod): ClusterD
  annotated the pod ``needVolcanoOpe: delete`` once the backup pod of a ``subHealthyStrategy: hotSwitch`` job took
  over (MindCluster ``internal/rescheduling/task.go`` ``getTaskHealthStateBySubHealth``: only then is the pod a
  sub-health fault task); it hits that pod only (agent.core.correlate.pods_hit) and the policy deletes it
  (agent.core.policy). Signal time: when the agent first saw the annotation.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from agent.core.cluster import PodRecord
from agent.core.detect.common import DetectResult, Identity
from agent.core.detect.diff import View, clear_all, diff_views
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef

POD_FAULT_LEVEL = FaultLevel.RESTART_BUSINESS
RELATION_FAULT_REASON = "RelationFaultSeparate"
"""Reason of a pod ClusterD labelled ``fault-type: Separate`` (MindCluster's ``util.RelationFault``)."""
SOFTWARE_FAULT_REASON = "SoftwareFault"
"""Reason of a pod ClusterD labelled ``fault-type: software``."""
SUB_HEALTH_LABEL_REASON = "RelationFaultSubHealth"
"""Reason of a pod ClusterD labelled ``fault-type: SubHealth``."""
FAULT_TYPE_LEVELS: dict[str, tuple[FaultLevel, str]] = {
    "Separate": (FaultLevel.SEPARATE, RELATION_FAULT_REASON),
    "SubHealth": (FaultLevel.SUB_HEALTH, SUB_HEALTH_LABEL_REASON),
    "software": (FaultLevel.PRE_SEPARATE, SOFTWARE_FAULT_REASON),
}
"""ClusterD's ``fault-type`` values (``component/ascend-for-volcano/common/util/type.go`` ``SeparateFaultStrategy``,
``SubHealthFaultStrategy``; ``internal/rescheduling/type.go`` ``softwareKey``) → the level and reason read."""
HOT_SWITCH_DELETE_REASON = "HotSwitchDelete"
"""`Fault.reason` of a pod ClusterD asked the scheduler to delete during a hot switch (``needVolcanoOpe: delete``)."""
OPE_TYPE_DELETE = "delete"
"""The ``needVolcanoOpe`` value asking for the pod's deletion (MindCluster ``api.OpeTypeDelete``)."""
_DISRUPTION_REASONS = frozenset({"Evicted", "Preempting", "Preempted", "Shutdown", "Terminated", "NodeShutdown"})


def pod_faults(
    pod: PodRecord, now: datetime, down_nodes: Collection[str], stuck_after: timedelta
) -> dict[Identity, Fault]:
    """The faults one pod shows now, by identity (see the module docstring). Pure, never raises."""
    ref = ObjectRef("Pod", pod.namespace, pod.name, pod.uid)
    faults: dict[Identity, Fault] = {}
    disruption = pod.disruption or (pod.status_reason if pod.status_reason in _DISRUPTION_REASONS else "")
    if disruption:
        faults[("disruption",)] = Fault(
            FaultKind.DISRUPTION, POD_FAULT_LEVEL, pod.node, pod.chips, (), now, now, ref, disruption, pod=ref
        )
    else:
        for t in pod.terminations:
            if t.exit_code != 0:
                faults[("exit", t.container, t.finished_at)] = Fault(
                    FaultKind.BUSINESS,
                    POD_FAULT_LEVEL,
                    pod.node,
                    pod.chips,
                    (str(t.exit_code),),
                    t.finished_at or now,
                    now,
                    ref,
                    t.reason or "Error",
                    pod=ref,
                )
        if pod.phase == "Failed" and not faults:
            faults[("failed",)] = Fault(
                FaultKind.BUSINESS,
                POD_FAULT_LEVEL,
                pod.node,
                pod.chips,
                (),
                now,
                now,
                ref,
                pod.status_reason or "Failed",
                pod=ref,
            )
    marked = FAULT_TYPE_LEVELS.get(pod.fault_type)
    if marked is not None and pod.node and pod.deletion_timestamp is None:
        level, reason = marked
        faults[("fault-type", pod.fault_type)] = Fault(
            FaultKind.CHIP, level, pod.node, pod.chips, (), now, now, ref, reason, pod=ref
        )
    if pod.need_volcano_ope == OPE_TYPE_DELETE and pod.deletion_timestamp is None:
        faults[("hot-switch-delete",)] = Fault(
            FaultKind.CHIP,
            FaultLevel.SUB_HEALTH,
            pod.node,
            pod.chips,
            (),
            now,
            now,
            ref,
            HOT_SWITCH_DELETE_REASON,
            pod=ref,
        )
    dt = pod.deletion_timestamp
    if dt is not None and pod.node in down_nodes and now - dt >= stuck_after:
        faults[("stuck",)] = Fault(
            FaultKind.DISRUPTION, POD_FAULT_LEVEL, pod.node, pod.chips, (), dt, now, ref, "StuckTerminating", pod=ref
        )
    return faults


class PodDetector:
    """Keeps each pod's last view; a fault is reported once per pod and cleared when the pod stops showing it
    or is deleted.

    Args:
        stuck_terminating: settings detect.stuck_terminating_s.
    """

    def __init__(self, *, stuck_terminating: timedelta):
        self.stuck_after = stuck_terminating
        self._views: dict[str, View] = {}
        self._terminating: dict[str, PodRecord] = {}

    def update(self, pod: PodRecord, now: datetime, down_nodes: Collection[str] = ()) -> DetectResult:
        """Read a new version of a pod. `down_nodes`: nodes currently down (NodeDetector.down_nodes())."""
        out = DetectResult()
        ref = ObjectRef("Pod", pod.namespace, pod.name, pod.uid)
        if pod.deletion_timestamp is not None:
            self._terminating[pod.uid] = pod
        new = pod_faults(pod, now, down_nodes, self.stuck_after)
        view, fresh = diff_views(self._views.get(pod.uid, {}), new, now, ref, out)
        out.faults.extend(view[i].fault for i in fresh)
        if view:
            self._views[pod.uid] = view
        else:
            self._views.pop(pod.uid, None)
        return out

    def delete(self, pod: PodRecord, now: datetime) -> DetectResult:
        """The pod is gone: its faults are cleared."""
        out = DetectResult()
        self._terminating.pop(pod.uid, None)
        view = self._views.pop(pod.uid, None)
        if view:
            clear_all(view, now, ObjectRef("Pod", pod.namespace, pod.name, pod.uid), out)
        return out

    def tick(self, now: datetime, down_nodes: Collection[str]) -> DetectResult:
        """Re-evaluate terminating pods (their deadline may have passed, their node may have gone down)."""
        out = DetectResult()
        for pod in list(self._terminating.values()):
            out.extend(self.update(pod, now, down_nodes))
        return out
