"""The demo's timeline counts from when the fault write was sent, so no step reads as before the fault."""

from __future__ import annotations

import math
import random

import pytest

from testbed.demo import _ms, zero_point


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
