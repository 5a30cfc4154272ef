"""A person releases a node's quarantine early (issue 41, 2: nothing listed quarantines, said why and until when,
or released one after the hardware was replaced; the hold lasted detect.isolation_release_s, 24 h).

``fault-agent quarantine release NODE`` writes the node annotation ``fault-agent.io/quarantine-release``; the
leader lifts the holds that began before it and publishes ``quarantine.released``; every replica ends the isolation
of the node's chips isolated before it; a fault still reported keeps the node quarantined."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import change
from support.fakes import ListSink, NodeWriter

from agent.core.cluster import Taint
from agent.core.detect.flapping import FlapTracker
from agent.core.faults import FaultKind, FaultLevel, ObjectRef
from agent.core.quarantine import (
    RELEASE_ANNOTATION,
    Release,
    encode_quarantine_hold,
    encode_release,
    parse_release,
)
from agent.engine.recovery import RecoveryEngine
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate({"kafka": {"enabled": False}})
KEY = SETTINGS.policy.taint_key
HOLD = encode_quarantine_hold(FaultLevel.MANUALLY_SEPARATE, NOW + timedelta(hours=20), since=NOW - timedelta(hours=4))


def _state(*annotations: tuple[str, str]) -> ClusterState:
    state = ClusterState()
    taints = (Taint(KEY, "ManuallySeparateNPU", "NoSchedule"),)
    state.apply(change("nodes", "n1", factories.node(at=NOW, taints=taints, annotations=annotations)))
    return state


def _released(by: str = "alice", at: datetime = NOW) -> tuple[str, str]:
    return (RELEASE_ANNOTATION, encode_release(Release(by, at, "board replaced")))


async def _ticks(engine: RecoveryEngine, n: int = 3) -> None:
    for s in range(1, n + 1):
        await engine.tick(NOW + timedelta(seconds=s))
        await engine.idle()


async def test_a_release_lifts_the_hold_untaints_and_is_published_once() -> None:
    api = k8s.ApiClient()
    writer, sink = NodeWriter(api), ListSink()
    try:
        engine = RecoveryEngine(SETTINGS, _state((KEY, HOLD)), writer, events=sink, clock=SystemClock())
        await _ticks(engine)
        assert ("untaint", None) not in writer.writes  # held: 20 hours left
        engine.ctx.state.apply(change("nodes", "n1", factories.node(
            at=NOW, taints=(Taint(KEY, "ManuallySeparateNPU", "NoSchedule"),), annotations=((KEY, HOLD), _released())
        )))  # fmt: skip
        await _ticks(engine)
    finally:
        await api.close()
    assert ("untaint", None) in writer.writes
    assert ("annotate", {KEY: None}) in writer.writes
    released = [ev.as_json(e) for e in sink.events if ev.as_json(e)["type"] == ev.QUARANTINE_RELEASED]
    assert len(released) == 1, sink.types()
    data = released[0]["data"]
    assert (data["node"], data["by"], data["reason"]) == ("n1", "alice", "board replaced")
    assert data["hold_until"].startswith("2025-03-02T08:00:00")
    assert data["still_quarantined"] is None


async def test_a_node_fault_still_reported_keeps_the_node_quarantined_and_the_event_says_so() -> None:
    api = k8s.ApiClient()
    writer, sink = NodeWriter(api), ListSink()
    try:
        engine = RecoveryEngine(SETTINGS, _state((KEY, HOLD), _released()), writer, events=sink, clock=SystemClock())
        noded = factories.fault(
            kind=FaultKind.NODE, level=FaultLevel.SEPARATE, chips=(), codes=("00000011",), at=NOW,
            source=ObjectRef("ConfigMap", "mindx-dl", "mindx-dl-nodeinfo-n1"), reason="NodeD-CPU",
        )  # fmt: skip
        await engine.handle_fault(noded, NOW)
        await engine.idle()
        await _ticks(engine)
    finally:
        await api.close()
    assert ("untaint", None) not in writer.writes
    released = [ev.as_json(e)["data"] for e in sink.events if ev.as_json(e)["type"] == ev.QUARANTINE_RELEASED]
    assert [d["still_quarantined"] for d in released] == ["SeparateNPU"]


async def test_a_new_leader_does_not_keep_a_hold_written_before_the_release() -> None:
    """The release stays on the node as the record: a replica that reads the hold back afterwards does not keep a
    hold that began before it (one written later, for a chip isolated after it, is kept)."""
    later = encode_quarantine_hold(FaultLevel.MANUALLY_SEPARATE, NOW + timedelta(hours=30), since=NOW + timedelta(1))
    api = k8s.ApiClient()
    try:
        old = RecoveryEngine(SETTINGS, _state((KEY, HOLD), _released()), NodeWriter(api), clock=SystemClock())
        old.quarantining.load_holds()
        kept = RecoveryEngine(SETTINGS, _state((KEY, later), _released()), NodeWriter(api), clock=SystemClock())
        kept.quarantining.load_holds()
    finally:
        await api.close()
    assert old.quarantining.flap_holds == {}
    assert list(kept.quarantining.flap_holds.values()) == [NOW + timedelta(hours=30)]


def test_the_flap_tracker_releases_only_chips_isolated_before_the_release() -> None:
    tracker = FlapTracker(2, timedelta(minutes=10))
    for at, chip in ((NOW - timedelta(hours=2), "Ascend910-1"), (NOW + timedelta(minutes=5), "Ascend910-6")):
        for i in range(2):
            f = factories.fault(chips=(chip,), at=at + timedelta(seconds=i), codes=("80E18402",))
            tracker.observe(f)
    assert tracker.is_isolated("n1", ["Ascend910-1"])
    assert tracker.is_isolated("n1", ["Ascend910-6"])
    assert tracker.release_node("n1", NOW) == [("n1", "Ascend910-1")]
    assert not tracker.is_isolated("n1", ["Ascend910-1"])
    assert tracker.is_isolated("n1", ["Ascend910-6"])
    assert tracker.release_node("n1", NOW) == []  # taken once


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("{", "not JSON", id="json"),
        pytest.param('{"at":"2025-03-01T12:00:00+00:00"}', "by", id="no-by"),
        pytest.param('{"by":"a","at":"2025-03-01T12:00:00"}', "time zone", id="naive"),
        pytest.param('{"by":"a","at":"soon"}', "ISO 8601", id="not-a-time"),
        pytest.param('{"by":"a","at":"2025-03-01T12:00:00Z","reason":' + '"' + "x" * 300 + '"}', "reason", id="long"),
    ],
)
def test_an_unreadable_release_is_refused_with_a_reason(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_release(text)


def test_a_release_round_trips() -> None:
    release = Release("bob", NOW, "swapped")
    assert parse_release(encode_release(release)) == release


def test_every_replicas_pipeline_ends_the_isolation_a_person_released_and_reports_a_bad_release_once() -> None:
    import asyncio

    from agent.core.clock import FixedClock
    from agent.engine.detecting import DetectPipeline

    state = _state(_released())
    pipeline = DetectPipeline(Settings(), state, asyncio.Queue(), clock=FixedClock(NOW))
    for i in range(4):  # the catch-all rule (3 within the window) isolates the chip
        pipeline.flapping.observe(
            factories.fault(chips=("Ascend910-3",), at=NOW - timedelta(hours=1, seconds=-i), codes=("80E18402",))
        )
    assert pipeline.flapping.is_isolated("n1", ["Ascend910-3"])
    assert pipeline.apply_releases() == [("n1", "Ascend910-3")]
    assert not pipeline.flapping.is_isolated("n1", ["Ascend910-3"])

    bad = _state((RELEASE_ANNOTATION, "{"))
    pipeline = DetectPipeline(Settings(), bad, asyncio.Queue(), clock=FixedClock(NOW))
    for i in range(4):
        pipeline.flapping.observe(factories.fault(chips=("Ascend910-3",), at=NOW + timedelta(seconds=i)))
    assert pipeline.apply_releases() == []
    assert pipeline.apply_releases() == []
    assert pipeline.bad_releases == {"n1": "{"}
    assert pipeline.flapping.is_isolated("n1", ["Ascend910-3"])


def test_the_pipeline_prunes_flap_counts_past_their_windows() -> None:
    """Issue 40: FlapTracker.prune said to call it to bound memory and nothing did; the pipeline's tick does, once
    a minute: a chip's counts are forgotten once they are past the window."""
    import asyncio

    from agent.core.clock import FixedClock
    from agent.engine.detecting import DetectPipeline

    clock = FixedClock(NOW)
    pipeline = DetectPipeline(Settings(), _state(), asyncio.Queue(), clock=clock)
    pipeline.flapping.observe(factories.fault(chips=("Ascend910-3",), at=NOW))
    assert pipeline.flapping.count("n1", "Ascend910-3", NOW) == 1
    pipeline.tick()
    assert pipeline.flapping._seen  # within the window: kept
    clock.advance(pipeline.flapping.window.total_seconds() + 61)
    pipeline.tick()
    assert pipeline.flapping._seen == {}
