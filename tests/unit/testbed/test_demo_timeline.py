"""The demo's timeline counts from when the fault write was sent, so no step reads as before the fault."""

from __future__ import annotations

import math
import random

import pytest

from testbed.demo import _ms, recovery_took, zero_point


@pytest.mark.parametrize("seed", range(5))
def test_no_step_after_the_write_reads_as_negative(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(2000):
        sent = 1_800_000_000 + rng.random() * 1000  # unix seconds with sub-ms digits
        seen = sent + rng.random() * 0.002  # up to 2 ms later
        stamped = math.floor(seen * 1000) / 1000  # as the agent's log and Kafka record it: whole ms
        assert float(_ms(stamped, zero_point(sent))) >= 0.0, (sent, seen)


def test_the_zero_is_the_send_time_to_the_millisecond() -> None:
    assert zero_point(1_800_000_000.1239) == pytest.approx(1_800_000_000.123)
    assert _ms(None, 0.0) == "—"


def test_the_demo_says_how_long_recovery_took() -> None:
    """Issue 41, 8: the demo never said "recovery took X" (three different numbers, none named so)."""
    event = {"data": {"durations": {"total_s": 1.734}}}
    line = recovery_took(100.0, 101.25, event)
    assert line.startswith("recovery took 1250 ms (fault written → job Running again)")
    assert "the agent's own figure 1.73 s" in line
    assert recovery_took(100.0, 101.25, None) == "recovery took 1250 ms (fault written → job Running again)"
    assert "did not run again" in recovery_took(100.0, None, event)
