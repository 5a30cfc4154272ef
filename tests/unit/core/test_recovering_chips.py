"""A chip in ``-Recovering`` (the device plugin hot-resetting it) is recorded but never restarts a job.

MindCluster's rescheduler builds fault jobs from ``-Unhealthy``, ``-NetworkUnhealthy`` and ``-Fault`` only; a
``-Recovering`` chip is just dropped from the schedulable list (component/ascend-for-volcano/common/k8s/cmmgr.go).
Issue 15 item 3: we used to report it at RestartNPU, which restarted a force job.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_detect_deviceinfo import NOW, TABLE, device_cm, fault_el
from test_policy import _job, _pod

from agent.core.cluster import FaultScheduling
from agent.core.correlate import JobHit
from agent.core.detect.deviceinfo import DeviceInfoDetector
from agent.core.faults import FaultKind, FaultLevel
from agent.core.policy import Action, RetryLedger, decide
from agent.settings import PolicySettings


def _decisions(cm_faults: list[dict[str, object]] | None, recovering: str, unhealthy: str = "") -> list[Action]:
    res = DeviceInfoDetector(TABLE).update(device_cm(cm_faults, recovering=recovering, unhealthy=unhealthy), NOW)
    job = _job(fault_scheduling=FaultScheduling.FORCE)
    pod = replace(_pod("job-w-0", 0), node="w1", chips=("Ascend910-6",))
    hit = JobHit(job=job, pods=(pod,), actionable=True)
    settings = PolicySettings.model_validate({})
    return [decide(f, hit, RetryLedger(), settings, NOW).action for f in res.faults]


def test_recovering_chip_is_recorded_at_not_handle() -> None:
    res = DeviceInfoDetector(TABLE).update(device_cm(None, recovering="Ascend910-6"), NOW)
    assert [(f.kind, f.chips, f.level, f.reason) for f in res.faults] == [
        (FaultKind.CHIP, ("Ascend910-6",), FaultLevel.NOT_HANDLE, "Recovering")
    ]


@pytest.mark.parametrize("fault_key", [None, []], ids=["old-plugin-no-fault-key", "empty-fault-array"])
def test_recovering_chip_does_not_restart_a_force_job(fault_key: list[dict[str, object]] | None) -> None:
    assert _decisions(fault_key, recovering="Ascend910-6") == [Action.NONE]


def test_recovering_chip_that_is_also_faulty_still_restarts() -> None:
    # The -Fault element is the reason here, not the hot reset: a real fault keeps its level.
    actions = _decisions([fault_el("Ascend910-6", "80E18005", "SeparateNPU")], recovering="Ascend910-6")
    assert actions == [Action.RESTART_JOB]
