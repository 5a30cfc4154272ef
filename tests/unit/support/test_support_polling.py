"""The tests' one ``eventually`` (tests/support/polling.py): plain and async probes, a check, a failure that names
what was awaited and the last value."""

from __future__ import annotations

import pytest
from support.polling import eventually


async def test_a_plain_probe_is_polled_until_truthy_and_its_value_returned() -> None:
    calls = iter([0, 0, 3])
    assert await eventually(lambda: next(calls), what="three", interval_s=0) == 3


async def test_an_async_probe_with_a_check() -> None:
    seen: list[int] = []

    async def probe() -> list[int]:
        seen.append(len(seen))
        return list(seen)

    got = await eventually(probe, lambda v: len(v) >= 2, what="two calls", interval_s=0)
    assert got == [0, 1]


async def test_the_failure_names_what_and_the_last_value() -> None:
    with pytest.raises(pytest.fail.Exception) as info:
        await eventually(lambda: "never", lambda v: v == "now", what="the answer", timeout_s=0.05, interval_s=0.01)
    assert "waiting for the answer" in str(info.value)
    assert "last value: 'never'" in str(info.value)
