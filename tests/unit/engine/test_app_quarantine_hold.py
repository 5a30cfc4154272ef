"""Issue 13 A.3: a node quarantine hold written as an annotation next to the taint (key ``policy.taint_key``, value
``{"level", "until"}``) survives an agent restart and a leader change: a new engine reads it back and keeps the
taint until that time, then removes taint and annotation. Issue 14: flapping chips are isolated, not their node,
which is tainted only when detect.isolated_chips_taint of its chips are."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from unittest.mock import ANY

import pytest
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import change
from support.fakes import NodeWriter

from agent.core.cluster import NodeRecord, Taint
from agent.core.faults import Fault, FaultCleared, FaultLevel, ObjectRef
from agent.core.quarantine import encode_quarantine_hold, parse_quarantine_hold
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import ChangeType
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate({"kafka": {"enabled": False}})
KEY = SETTINGS.policy.taint_key


def _node(*, taint: str | None = None, hold: str | None = None) -> NodeRecord:
    taints = (Taint(KEY, taint, "NoSchedule"),) if taint else ()
    annotations = ((KEY, hold),) if hold else ()
    return factories.node(at=NOW, taints=taints, annotations=annotations)


def _state(node: NodeRecord) -> ClusterState:
    state = ClusterState()
    state.apply(change("nodes", "n1", node))
    return state


def _flapping(chip: str = "Ascend910-2") -> Fault:
    return factories.fault(
        level=FaultLevel.MANUALLY_SEPARATE, chips=(chip,), codes=("80E18402",), at=NOW, reason="CardUnhealthy+Flapping"
    )


async def test_flapping_chips_taint_their_node_only_at_the_configured_count() -> None:
    """Issue 14 item 3: a flapping chip is isolated, not its node (issue 13's node hold is gone); the node is
    tainted once detect.isolated_chips_taint of its chips are isolated and untainted when they are released (the
    detector holds an isolated chip's clear until then); the hold next to the taint lasts at least the release time."""
    settings = Settings.model_validate({"kafka": {"enabled": False}, "detect": {"isolated_chips_taint": 2}})
    api = k8s.ApiClient()
    writer = NodeWriter(api)
    engine = RecoveryEngine(settings, _state(_node()), writer, clock=SystemClock())
    src = ObjectRef("ConfigMap", "kube-system", "mindx-dl-deviceinfo-n1")
    await engine.handle_fault(_flapping("Ascend910-2"), NOW)
    await engine.idle()
    await engine.handle_fault(_flapping("Ascend910-2"), NOW)  # the same chip again: still one chip
    await engine.idle()
    assert writer.writes == []
    await engine.handle_fault(_flapping("Ascend910-5"), NOW)
    await engine.idle()
    until = NOW + timedelta(seconds=settings.detect.isolation_release_s)
    assert writer.writes == [("taint", "ManuallySeparateNPU"), ("annotate", {KEY: ANY})]
    # the hold next to the taint keeps the node quarantined across a restart at least until the release time
    assert parse_quarantine_hold(writer.writes[1][1][KEY]) == (FaultLevel.MANUALLY_SEPARATE, until)
    await engine.handle_cleared(FaultCleared(_flapping("Ascend910-5"), NOW + timedelta(hours=24), src))
    await engine.idle()
    await api.close()
    assert writer.writes[2:3] == [("untaint", None)]  # (this fake cache never shows the annotation to remove)


CHIPS8 = tuple(f"Ascend910-{i}" for i in range(8))


@pytest.mark.parametrize(
    ("pod_chips", "tainted"),
    [
        pytest.param(CHIPS8, True, id="whole-node-pod-cannot-go-back"),
        pytest.param(("Ascend910-2", "Ascend910-3"), False, id="two-chip-pod-fits-beside-the-chip"),
        pytest.param(None, False, id="no-pod-on-the-chip"),
    ],
)
async def test_an_isolated_chip_taints_its_node_when_the_node_can_no_longer_hold_the_jobs_pod(
    pod_chips: tuple[str, ...] | None, tainted: bool
) -> None:
    """Issue 37 item 1 (B4): one isolated chip of an 8-chip node, the job it hit has an 8-chip pod there: the device
    plugin reports the chip healthy again once its fault is gone, so any placement of that pod on the node puts it
    back on the chip; the node is quarantined (``ManuallySeparateNPU`` taint and hold). A pod that fits in the
    chips left, or no pod on the chip, leaves the node in service (detect.isolated_chips_taint stays 4)."""
    api = k8s.ApiClient()
    writer = NodeWriter(api)
    state = _state(factories.node(at=NOW, npu_capacity=8))
    if pod_chips is not None:
        state.apply(change("pods", "ns/job-0", factories.pod(chips=pod_chips)))
    engine = RecoveryEngine(SETTINGS, state, writer, clock=SystemClock())
    await engine.handle_fault(_flapping("Ascend910-2"), NOW)
    await engine.idle()
    await api.close()
    if tainted:
        assert writer.writes == [("taint", "ManuallySeparateNPU"), ("annotate", {KEY: ANY})]
    else:
        assert [w for w in writer.writes if w[0] == "taint"] == []


async def test_the_node_stays_quarantined_when_the_isolated_chip_faults_again_with_the_job_gone() -> None:
    """The fault of an isolated chip noted again after its job left the node (the next flap) keeps what the job
    needed: the node stays quarantined, it is not untainted for lack of a pod on the chip."""
    api = k8s.ApiClient()
    writer = NodeWriter(api)
    state = _state(factories.node(at=NOW, npu_capacity=8))
    state.apply(change("pods", "ns/job-0", factories.pod(chips=CHIPS8)))
    engine = RecoveryEngine(SETTINGS, state, writer, clock=SystemClock())
    await engine.handle_fault(_flapping("Ascend910-2"), NOW)
    await engine.idle()
    state.apply(change("pods", "ns/job-0", None, type=ChangeType.DELETED))
    await engine.handle_fault(_flapping("Ascend910-2"), NOW + timedelta(minutes=1))
    await engine.idle()
    await api.close()
    assert ("untaint", None) not in writer.writes
    assert writer.writes[0] == ("taint", "ManuallySeparateNPU")


async def test_a_restarted_agent_keeps_the_persisted_quarantine_until_its_time() -> None:
    """The old agent logged "stays quarantined until <tomorrow>" and died; the new one (no fault active, its
    detectors saw nothing) leaves the taint, then lifts it and the annotation once the time has passed."""
    until = NOW + timedelta(hours=20)
    api = k8s.ApiClient()
    writer = NodeWriter(api)
    state = _state(_node(taint="SeparateNPU", hold=encode_quarantine_hold(FaultLevel.SEPARATE, until)))
    engine = RecoveryEngine(SETTINGS, state, writer, clock=SystemClock())
    for s in range(1, 8):  # settled ticks reconcile every node's taint
        await engine.tick(NOW + timedelta(seconds=s))
        await engine.idle()
    kept = list(writer.writes)
    await engine.tick(until + timedelta(seconds=1))
    await engine.idle()
    await api.close()
    assert set(kept) <= {("taint", "SeparateNPU")}  # re-asserted at most (the writer finds it already set)
    lifted = writer.writes[len(kept) :]
    assert lifted[:2] == [("untaint", None), ("annotate", {KEY: None})]
    assert set(lifted[2:]) <= {("untaint", None)}  # this fake cache still shows the taint: asked again, idempotent


@pytest.mark.parametrize("text", ["{", "[]", '{"level":"Bogus","until":"2025-03-01T12:00:00+00:00"}',
                                  '{"level":"SeparateNPU","until":"2025-03-01T12:00:00"}'])  # fmt: skip
def test_an_unreadable_hold_is_refused_with_a_reason(text: str) -> None:
    with pytest.raises(ValueError, match=r"JSON|expected|unknown fault level|time zone"):
        parse_quarantine_hold(text)
