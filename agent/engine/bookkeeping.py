"""MindCluster's bookkeeping after restarts, coalesced: one writer per engine, one write per ConfigMap per round.

Each restart the agent sends asks for its bookkeeping (agent.core.bookkeeping): ``remain-retry-times`` in
``volcano-system/vcjob-fault-npu-cm`` and a record in ``mindx-dl/job-reschedule-reason``. Both ConfigMaps are
shared by every job, so a burst of restarts writing them one by one conflicts with itself (409, read again,
parse and encode every job's history again). Here the restarts' intents are queued; one background task (a
leader-only engine step) takes everything pending and, per ConfigMap, does one read-modify-write
(``update_configmap_keys``) whose update applies all those intents in queue order (agent.core.bookkeeping
``fold_remain_retry_times`` / ``fold_reschedule_records``: the same value as writing them one by one; a 409
re-applies them all to the fresh value). Intents queued while a round's writes are in flight wait for the next
round, which starts as soon as that one ends (no delay is added).

Counted per intent, as before coalescing: ``fault_agent_actions_total{action="bookkeeping"}`` once per intent and
ConfigMap with the outcome of the write that carried it; a failure is also logged per intent (incident, job). A
failure is never retried (the next round carries only newer intents) and never reaches the restart path.

Leadership: the queue belongs to the term that filled it. Leadership lost (the task cancelled as every leader-only
step, or a write refused by the fence with :class:`~agent.core.fence.NotLeader`) or a new term begun
(:meth:`Bookkeeper.new_term`) drops what is pending, logged and counted as failed; nothing of an old term is written
in a new one. A round cancelled mid-write is not counted (its write may or may not have landed), as a cancelled
write was not before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import structlog

from agent.actions import ActionResult, Outcome, error_detail
from agent.core.bookkeeping import (
    FAULT_NPU_CM,
    KEY_REMAIN_RETRY_TIMES,
    KEY_RESCHEDULE_RECORDS,
    RESCHEDULE_REASON_CM,
    WRITER_ANNOTATION,
    BookkeepingError,
    BookkeepingIntent,
    NextValue,
    fold_remain_retry_times,
    fold_reschedule_records,
    parse_reschedule_records,
    scheduler_job_id,
)
from agent.core.fence import NotLeader
from agent.engine.context import EngineContext

log = structlog.get_logger(__name__)

ACTION = "bookkeeping"
"""The ``action`` label of ``fault_agent_actions_total`` for these writes."""


@dataclass(frozen=True, slots=True)
class Pending:
    """One restart's bookkeeping waiting to be written: the `intent`, its `incident` id and the restart's time
    `at` (the record's ``RescheduleTimeStamp``: the incident's ``restart_at`` when given, else the engine's clock
    when it was queued). `once`: a successor's repeat of an adopted restart's bookkeeping, which its leader may
    have written before it died: its record is not added when the job's history holds one at `at` already
    (``remain-retry-times`` is a value, not a count: writing it again is the same)."""

    intent: BookkeepingIntent
    incident: str
    at: datetime
    once: bool = False


class Bookkeeper:
    """Queues the bookkeeping of restarts and writes it in rounds (module docstring).

    Args:
        ctx: the engine's shared parts (writer, clock, state cache, metrics, tasks, term).
    """

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self.pending: list[Pending] = []
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0  # rounds written (or tried) since start: what the tests and the benchmark read

    def record(
        self, intent: BookkeepingIntent, incident_id: str, *, at: datetime | None = None, once: bool = False
    ) -> None:
        """Queue `intent` (the restart of incident `incident_id`, at `at`, was just sent; `once`: see
        :class:`Pending`) and start a round unless one runs; returns at once (never raises into the restart
        path)."""
        self.pending.append(Pending(intent, incident_id, at or self.ctx.clock.now(), once))
        if self._task is None:
            self._task = self.ctx.tasks(self._run(), "bookkeeping")

    def new_term(self) -> None:
        """A new leadership term began: what an earlier term queued is not written (dropped, counted)."""
        self._drop("a new leadership term began")

    async def _run(self) -> None:
        try:
            while self.pending:
                batch, self.pending = self.pending, []
                self.rounds += 1
                if not await self._write(batch):
                    self._drop("no longer the leader")
        except asyncio.CancelledError:
            self._drop("no longer the leader")  # the step was cancelled: leadership lost or the agent stopping
            raise
        finally:
            self._task = None

    def _drop(self, why: str) -> None:
        dropped, self.pending = self.pending, []
        for _ in range(2 * len(dropped)):  # as a failed write of each of its two ConfigMaps
            self.ctx.metrics.action(ACTION, Outcome.FAILED.value)
        if dropped:
            log.warning("MindCluster bookkeeping not written", reason=why, incidents=[p.incident for p in dropped])

    def _live(self) -> dict[str, str] | None:
        """Job id → UID of every job in the watch cache, or None when it may not hold every job (not listed yet,
        or ``kube.job_label_selector`` set): then no other job's entry is dropped."""
        ctx, state = self.ctx, self.ctx.state
        if ctx.settings.kube.job_label_selector or not all(
            state.expects(s) and state.listed(s) for s in ("vcjobs", "acjobs")
        ):
            return None
        return {
            scheduler_job_id(j.namespace, j.name, j.uid): j.uid
            for store in (state.vcjobs, state.acjobs)
            for j in store.values()
        }

    async def _write(self, batch: list[Pending]) -> bool:
        """One read-modify-write per ConfigMap carrying every intent of `batch`. Returns False when the fence
        refused a write (leadership lost: the rest of the queue is not worth trying)."""
        ctx = self.ctx
        live = self._live()
        namespaces = tuple(ctx.settings.kube.namespaces)
        intents = [p.intent for p in batch]
        timed = [(p.intent, p.at) for p in batch]
        incident = ",".join(p.incident for p in batch)  # job names hold no comma: the replay splits it again

        def remain(data: Mapping[str, str]) -> dict[str, str]:
            value = fold_remain_retry_times(data.get(KEY_REMAIN_RETRY_TIMES, ""), intents, live, namespaces)
            return self._value(KEY_REMAIN_RETRY_TIMES, value, incident)

        def records(data: Mapping[str, str]) -> dict[str, str]:
            stored = data.get(KEY_RESCHEDULE_RECORDS, "")
            todo = _not_recorded(stored, batch) if any(p.once for p in batch) else timed
            value = fold_reschedule_records(stored, todo, live, namespaces)
            return self._value(KEY_RESCHEDULE_RECORDS, value, incident)

        leading = True
        for (namespace, name), update in ((FAULT_NPU_CM, remain), (RESCHEDULE_REASON_CM, records)):
            target = f"ConfigMap/{namespace}/{name}"
            if not leading:
                result = ActionResult("update-configmap", target, Outcome.FAILED, "no longer the leader")
            else:
                try:
                    result = await ctx.writer.update_configmap_keys(
                        namespace, name, update, incident=incident,
                        annotations={WRITER_ANNOTATION: ctx.term.actor()},
                    )  # fmt: skip
                except asyncio.CancelledError:
                    raise
                except NotLeader as e:
                    leading = False
                    result = ActionResult("update-configmap", target, Outcome.FAILED, error_detail(e))
                except Exception as e:  # the restarts are done; their bookkeeping is best effort
                    result = ActionResult("update-configmap", target, Outcome.FAILED, error_detail(e))
            for p in batch:
                ctx.metrics.action(ACTION, result.outcome.value)
                if result.outcome is Outcome.FAILED:
                    log.warning("MindCluster bookkeeping not written", incident=p.incident, target=result.target,
                                job=p.intent.job_id, detail=result.detail)  # fmt: skip
        return leading

    def _value(self, key: str, value: NextValue, incident: str) -> dict[str, str]:
        if value.problem is not None:
            log.warning("stored MindCluster bookkeeping unreadable; replaced", key=key, incident=incident,
                        problem=value.problem)  # fmt: skip
            self.ctx.metrics.input_rejected("ConfigMap", "bookkeeping-unreadable")
        if value.dropped:
            log.info("bookkeeping entries of jobs gone dropped", key=key, jobs=list(value.dropped))
        return {key: value.text}


def _not_recorded(stored: str, batch: list[Pending]) -> list[tuple[BookkeepingIntent, datetime]]:
    """`batch`'s (intent, time) pairs without the `once` ones whose job's history in `stored` already has a record
    of that second (an unreadable value has none: it is replaced)."""
    try:
        histories = parse_reschedule_records(stored)
    except BookkeepingError:
        histories = {}
    out = []
    for p in batch:
        history = histories.get(p.intent.job_id)
        if p.once and history is not None and any(r.at_s == int(p.at.timestamp()) for r in history.records):
            continue
        out.append((p.intent, p.at))
    return out
