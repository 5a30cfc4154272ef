"""The engine's two long-lived loops: faults off the queue, and the tick once a second."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from agent.core.faults import Fault, FaultCleared
from agent.core.fence import NotLeader
from agent.engine.detecting import DetectPipeline
from agent.engine.recovery import RecoveryEngine
from agent.sources.state import ClusterState

log = structlog.get_logger(__name__)


async def recovery_loop(
    engine: RecoveryEngine,
    state: ClusterState,
    queue: asyncio.Queue[Fault | FaultCleared],
    stop: asyncio.Event,
    on_depth: Callable[[], None] | None = None,
) -> None:
    """Take faults off `queue` once every source has listed, until `stop`: each one through the engine."""
    # No decision before every source has listed; readiness is a property of the state, not an event.
    while not state.ready and not stop.is_set():  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    while not stop.is_set():
        if not queue.empty():  # a queued fault is taken at once: no futures, no wake-ups of the loop
            item = queue.get_nowait()
        else:
            get = asyncio.ensure_future(queue.get())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({get, stopper}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopper.cancel()
            if not get.done():
                get.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await get
                return
            item = get.result()
        if on_depth is not None:
            on_depth()
        try:
            if isinstance(item, FaultCleared):
                await engine.handle_cleared(item)
            else:
                await engine.handle_fault(item, engine.ctx.clock.now())
        except asyncio.CancelledError:
            raise
        except NotLeader as e:
            log.warning("fault left to the leader: no longer leading", detail=str(e))
        except Exception:  # last resort of the fault loop: one fault's bug must not stop recovery of the others
            log.exception("handling a fault failed")
            engine.ctx.metrics.task_failed("recovery")


async def tick_loop(
    engine: RecoveryEngine, pipeline: DetectPipeline, state: ClusterState, stop: asyncio.Event, period_s: float
) -> None:
    """Every `period_s` once the state is ready, until `stop`: the detectors' and the engine's ticks, and every
    fifth the breaker ConfigMap a person may have reset."""
    n = 0
    ready_ticks = 0
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=period_s)
        if stop.is_set() or not state.ready:
            continue
        ready_ticks += 1
        try:
            pipeline.tick()
            # taints are reconciled only once the faults found by the first lists have been handled
            settled = ready_ticks >= 5 and pipeline.queue.empty()
            await engine.tick(engine.ctx.clock.now(), settled=settled, drained=pipeline.queue.empty())
            n += 1
            if n % 5 == 0:
                await engine.sync_breaker()
        except asyncio.CancelledError:
            raise
        except NotLeader as e:
            log.warning("tick stopped: no longer leading", detail=str(e))
        except Exception:  # last resort of the tick task: a bug in one tick must not end the loop; the next one runs
            log.exception("tick failed")
            engine.ctx.metrics.task_failed("tick")
