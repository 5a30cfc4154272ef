"""Waiting for something in tests with a deadline instead of a sleep: one ``eventually``. Not a test module."""

from __future__ import annotations

import asyncio
import inspect
import io
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T] | T],
    check: Callable[[T], Any] = bool,
    *,
    what: str,
    timeout_s: float = 30.0,
    interval_s: float = 0.2,
) -> T:
    """Call `probe` (plain or async) every `interval_s` seconds until `check` holds for its value (by default: the
    value is truthy) and return that value; after `timeout_s` seconds fail the test naming `what` and the last
    value seen. The deadline is on the monotonic clock."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = probe()
        value: T = await got if inspect.isawaitable(got) else got  # type: ignore[assignment]
        if check(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}; last value: {value!r}"[:2000])
        await asyncio.sleep(interval_s)


def until(probe: Callable[[], T | None], what: str, timeout_s: float = 60.0, interval_s: float = 0.3) -> T:
    """The blocking form of :func:`eventually` for tests that talk to the testbed through testbed.rest.Rest: call
    `probe` every `interval_s` seconds until it returns a truthy value and return it; after `timeout_s` seconds
    (monotonic clock) fail the test naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(interval_s)


async def cancel_and_wait(task: asyncio.Task[Any], *, what: str, timeout_s: float = 20.0) -> None:
    """Cancel `task` and wait at most `timeout_s` seconds (the loop's clock) for it to end; a task that does not
    end fails the test naming `what` and where the task is stuck (its stack), instead of hanging the run. The
    task's own CancelledError is its expected end; any other exception it ended with is raised."""
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        stack = io.StringIO()
        task.print_stack(file=stack)
        pytest.fail(
            f"{what} did not end within {timeout_s} s of its cancellation; stuck at:\n{stack.getvalue()}"[:4000]
        )
    if not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]
