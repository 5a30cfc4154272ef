"""ClusterD's ``fault-type`` pod label read as a fault, as MindCluster's rescheduler reads it (issue 36, item 7).

``component/ascend-for-volcano/internal/rescheduling/task.go`` ``getRelationFault``, ``getTaskIsSoftwareFault``;
``reschedule.go`` ``getTaskHealthState`` (``Separate`` → a fault task of type ``RelationFaultSeparate``),
``setTaskCardHealthCode`` (``SubHealth`` → a sub-health fault for the job's strategy); ``job.go``
``IsNormalJobNeedRestart`` (``software`` → no fault task, left to the platform).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import factories

from agent.core.cluster import FaultScheduling, PodRecord
from agent.core.correlate import correlate
from agent.core.detect.pods import PodDetector, pod_faults
from agent.core.faults import FaultKind, FaultLevel
from agent.core.policy import Action, RetryLedger, decide
from agent.settings import PolicySettings
from agent.sources.pods import PodConverter

NOW = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
FIXTURES = Path(__file__).parent.parent.parent / "fixtures"
STUCK = timedelta(seconds=60)


def _raw_pod(fault_type: str | None) -> dict[str, Any]:
    doc = next(d for d in yaml.safe_load_all((FIXTURES / "pods-as-scheduled.yaml").read_text()) if d["kind"] == "Pod")
    doc["metadata"] |= {"uid": "u-1", "resourceVersion": "1"}
    if fault_type is not None:
        doc["metadata"].setdefault("labels", {})["fault-type"] = fault_type
    return doc


def test_the_converter_keeps_the_label() -> None:
    labelled = PodConverter()(_raw_pod("Separate"))
    plain = PodConverter()(_raw_pod(None))
    assert isinstance(labelled, PodRecord)
    assert isinstance(plain, PodRecord)
    assert (labelled.fault_type, plain.fault_type) == ("Separate", "")


@pytest.mark.parametrize(
    ("fault_type", "level", "reason"),
    [
        pytest.param("Separate", FaultLevel.SEPARATE, "RelationFaultSeparate", id="separate"),
        pytest.param("SubHealth", FaultLevel.SUB_HEALTH, "RelationFaultSubHealth", id="sub-health"),
        pytest.param("software", FaultLevel.PRE_SEPARATE, "SoftwareFault", id="software"),
    ],
)
def test_each_value_is_a_fault_of_that_pod(fault_type: str, level: FaultLevel, reason: str) -> None:
    pod = factories.pod("job-1", node="n2", chips=("Ascend910-4",), fault_type=fault_type)
    (fault,) = pod_faults(pod, NOW, (), STUCK).values()
    assert (fault.kind, fault.level, fault.reason, fault.node, fault.chips) == (
        FaultKind.CHIP, level, reason, "n2", ("Ascend910-4",),
    )  # fmt: skip
    assert fault.pod is not None
    assert fault.pod.name == "job-1"


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(factories.pod(fault_type="separate"), id="other-spelling"),  # MindCluster compares exactly
        pytest.param(factories.pod(fault_type=""), id="absent"),
        pytest.param(factories.pod(fault_type="Separate", node=""), id="unscheduled"),
        pytest.param(factories.pod(fault_type="Separate", deletion_timestamp=NOW), id="terminating"),
    ],
)
def test_no_fault_without_a_known_value_on_a_live_scheduled_pod(pod: PodRecord) -> None:
    assert pod_faults(pod, NOW, (), STUCK) == {}


def test_the_fault_clears_when_clusterd_removes_the_label() -> None:
    detector = PodDetector(stuck_terminating=STUCK)
    raised = detector.update(factories.pod(fault_type="Separate"), NOW)
    assert [f.reason for f in raised.faults] == ["RelationFaultSeparate"]
    again = detector.update(factories.pod(fault_type="Separate", resource_version="2"), NOW + timedelta(seconds=1))
    assert (again.faults, again.cleared) == ([], [])  # one fault per label, not per pod update
    gone = detector.update(factories.pod(resource_version="3"), NOW + timedelta(seconds=2))
    assert [c.fault.reason for c in gone.cleared] == ["RelationFaultSeparate"]


def _decide(labelled: PodRecord, **job: Any) -> tuple[Action, tuple[str, ...], str, FaultScheduling | None]:
    pods = [labelled, factories.pod("job-0", rank=0, chips=("Ascend910-0",), node=labelled.node)]
    (fault,) = pod_faults(labelled, NOW, (), STUCK).values()
    j = factories.job(**job)
    jobs = {(j.kind, j.namespace, j.name): j}
    (hit,) = correlate(fault, pods, jobs).hits
    assert [p.name for p in hit.pods] == [labelled.name]  # only the labelled pod, not its neighbours on the node
    d = decide(fault, hit, RetryLedger(), PolicySettings.model_validate({}), NOW)
    return d.action, d.pods, d.reason, d.mode


def test_separate_restarts_the_job_or_only_the_pod() -> None:
    """Regression (fails on the code before: the label was not read, so nothing was decided)."""
    labelled = factories.pod("job-1", rank=1, chips=("Ascend910-1",), fault_type="Separate")
    action, _, reason, _ = _decide(labelled)
    assert action is Action.RESTART_JOB
    assert "pod job-1 (ClusterD fault-type label, RelationFaultSeparate)" in reason
    action, pods, _, _ = _decide(labelled, pod_rescheduling=True)
    assert (action, pods) == (Action.RESTART_PODS, ("job-1",))


def test_sub_health_follows_the_jobs_strategy() -> None:
    labelled = factories.pod("job-1", rank=1, chips=("Ascend910-1",), fault_type="SubHealth")
    assert _decide(labelled)[0] is Action.NONE  # subHealthyStrategy ignore (the default)
    action, _, _, mode = _decide(labelled, sub_healthy_strategy="graceExit")
    assert (action, mode) == (Action.RESTART_JOB, FaultScheduling.GRACE)


def test_software_is_left_to_the_platform() -> None:
    labelled = factories.pod("job-1", rank=1, chips=("Ascend910-1",), fault_type="software")
    action, _, reason, _ = _decide(labelled)
    assert action is Action.NONE
    assert "fault-type=software" in reason
