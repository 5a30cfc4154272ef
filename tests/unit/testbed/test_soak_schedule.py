"""The soak's schedule generator (testbed/soak/schedule.py): seeded, within its rules, every kind drawn, JSON
round trip, bad arguments and bad JSON refused."""

from __future__ import annotations

import pytest

from testbed.soak.schedule import (
    AGENT_STEPS,
    APISERVER_STOP,
    APISERVER_WRITES,
    CHIP,
    HARDWARE,
    KINDS,
    NODE,
    ScheduleError,
    Step,
    counts,
    from_json,
    generate,
    problems,
    to_json,
)

ARGS = {"nodes": 8, "jobs": 2}


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    assert generate(7, 180, **ARGS) == generate(7, 180, **ARGS)
    assert generate(7, 180, **ARGS) != generate(8, 180, **ARGS)


def test_a_pinned_seed_keeps_its_schedule() -> None:
    """A printed seed must replay the same run later (another day, another machine): seed 1's first steps are
    pinned; a change to the generator that moves them breaks every recorded seed, and must say so here."""
    assert [s.describe() for s in generate(1, 180, **ARGS)[:3]] == [
        "t+3.6s SIGSTOP the leader agent, then SIGCONT for 9.4s",
        "t+6.3s node 3 NotReady (Unknown) for 22.3s",
        "t+6.9s switch fault node 0 SubHealthFault for 6.5s",
    ]


@pytest.mark.parametrize("seed", range(30))
def test_every_schedule_keeps_the_rules(seed: int) -> None:
    steps = generate(seed, 600, **ARGS)
    assert problems(steps, duration_s=600, nodes=8, jobs=2, max_faulty_nodes=3) == []
    assert all(s.at_s >= 3.0 and s.end_s <= 600 for s in steps)
    assert [s.at_s for s in steps] == sorted(s.at_s for s in steps)


def test_a_ten_minute_schedule_draws_every_kind() -> None:
    drawn = counts(generate(0, 600, **ARGS))
    assert set(drawn) == set(KINDS)
    assert all(n > 0 for n in drawn.values()), drawn


def test_the_checker_of_the_rules_finds_each_broken_rule() -> None:
    """problems() must be able to fail: one schedule per rule, each breaking it."""
    base = {"duration_s": 100.0, "nodes": 8, "jobs": 2, "max_faulty_nodes": 2}
    same_chip = (Step(10, CHIP, 20, node=1, chip=3, level="SeparateNPU"), Step(15, CHIP, 5, node=1, chip=3))
    assert problems(same_chip, **base)
    other_chip = (Step(10, CHIP, 20, node=1, chip=3, level="SeparateNPU"), Step(15, CHIP, 5, node=1, chip=4))
    assert problems(other_chip, **base) == []
    two_agents = (Step(10, AGENT_STEPS[0], 5, target="leader"), Step(12, AGENT_STEPS[1], 5, target="standby"))
    assert problems(two_agents, **base)
    write_in_stop = (Step(10, APISERVER_STOP, 5), Step(12, NODE, 20, node=0, level="SeparateFault"))
    assert problems(write_in_stop, **base)
    clear_in_stop = (Step(30, APISERVER_STOP, 5), Step(12, NODE, 20, node=0, level="SeparateFault"))
    assert problems(clear_in_stop, **base)
    three_nodes = tuple(Step(10 + i, NODE, 30, node=i, level="SeparateFault") for i in range(3))
    assert problems(three_nodes, **base)
    assert problems((Step(90, NODE, 20, node=0),), **base)  # ends after the soak
    assert problems((Step(10, NODE, 5, node=8),), **base)  # no such node
    assert problems((Step(10, "meteor", 5),), **base)


def test_rules_hold_for_hardware_writes_around_apiserver_stops() -> None:
    for seed in range(30):
        steps = generate(seed, 600, **ARGS)
        stops = [s for s in steps if s.kind == APISERVER_STOP]
        for w in (s for s in steps if s.kind in APISERVER_WRITES):
            instants = (w.at_s, w.end_s) if w.kind in HARDWARE else (w.at_s,)
            for stop in stops:
                assert not any(stop.at_s - 1 <= t <= stop.end_s + 1 for t in instants), (seed, w, stop)


def test_kinds_can_be_restricted() -> None:
    steps = generate(5, 300, kinds=(CHIP,), **ARGS)
    assert steps
    assert {s.kind for s in steps} == {CHIP}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"duration_s": 2.0}, "at least", id="too-short"),
        pytest.param({"duration_s": float("nan")}, "at least", id="nan"),
        pytest.param({"nodes": 0}, "≥ 1", id="no-nodes"),
        pytest.param({"mean_gap_s": 0.0}, "gap", id="no-gap"),
        pytest.param({"kinds": ("meteor",)}, "unknown step kinds", id="unknown-kind"),
        pytest.param({"kinds": ()}, "no step kinds", id="no-kinds"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"duration_s": 60.0, "nodes": 8, "jobs": 2, **kwargs}
    with pytest.raises(ScheduleError, match=message):
        generate(1, **args)  # type: ignore[arg-type]


def test_json_round_trip() -> None:
    steps = generate(11, 300, **ARGS)
    assert from_json(to_json(steps)) == steps
    assert from_json("[]") == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("{", "not JSON", id="not-json"),
        pytest.param('{"at_s": 1}', "list", id="not-a-list"),
        pytest.param("[1]", "not an object", id="not-an-object"),
        pytest.param('[{"kind": "chip"}]', "required", id="no-time"),
        pytest.param('[{"at_s": 1, "kind": "meteor"}]', "unknown kind", id="unknown-kind"),
        pytest.param('[{"at_s": 1, "kind": "chip", "color": 1}]', "unknown fields", id="unknown-field"),
        pytest.param('[{"at_s": "1", "kind": "chip"}]', "at_s must be float", id="string-time"),
        pytest.param('[{"at_s": 1, "kind": "chip", "node": true}]', "node must be int", id="bool-node"),
    ],
)
def test_bad_schedule_json_is_refused(text: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        from_json(text)
