"""The soak's invariants (testbed/soak/checks.py) over hand-made observations: each check passes a clean run
and fails on a planted violation (a double restart, a restart without cause, a pod left on a faulty chip, a
missing terminal event, a duplicated event id, an out-of-order pair, a lost event, a crash, a missing
histogram sample)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from testbed.soak.checks import (
    EVENT_LINK,
    Bounds,
    CommandSeen,
    Created,
    Disruption,
    FaultSpan,
    Health,
    Life,
    Observed,
    PodSample,
    PodStep,
    Record,
    Scrape,
    acting_time,
    blocking_spans,
    bounds_from_settings,
    check_all,
    check_events,
    check_health,
    check_lifecycle,
    check_placement,
    check_restarts,
)
from testbed.soak.schedule import ACTING_LEVELS

BOUNDS = bounds_from_settings(
    lease_duration_s=6, retry_period_s=1, node_not_ready_grace_s=5, node_health_recheck_s=15, spill_after_s=5
)
CHIP_FAULT = FaultSpan("chip", "n1", 3, "SeparateNPU", 10.0, 40.0)


def _pod(t: float, node: str = "n1", *, uid: str = "p0", chips: tuple[str, ...] = ("Ascend910-3",)) -> PodSample:
    return PodSample(t, "job-0", "job-0-w-0", uid, node, chips, True)


def _rec(offset: int, type_: str, id_: str, *, key: str = "uid-j", incident: str = "inc-1", sent: float = 0.0,
         detected_id: str = "", partition: int = 0) -> Record:  # fmt: skip
    return Record(partition, offset, "t", key, id_, type_, "ns/job-0", sent, sent, incident, detected_id)


def _clean_stream() -> list[Record]:
    return [
        _rec(0, "fault.detected", "d1", sent=11.0),
        _rec(1, "recovery.started", "s1", sent=11.5),
        _rec(2, "recovery.succeeded", "e1", sent=20.0),
        _rec(3, "fault.cleared", "c1", sent=41.0, detected_id="d1"),
    ]


def _created(records: list[Record]) -> list[Created]:
    return [Created(r.id, r.type, r.key, "a") for r in {r.id: r for r in records}.values()]


# ------------------------------------------------------------------------------------------------ bounds


def test_bounds_follow_from_the_settings() -> None:
    assert BOUNDS.takeover_s == 7.0
    assert BOUNDS.placement_s == 5 + 7 + 2 * 20
    assert (
        bounds_from_settings(
            lease_duration_s=15, retry_period_s=2, node_not_ready_grace_s=5, node_health_recheck_s=50, spill_after_s=5
        ).placement_s
        == 5 + 17 + 40
    )


def test_acting_time_leaves_out_an_apiserver_stop_and_a_leader_kill() -> None:
    stop = Disruption("apiserver_stop", 20.0, 25.0)
    kill = Disruption("agent_kill", 50.0, 60.0, "a", leader=True)
    standby = Disruption("agent_kill", 70.0, 80.0, "b", leader=False)
    spans = blocking_spans([stop, kill, standby], BOUNDS, not_ready=False)
    assert spans == [(20.0, 25.0 + BOUNDS.apiserver_grace_s), (50.0, 50.0 + 2 * BOUNDS.takeover_s)]
    assert acting_time(0.0, 100.0, spans) == pytest.approx(100 - (64 - 20))  # the two overlap: 20 s to 64 s
    recheck = blocking_spans([stop], BOUNDS, not_ready=True)
    assert recheck == [(20.0, 25.0 + BOUNDS.apiserver_grace_s + BOUNDS.node_recheck_s)]


# ------------------------------------------------------------------------------------------------ placement


def test_a_pod_that_leaves_a_faulty_chip_in_time_is_fine() -> None:
    pods = [_pod(t) for t in range(5, 30)] + [_pod(t, "n2", uid="p1") for t in range(30, 60)]
    violations, worst = check_placement(pods, [CHIP_FAULT], [], BOUNDS)
    assert violations == []
    assert worst == pytest.approx(19.0)


def test_planted_a_pod_left_on_a_faulty_chip_past_the_bound() -> None:
    fault = replace(CHIP_FAULT, end=None)
    pods = [_pod(t) for t in range(5, 120)]
    violations, worst = check_placement(pods, [fault], [], BOUNDS)
    assert len(violations) == 1  # once per pod and fault, not once per sample
    assert "chip 3 of node n1" in violations[0].detail
    assert worst > BOUNDS.placement_s


def test_a_pod_on_another_chip_of_the_node_or_a_fault_that_does_not_isolate_is_not_counted() -> None:
    pods = [_pod(t, chips=("Ascend910-4",)) for t in range(5, 120)]
    assert check_placement(pods, [replace(CHIP_FAULT, end=None)], [], BOUNDS)[0] == []
    sub_health = replace(CHIP_FAULT, level="SubHealthFault", end=None)
    assert check_placement([_pod(t) for t in range(5, 120)], [sub_health], [], BOUNDS)[0] == []


def test_time_the_apiserver_was_stopped_does_not_count_against_the_agent() -> None:
    node_down = FaultSpan("not_ready", "n1", -1, "Unknown", 10.0, 100.0)
    pods = [_pod(t, chips=()) for t in range(5, 80)]
    assert check_placement(pods, [node_down], [], BOUNDS)[0]  # 70 s on a dead node
    stop = Disruption("apiserver_stop", 12.0, 20.0)
    assert check_placement(pods, [node_down], [stop], BOUNDS)[0] == []  # 8 s stop + grace + node recheck


# ------------------------------------------------------------------------------------------------ restarts


def _cmd(t: float, uid: str, incident: str = "inc-1") -> CommandSeen:
    return CommandSeen(t, "job-0", f"job-0-restartjob-{incident}", uid, incident)


def _restarts(commands: list[CommandSeen], faults: list[FaultSpan], steps: list[PodStep] | None = None) -> list[str]:
    pods = [_pod(t) for t in range(0, 60)]
    found = check_restarts(commands, faults, steps or [], pods, [], BOUNDS, acting_levels=ACTING_LEVELS)
    return [v.detail for v in found]


def test_one_restart_for_a_fault_is_fine() -> None:
    assert _restarts([_cmd(13.0, "c1")], [CHIP_FAULT]) == []


def test_planted_a_double_restart_of_one_incident() -> None:
    (detail,) = _restarts([_cmd(13.0, "c1"), _cmd(14.0, "c2")], [CHIP_FAULT])
    assert "incident inc-1" in detail
    assert "2 RestartJob Commands" in detail


def test_two_incidents_may_each_restart_once() -> None:
    assert _restarts([_cmd(13.0, "c1", "inc-1"), _cmd(30.0, "c2", "inc-2")], [CHIP_FAULT]) == []


def test_planted_a_restart_without_cause() -> None:
    assert _restarts([_cmd(13.0, "c1")], []) != []
    assert _restarts([_cmd(80.0, "c1")], [CHIP_FAULT]) != []  # 40 s after the fault cleared
    not_acting = replace(CHIP_FAULT, level="NotHandleFault")
    assert _restarts([_cmd(13.0, "c1")], [not_acting]) != []
    elsewhere = replace(CHIP_FAULT, node="n9")
    assert _restarts([_cmd(13.0, "c1")], [elsewhere]) != []
    before = replace(CHIP_FAULT, start=30.0)
    assert _restarts([_cmd(13.0, "c1")], [before]) != []  # the restart came before the fault


def test_a_failed_or_evicted_pod_is_a_cause() -> None:
    for kind in ("business", "evict"):
        assert _restarts([_cmd(13.0, "c1")], [], [PodStep(12.0, kind, "job-0", "job-0-w-0")]) == []
    other_job = PodStep(12.0, "business", "job-1", "job-1-w-0")
    assert _restarts([_cmd(13.0, "c1")], [], [other_job]) != []


# ------------------------------------------------------------------------------------------------ events


def test_a_clean_stream_passes() -> None:
    records = _clean_stream()
    violations, resent = check_events(_created(records), records, [], BOUNDS)
    assert violations == []
    assert resent == 0


def test_planted_a_duplicated_event_id() -> None:
    records = [*_clean_stream(), _rec(4, "recovery.started", "s1", sent=21.0)]
    (v,) = check_events(_created(records), records, [], BOUNDS)[0]
    assert "s1 is in Kafka 2 times" in v.detail


def test_a_copy_re_sent_after_an_agent_kill_or_a_leadership_change_is_allowed_and_counted() -> None:
    records = [*_clean_stream(), _rec(4, "recovery.started", "s1", sent=21.0)]
    for cause in (Disruption("agent_kill", 15.0, 18.0, "a", True), Disruption("leadership", 19.0, 19.0, "b", True)):
        violations, resent = check_events(_created(records), records, [cause], BOUNDS)
        assert violations == []
        assert resent == 1
    long_before = Disruption("kafka_stop", 0.0, 1.0)  # the first copy came well after it: no excuse
    far = [*_clean_stream(), _rec(4, "recovery.started", "s1", sent=200.0)]
    shifted = [replace(r, sent=r.sent + 100) if r.id == "s1" and r.offset == 1 else r for r in far]
    assert check_events(_created(shifted), shifted, [long_before], BOUNDS)[0] != []


def test_planted_one_id_for_two_different_events() -> None:
    records = [*_clean_stream(), _rec(4, "fault.detected", "d1", incident="", sent=21.0)]
    cause = [Disruption("agent_kill", 15.0, 18.0, "a", True)]
    (v,) = check_events(_created(records), records, cause, BOUNDS)[0]
    assert "names 2 different events" in v.detail


def test_planted_an_out_of_order_pair() -> None:
    swapped = [
        _rec(0, "fault.detected", "d1"),
        _rec(1, "recovery.succeeded", "e1"),
        _rec(2, "recovery.started", "s1"),
    ]
    (v,) = check_events(_created(swapped), swapped, [], BOUNDS)[0]
    assert "recovery.succeeded of incident inc-1 comes before its recovery.started" in v.detail
    cleared_first = [_rec(0, "fault.cleared", "c1", detected_id="d1"), _rec(1, "fault.detected", "d1")]
    (v,) = check_events(_created(cleared_first), cleared_first, [], BOUNDS)[0]
    assert "fault.cleared c1 comes before its fault.detected" in v.detail


def test_order_is_judged_on_first_copies_by_partition_offset() -> None:
    """A re-sent copy of recovery.started after the terminal event is what a de-duplicating consumer drops."""
    records = [*_clean_stream(), _rec(9, "recovery.started", "s1", sent=21.0)]
    cause = [Disruption("agent_kill", 15.0, 18.0, "a", True)]
    assert check_events(_created(records), records, cause, BOUNDS)[0] == []


def test_planted_a_lost_event_a_phantom_event_and_a_split_key() -> None:
    records = _clean_stream()
    lost = [*_created(records), Created("x9", "recovery.failed", "uid-j", "b")]
    (v,) = check_events(lost, records, [], BOUNDS)[0]
    assert "x9" in v.detail
    assert "never reached Kafka" in v.detail
    (v,) = check_events(_created(records[:3]), records, [], BOUNDS)[0]
    assert "in no agent's outbox" in v.detail
    split = [*records[:3], replace(records[3], partition=2)]
    (v,) = check_events(_created(split), split, [], BOUNDS)[0]
    assert "split over partitions" in v.detail


# ------------------------------------------------------------------------------------------------ lifecycle


LIFE = Life("a", 100, 0.0)


def test_every_started_incident_ends_once_with_one_histogram_sample() -> None:
    violations, ended = check_lifecycle(_clean_stream(), [Scrape(30.0, "a", 100, 1.0, 0.0)], [LIFE])
    assert violations == []
    assert ended == 1


def test_planted_a_missing_terminal_event() -> None:
    records = _clean_stream()[:2]
    (v,) = check_lifecycle(records, [Scrape(30.0, "a", 100, 0.0, 0.0)], [LIFE])[0]
    assert "never ended" in v.detail


def test_planted_two_terminal_events_for_one_incident() -> None:
    records = [*_clean_stream(), _rec(4, "recovery.failed", "f1", sent=25.0)]
    found = check_lifecycle(records, [Scrape(30.0, "a", 100, 2.0, 0.0)], [LIFE])[0]
    assert any("ended 2 times" in v.detail for v in found)


def test_planted_a_double_or_a_missing_histogram_sample() -> None:
    (v,) = check_lifecycle(_clean_stream(), [Scrape(30.0, "a", 100, 2.0, 0.0)], [LIFE])[0]
    assert "a double sample" in v.detail
    (v,) = check_lifecycle(_clean_stream(), [Scrape(30.0, "a", 100, 0.0, 0.0)], [LIFE])[0]
    assert "1 incidents ended" in v.detail


def test_a_sample_lost_with_a_process_killed_after_its_last_scrape_is_allowed() -> None:
    killed = Life("a", 100, 0.0, end=20.5, code=-9, expected=True, killed=True)
    scrapes = [Scrape(19.5, "a", 100, 0.0, 0.0), Scrape(40.0, "a", 200, 0.0, 0.0)]
    assert check_lifecycle(_clean_stream(), scrapes, [killed, Life("a", 200, 25.0)])[0] == []
    terminated = replace(killed, killed=False)  # a SIGTERM'd process was scraped to the end: no excuse
    assert check_lifecycle(_clean_stream(), scrapes, [terminated, Life("a", 200, 25.0)])[0] != []


def test_samples_are_summed_over_processes_at_their_last_scrape() -> None:
    records = [
        *_clean_stream(),
        _rec(10, "recovery.started", "s2", incident="inc-2", sent=50.0),
        _rec(11, "recovery.succeeded", "e2", incident="inc-2", sent=60.0),
    ]
    killed = Life("a", 100, 0.0, end=30.0, code=-9, killed=True)
    scrapes = [Scrape(10.0, "a", 100, 0.0, 0.0), Scrape(29.0, "a", 100, 1.0, 0.0), Scrape(70.0, "b", 200, 1.0, 0.0)]
    assert check_lifecycle(records, scrapes, [killed, Life("b", 200, 0.0)])[0] == []


# ------------------------------------------------------------------------------------------------ health


def test_health_allows_start_up_and_apiserver_stops_only() -> None:
    lives = [Life("a", 100, 0.0), Life("a", 200, 50.0)]
    health = [Health(5.0, "a", 100, 503), Health(55.0, "a", 200, 0), Health(81.0, "a", 200, 503)]
    assert check_health(lives, health, [], [Disruption("apiserver_stop", 75.0, 80.0)], BOUNDS) == []
    (v,) = check_health(lives, [Health(200.0, "a", 200, 503)], [], [], BOUNDS)
    assert "not ready while the apiserver was up" in v.detail


def test_planted_a_crash_and_a_task_failure() -> None:
    crashed = Life("a", 100, 0.0, end=30.0, code=1, expected=False, log_tail="Traceback ...")
    (v,) = check_health([crashed], [], [], [], BOUNDS)
    assert "exited with 1" in v.detail
    assert "Traceback" in v.detail
    (v,) = check_health([LIFE], [], [Scrape(9.0, "a", 100, 0.0, 2.0)], [], BOUNDS)
    assert "2 task failures" in v.detail


# ------------------------------------------------------------------------------------------------ all together


def test_check_all_passes_a_clean_run_and_names_each_failed_invariant() -> None:
    records = _clean_stream()
    obs = Observed(
        faults=[CHIP_FAULT],
        pods=[_pod(t) for t in range(5, 20)] + [_pod(t, "n2", uid="p1") for t in range(20, 60)],
        commands=[_cmd(13.0, "c1")],
        records=records,
        created=_created(records),
        scrapes=[Scrape(59.0, "a", 100, 1.0, 0.0)],
        health=[Health(t, "a", 100, 200) for t in range(60)],
        lives=[LIFE],
    )
    verdict = check_all(obs, BOUNDS, acting_levels=ACTING_LEVELS)
    assert verdict.ok, verdict.violations
    assert verdict.figures["restarts"] == 1
    obs.commands.append(_cmd(14.0, "c2"))
    obs.records.append(_rec(9, "recovery.started", "s1", sent=30.0))
    obs.errors.append("kafka did not start")
    bad = check_all(obs, BOUNDS, acting_levels=ACTING_LEVELS)
    assert bad.invariants_failed() == {"restarts", "events", "soak"}


def test_bounds_are_a_value() -> None:
    assert isinstance(BOUNDS, Bounds)
    assert replace(BOUNDS, placement_s=1.0).placement_s == 1.0


def test_one_fault_detected_id_linked_to_two_incidents_is_named_apart() -> None:
    records = [*_clean_stream(), _rec(4, "fault.detected", "d1", incident="inc-2", sent=21.0)]
    cause = [Disruption("leadership", 15.0, 15.0, "a", True)]
    (v,) = check_events(_created(records), records, cause, BOUNDS)[0]
    assert v.invariant == EVENT_LINK
    other = [*_clean_stream(), _rec(4, "recovery.started", "s1", incident="inc-2", sent=21.0)]
    (v,) = check_events(_created(other), other, cause, BOUNDS)[0]
    assert v.invariant == "events"


def test_a_failed_pod_still_there_long_after_is_still_a_cause() -> None:
    """Seen in a soak: a pod failed while its job's incident was restarting stayed Failed until that incident
    timed out, and its restart came 105 s later: a real cause, not a phantom restart."""
    failed = PodStep(100.0, "business", "job-0", "job-0-w-0")
    still = [PodSample(t, "job-0", "job-0-w-0", "p0", "n1", (), False) for t in range(100, 206)]
    cmd = _cmd(205.5, "c1")
    assert check_restarts([cmd], [], [failed], still, [], BOUNDS, acting_levels=ACTING_LEVELS) == []
    replaced = still[:50]  # the failed pod was gone long before: no cause
    assert check_restarts([cmd], [], [failed], replaced, [], BOUNDS, acting_levels=ACTING_LEVELS) != []
