"""agent.runtime.app.freeze_gc_when_ready: the objects alive once every source has listed leave the collector's
generations."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from agent.runtime.app import freeze_gc_when_ready


class _State:
    """The one attribute freeze_gc_when_ready reads of agent.sources.state.ClusterState."""

    def __init__(self) -> None:
        self.ready = False


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


async def test_nothing_is_frozen_before_every_source_listed_and_everything_alive_after() -> None:
    state = _State()
    task = asyncio.create_task(freeze_gc_when_ready(state, asyncio.Event(), poll_s=0.001))  # type: ignore[arg-type]
    for _ in range(20):
        await asyncio.sleep(0.001)
    assert not task.done()
    assert gc.get_freeze_count() == 0
    kept: list[Any] = [object() for _ in range(1000)]  # alive at ready
    kept.append(kept)  # a cycle too: frozen, not collected while frozen
    state.ready = True
    frozen = await asyncio.wait_for(task, 5)
    assert frozen > len(kept)  # the imports' objects as well
    assert gc.get_freeze_count() > len(kept)
    assert not any(o is kept for o in gc.get_objects())  # out of every generation the collector walks
    gc.unfreeze()
    assert gc.get_freeze_count() == 0


async def test_a_stop_before_the_lists_freezes_nothing() -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(freeze_gc_when_ready(_State(), stop, poll_s=0.001))  # type: ignore[arg-type]
    await asyncio.sleep(0.005)
    stop.set()
    assert await asyncio.wait_for(task, 5) == 0
    assert gc.get_freeze_count() == 0
