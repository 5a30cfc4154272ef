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

Entries before any failure: the Ascend Operator fails an AscendJob with ``fault-retry-times`` > 0 at its first
failed pod unless ``remain-retry-times`` already holds an entry for it with ``Times`` >= 1, and MindCluster's plugin
makes one for every running job whose ``fault-scheduling`` is not ``off`` at its first session. So, as jobs
change (the state's :meth:`~agent.sources.state.ClusterState.take_changed_jobs`, drained once per tick, plus one
pass over every job at the start of a term), :meth:`Bookkeeper.sync_jobs` queues entry changes (made for a job
seen, dropped for a job gone, of another UID, or no longer opted in: agent.core.bookkeeping ``entry_changes``)
and the same rounds write them with the restarts' intents, one read-modify-write of the one key (the
reschedule-records ConfigMap is written only for restarts). Never in observe mode, with ``policy.bookkeeping``
off, or while MindCluster's own plugin evidently runs (agent.sources.plugin_check: it keeps the entries then).

Leadership: the queue belongs to the term that filled it. Leadership lost (the task cancelled as every leader-only
step, or a write refused by the fence with :class:`~agent.core.fence.NotLeader`) or a new term begun
(:meth:`Bookkeeper.new_term`) drops what is pending, logged and counted as failed; nothing of an old term is written
in a new one. A round cancelled mid-write is not counted (its write may or may not have landed), as a cancelled
write was not before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
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
    EntryChange,
    NextValue,
    ParsedRecords,
    entry_changes,
    fold_remain_retry_times,
    fold_reschedule_records,
    parse_reschedule_records,
    resumed_intent,
    scheduler_job_id,
)
from agent.core.cluster import JobRecord
from agent.core.fence import NotLeader
from agent.core.incidents import Incident
from agent.core.policy import Action
from agent.engine.context import EngineContext

log = structlog.get_logger(__name__)

ACTION = "bookkeeping"
"""The ``action`` label of ``fault_agent_actions_total`` for these writes."""
MAX_UNWRITTEN = 10000
"""Entry changes of failed rounds kept for the next one (the oldest go first; a new term starts from every job)."""
_RESTARTS = (Action.RESTART_JOB.value, Action.RESTART_PODS.value)
"""The incident actions whose restart has bookkeeping."""
ENTRIES_ACTION = "retry-entries"
"""The ``action`` label of a round that carried only jobs' ``remain-retry-times`` entry changes."""


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

    def __init__(self, ctx: EngineContext, plugin_active: Callable[[], bool] | None = None) -> None:
        self.ctx = ctx
        self.pending: list[Pending] = []
        self.changes: list[EntryChange] = []  # remain-retry-times entries of jobs seen or gone, not written yet
        self.plugin_active = plugin_active or (lambda: False)
        self._synced = False  # this term's first pass over every job is done
        self._skipped: str | None = None  # why entries are not kept now (logged once per reason)
        self._unwritten: list[EntryChange] = []  # a failed round's entry changes: carried by the next round
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0  # rounds written (or tried) since start: what the tests and the benchmark read
        self._records = ParsedRecords()  # the last reschedule-records value read or made, parsed (issue 39)

    def record(
        self, intent: BookkeepingIntent, incident_id: str, *, at: datetime | None = None, once: bool = False
    ) -> None:
        """Queue `intent` (the restart of incident `incident_id`, at `at`, was just sent; `once`: see
        :class:`Pending`) and start a round unless one runs; returns at once (never raises into the restart
        path)."""
        self.pending.append(Pending(intent, incident_id, at or self.ctx.clock.now(), once))
        self._start()

    def resumed(self, job: JobRecord, incident: Incident) -> BookkeepingIntent | None:
        """The bookkeeping of `incident`'s restart decided earlier and sent now or already (an escalation, an
        incident left ``acting`` that this replica resumes), rebuilt from the incident, the job's cached pods and
        its ledger (agent.core.bookkeeping.resumed_intent); None with ``policy.bookkeeping`` off or when the
        incident's action is no restart."""
        if not self.ctx.settings.policy.bookkeeping or incident.action not in _RESTARTS:
            return None
        pods = self.ctx.state.pods_of_job(job.kind, job.namespace, job.name)
        return resumed_intent(job, incident, pods, self.ctx.store.ledger(job.uid))

    def new_term(self) -> None:
        """A new leadership term began: what an earlier term queued is not written (dropped, counted)."""
        self._drop("a new leadership term began")
        self._synced = False

    def _entries_off(self) -> str | None:
        """Why no entry is kept now, or None."""
        policy = self.ctx.settings.policy
        if policy.mode != "act":
            return "policy.mode is observe"
        if not policy.bookkeeping:
            return "policy.bookkeeping is off"
        if self.plugin_active():
            return "MindCluster's Volcano plugin keeps them (it evidently runs)"
        return None

    def sync_jobs(self) -> int:
        """Leader only, with every source listed: queue the ``remain-retry-times`` entry changes of the jobs that
        changed since the last call (all jobs at the first call of a term) and start a round; returns how many
        were queued. Work is bounded by the jobs that changed, never a scan of them all after the first pass."""
        state = self.ctx.state
        pairs = state.take_changed_jobs()
        why = self._entries_off()
        if why is not None:
            if why != self._skipped:
                self._skipped = why
                log.info("remain-retry-times entries not kept by the agent", reason=why)
            self._synced = False  # when it may keep them again, it starts from every job
            return 0
        self._skipped = None
        if not self._synced:
            self._synced = True
            pairs = [(old, new) for old, new in pairs if new is None and old is not None]  # the deleted ones
            pairs += [(None, j) for store in (state.vcjobs, state.acjobs) for j in store.values()]
        used = {new.uid: self.ctx.store.ledger(new.uid).business_retries_used for _, new in pairs if new is not None}
        changes = entry_changes(pairs, used)
        if changes:
            self.changes = [*self._unwritten, *self.changes, *changes]
            self._unwritten = []
            self._start()
        return len(changes)

    def _start(self) -> None:
        if self._task is None:
            self._task = self.ctx.tasks(self._run(), "bookkeeping")

    async def _run(self) -> None:
        try:
            while self.pending or self.changes:
                batch, self.pending = self.pending, []
                changes, self.changes = self.changes, []
                self.rounds += 1
                if not await self._write(batch, changes):
                    self._drop("no longer the leader")
        except asyncio.CancelledError:
            self._drop("no longer the leader")  # the step was cancelled: leadership lost or the agent stopping
            raise
        finally:
            self._task = None

    def _drop(self, why: str) -> None:
        dropped, self.pending = self.pending, []
        self._unwritten = []
        if self.changes:
            log.info("remain-retry-times entry changes not written", reason=why, jobs=len(self.changes))
            self.changes = []
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

    async def _write(self, batch: list[Pending], changes: list[EntryChange] | None = None) -> bool:
        """One read-modify-write per ConfigMap carrying every intent of `batch` (and the entry `changes`, in the
        first; the second only when `batch` has intents). Returns False when the fence refused a write
        (leadership lost: the rest of the queue is not worth trying)."""
        changes = changes or []
        ctx = self.ctx
        live = self._live()
        namespaces = tuple(ctx.settings.kube.namespaces)
        intents = [p.intent for p in batch]
        timed = [(p.intent, p.at) for p in batch]
        incident = ",".join(p.incident for p in batch)  # job names hold no comma: the replay splits it again
        if not batch:
            incident = ",".join(sorted({c.job_id for c in changes}))  # the jobs' scheduler ids (made or dropped)

        def remain(data: Mapping[str, str]) -> dict[str, str]:
            current = data.get(KEY_REMAIN_RETRY_TIMES, "")
            value = fold_remain_retry_times(current, intents, live, namespaces, changes)
            return self._value(KEY_REMAIN_RETRY_TIMES, value, incident)

        def records(data: Mapping[str, str]) -> dict[str, str]:
            stored = data.get(KEY_RESCHEDULE_RECORDS, "")
            todo = _not_recorded(stored, batch) if any(p.once for p in batch) else timed
            value = fold_reschedule_records(stored, todo, live, namespaces, parsed=self._records)
            return self._value(KEY_RESCHEDULE_RECORDS, value, incident)

        leading = True
        targets = ((FAULT_NPU_CM, remain), (RESCHEDULE_REASON_CM, records)) if batch else ((FAULT_NPU_CM, remain),)
        for (namespace, name), update in targets:
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
                except Exception as e:  # last resort of the bookkeeping task: the restarts are done; best effort
                    result = ActionResult("update-configmap", target, Outcome.FAILED, error_detail(e))
            for p in batch:
                ctx.metrics.action(ACTION, result.outcome.value)
                if result.outcome is Outcome.FAILED:
                    log.warning("MindCluster bookkeeping not written", incident=p.incident, target=result.target,
                                job=p.intent.job_id, detail=result.detail)  # fmt: skip
            if changes and (namespace, name) == FAULT_NPU_CM:
                if not batch:
                    ctx.metrics.action(ENTRIES_ACTION, result.outcome.value)
                if result.outcome is Outcome.FAILED and leading:  # the next round (a job change) carries them
                    log.warning("remain-retry-times entries not written", target=result.target,
                                jobs=len(changes), detail=result.detail)  # fmt: skip
                    self._unwritten = [*changes, *self._unwritten][-MAX_UNWRITTEN:]
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
