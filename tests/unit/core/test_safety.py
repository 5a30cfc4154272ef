"""Restart rate limit and circuit breaker (agent/core/guards.py)."""

from __future__ import annotations

import pytest

from agent.core.guards import BreakerState, CircuitBreaker, TokenBucket


@pytest.mark.parametrize(
    ("rate", "burst", "times", "expected"),
    [
        pytest.param(1.0, 3, [0, 0, 0, 0], [True, True, True, False], id="burst-then-empty"),
        pytest.param(1.0, 1, [0, 0.5, 1.0], [True, False, True], id="refill-one-per-second"),
        pytest.param(10 / 60, 2, [0, 0, 3, 6], [True, True, False, True], id="ten-per-minute"),
        pytest.param(100.0, 2, [0, 0, 0, 100], [True, True, False, True], id="refill-capped-at-burst"),
        pytest.param(1.0, 1, [10, 5, 5.5], [True, False, False], id="clock-backwards-refills-nothing"),
    ],
)
def test_token_bucket(rate: float, burst: int, times: list[float], expected: list[bool]) -> None:
    bucket = TokenBucket(rate, burst, now_s=times[0])
    assert [bucket.try_take(t) for t in times] == expected


def test_token_bucket_never_exceeds_burst_after_idle() -> None:
    bucket = TokenBucket(1.0, 2, now_s=0)
    assert bucket.tokens(1000) == 2.0
    assert bucket.wait_s(1000) == 0.0
    bucket.try_take(1000)
    bucket.try_take(1000)
    assert bucket.wait_s(1000) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("rate", "burst", "message"),
    [
        pytest.param(0.0, 1, "rate must be a positive", id="zero-rate"),
        pytest.param(float("nan"), 1, "rate must be a positive", id="nan-rate"),
        pytest.param(1.0, 0, "burst must be at least 1", id="zero-burst"),
    ],
)
def test_token_bucket_rejects_bad_parameters(rate: float, burst: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TokenBucket(rate, burst, now_s=0)


@pytest.mark.parametrize(
    ("events", "watched", "trips_at"),
    [
        pytest.param([("n1", 0), ("n2", 1), ("n3", 2)], 10, 2, id="30pct-trips-on-third"),
        pytest.param([("n1", 0), ("n2", 1)], 10, None, id="20pct-is-not-more-than-20pct"),
        pytest.param([("n1", 0), ("n1", 1), ("n1", 2)], 10, None, id="same-node-counts-once"),
        pytest.param([("n1", 0), ("n2", 200), ("n3", 400)], 10, None, id="old-faults-leave-window"),
        pytest.param([("n1", 0)], 2, None, id="single-node-below-minimum"),
        pytest.param([("n1", 0), ("n2", 1)], 2, 1, id="two-of-two-trips"),
        pytest.param([("n1", 0), ("n2", 1), ("n3", 2)], 0, None, id="no-watched-nodes-never-trips"),
    ],
)
def test_breaker_trips(events: list[tuple[str, float]], watched: int, trips_at: int | None) -> None:
    breaker = CircuitBreaker(share=0.2, window_s=300)
    trips = [breaker.record_node_fault(node, t, watched) for node, t in events]
    tripped = [i for i, trip in enumerate(trips) if trip is not None]
    assert tripped == ([] if trips_at is None else [trips_at])
    assert breaker.is_open is (trips_at is not None)


def test_breaker_stays_open_until_reset() -> None:
    breaker = CircuitBreaker(share=0.2, window_s=10)
    for i in range(3):
        breaker.record_node_fault(f"n{i}", 0, 10)
    assert breaker.to_data()["state"] == "open"
    assert breaker.trip is not None
    assert "3 of 10 watched nodes (30%)" in breaker.trip.reason
    # long after the window: still open
    assert breaker.record_node_fault("n9", 10_000, 10) is None
    assert breaker.is_open
    breaker.reset()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.faulty_in_window(10_000) == ()


def test_breaker_state_round_trips() -> None:
    breaker = CircuitBreaker(share=0.2, window_s=300)
    for i in range(3):
        breaker.record_node_fault(f"n{i}", 5.5, 10)
    data = breaker.to_data()
    other = CircuitBreaker(share=0.2, window_s=300)
    other.restore(data)
    assert other.trip == breaker.trip
    other.restore({"state": "closed"})
    assert not other.is_open


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param({"state": "half-open"}, "must be 'open' or 'closed'", id="unknown-state"),
        pytest.param({"state": "open", "tripped_at": "soon"}, "'tripped_at' is not a number", id="bad-time"),
        pytest.param({"state": "open", "watched_nodes": "x"}, "'watched_nodes' is not an integer", id="bad-count"),
    ],
)
def test_breaker_restore_rejects_bad_state(data: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CircuitBreaker(share=0.2, window_s=300).restore(data)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"share": 0.0, "window_s": 1}, "share must be in", id="zero-share"),
        pytest.param({"share": 1.5, "window_s": 1}, "share must be in", id="share-above-one"),
        pytest.param({"share": 0.2, "window_s": 0}, "window must be a positive", id="zero-window"),
        pytest.param({"share": 0.2, "window_s": 1, "min_faulty_nodes": 0}, "at least 1", id="zero-minimum"),
    ],
)
def test_breaker_rejects_bad_parameters(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CircuitBreaker(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("node", "watched", "message"),
    [pytest.param("", 3, "must not be empty", id="empty-node"), pytest.param("n1", -1, "not be negative", id="neg")],
)
def test_breaker_rejects_bad_record(node: str, watched: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CircuitBreaker(share=0.2, window_s=10).record_node_fault(node, 0, watched)


def test_breaker_counts_a_fault_at_its_own_signal_time() -> None:
    """Issue 13 B4: after a restart every standing fault is read again; faults 7 and 20 minutes old must not
    count as new in a 300 s window (3 of 24 nodes really new, limit 20 %)."""
    now = 10_000.0
    breaker = CircuitBreaker(share=0.2, window_s=300)
    standing = [now - 20 * 60] * 10 + [now - 7 * 60] * 10
    for i, at in enumerate(standing):
        assert breaker.record_node_fault(f"old{i}", now, 24, at_s=at) is None
    for i in range(3):
        assert breaker.record_node_fault(f"new{i}", now + i, 24, at_s=now + i - 1) is None
    assert breaker.faulty_in_window(now + 3) == ("new0", "new1", "new2")
    assert not breaker.is_open
    # five really new nodes of 24 are more than 20 %: the breaker still trips on fresh faults
    trips = [breaker.record_node_fault(f"new{i}", now + i, 24, at_s=now + i) for i in range(3, 5)]
    assert trips[-1] is not None
    assert trips[-1].at_s == now + 4
    assert trips[-1].faulty_nodes == tuple(f"new{i}" for i in range(5))


def test_breaker_signal_time_after_now_counts_as_now_and_never_moves_back() -> None:
    breaker = CircuitBreaker(share=0.5, window_s=300)
    breaker.record_node_fault("n1", 1000.0, 10, at_s=5000.0)  # a reporter's clock ahead of ours
    assert breaker.faulty_in_window(1299.0) == ("n1",)
    assert breaker.faulty_in_window(1300.0) == ()
    breaker.record_node_fault("n2", 1000.0, 10, at_s=900.0)
    breaker.record_node_fault("n2", 1001.0, 10, at_s=800.0)  # an older report of a node seen later already
    assert breaker.faulty_in_window(1199.0) == ("n1", "n2")


def _reference_breaker(
    share: float, window_s: float, events: list[tuple[str, float, float | None, int]]
) -> list[tuple[str, ...] | None]:
    """The breaker as first written (a scan of every node per fault), the model the heap-expiring one must equal."""
    seen: dict[str, float] = {}
    tripped = False
    out: list[tuple[str, ...] | None] = []
    for node, now_s, at_s, watched in events:
        horizon = now_s - window_s
        seen = {n: t for n, t in seen.items() if t > horizon}
        at = now_s if at_s is None else min(at_s, now_s)
        if at <= horizon:
            out.append(None)
            continue
        seen[node] = max(at, seen.get(node, at))
        faulty = tuple(sorted(n for n, t in seen.items() if t > horizon))
        if not tripped and watched and len(faulty) >= 2 and len(faulty) > share * watched:
            tripped = True
            out.append(faulty)
        else:
            out.append(None)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_breaker_window_equals_a_full_scan_per_fault(seed: int) -> None:
    """Random faults (nodes faulting again, signal times before the window and in the future, time standing still)
    trip the breaker at the same fault with the same nodes as a scan of every node per fault would."""
    import random

    rng = random.Random(seed)
    now = 0.0
    events: list[tuple[str, float, float | None, int]] = []
    for _ in range(rng.randrange(1, 120)):
        now += rng.choice([0.0, 0.5, 3.0, 11.0])
        at = rng.choice([None, now - rng.uniform(0, 25), now + 5.0])
        events.append((f"n{rng.randrange(12)}", now, at, rng.choice([0, 20, 60, 200])))
    share = rng.choice([0.1, 0.2, 0.5])
    breaker = CircuitBreaker(share=share, window_s=10)
    got = [breaker.record_node_fault(node, now_s, watched, at_s=at_s) for node, now_s, at_s, watched in events]
    assert [t.faulty_nodes if t is not None else None for t in got] == _reference_breaker(share, 10, events)
