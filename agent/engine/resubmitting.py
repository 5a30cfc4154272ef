"""Resubmitting: carry out a ``resubmit`` decision, and finish the resubmissions cut short after their delete.

:meth:`Resubmitting.resubmit` deletes a Failed job and creates it again from its spec; its incident follows the
new UID (:meth:`Resubmitting.follow_resubmitted`). The rest of this module finishes those cut short.

A resubmission is recorded in a ConfigMap before its delete (agent.core.resubmission) and the record deleted once
the new job exists. One left over means the leader that made it died, lost its lease, or could not create the job.
The leader lists them (by label) at the start of each term and, within a term, on the ticks after one of its own
resubmissions was cut short or a resubmission incident closed, and for each
(agent.core.resubmission.leftover_action):

- the new job exists: its incident is persisted in its job record if it is not yet, then the resubmission
  record is deleted;
- the old job is still there: nothing while its ``resubmit`` incident is open (it resumes the resubmission, which
  writes the record again); without one (the incident failed or closed, the delete never went out) the record is
  stale and deleted, once the job is in the watch cache with that UID: left, it would make a later leader create
  the job again from it after anyone else deleted the job;
- neither: the job is created from the record, the incident follows the new UID as after any resubmission, then
  the record is deleted;
- the name holds another object: logged as an error naming it, counted, the record kept (never someone else's job).

Each is counted as ``fault_agent_actions_total{action="resubmit-recover", result=...}``.

A record whose finishing failed retriably (429, 5xx, no answer, after the writer's own retries) is tried again
after a wait that doubles from :data:`RETRY_FIRST_S` to :data:`RETRY_MAX_S`, not on every tick: the job stays
gone until the apiserver takes the create, so it is never given up, but a broken admission webhook or an
overloaded apiserver is not sent a create a second. A new term tries at once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog

from agent.actions import ActionResult, Outcome, error_detail
from agent.core.cluster import JobRecord, JobRef
from agent.core.fence import NotLeader
from agent.core.incidents import Incident, Phase
from agent.core.policy import Action
from agent.core.records import record_data
from agent.core.resubmission import Leftover, PendingResubmission
from agent.engine.claiming import Claiming
from agent.engine.closing import Closing
from agent.engine.context import EngineContext
from agent.engine.inflight import RestartsInFlight
from agent.engine.views import job_ref
from agent.kube.errors import KubeError

log = structlog.get_logger(__name__)

ACTION = "resubmit-recover"
RETRY_FIRST_S = 1.0
"""The wait after a record's first retriable failure, seconds (one tick)."""
RETRY_MAX_S = 60.0
"""The longest wait between two tries of one record, seconds."""


class Resubmitting:
    """Finishes left-over resubmissions (see the module docstring).

    Args:
        ctx: the engine's shared parts.
        inflight: the restarts in flight: its kept job UIDs name this term's resubmissions cut short
            (:meth:`~agent.engine.inflight.RestartsInFlight.keep`), and its acting ones those being written now.
        claiming: persists the incidents that follow a resubmitted job.
        closing: fails the incident of a resubmission that failed.
    """

    def __init__(self, ctx: EngineContext, inflight: RestartsInFlight, claiming: Claiming, closing: Closing) -> None:
        self.ctx = ctx
        self.inflight = inflight
        self.claiming = claiming
        self.closing = closing
        self.wanted = True  # list the records on the next pass
        self.reported: set[str] = set()  # ConfigMaps whose problem was logged and counted this term
        # old job UID -> (engine time before which its record is not tried again, the wait that set it, seconds):
        # records whose finishing failed retriably this term
        self.retry: dict[str, tuple[datetime, float]] = {}

    def new_term(self) -> None:
        """A new term looks for records once (a previous leader's)."""
        self.wanted = True
        self.reported.clear()
        self.retry.clear()

    async def recover(self, now: datetime) -> int:
        """One pass over the records left, when there is reason to look (a new term, a resubmission of this
        term cut short, a resubmission incident closed, or a record's retry wait over); cheap otherwise (no
        request). A record still in its retry wait is skipped. Returns the resubmissions finished.

        Raises:
            NotLeader: the fence closed (what is left stays for the next leader).
        """
        waiting = {uid for uid, (at, _) in self.retry.items() if at > now}
        due = self.retry.keys() - waiting
        if not (self.wanted or self.inflight.resubmission_closed() or self.inflight.kept() - waiting or due):
            return 0
        self.wanted = False
        self.inflight.take_resubmission_closed()
        try:
            pending, errors = await self.ctx.writer.pending_resubmissions()
        except KubeError as e:  # not listed: again next tick
            log.warning("resubmission records not listed", error=repr(e)[:300])
            self.wanted = True
            return 0
        for err in errors:
            if err.name not in self.reported:
                self.reported.add(err.name)
                log.error("resubmission record unreadable; kept", configmap=err.name, detail=err.detail)
                self.ctx.metrics.input_rejected("ConfigMap", err.reason)
        finished = 0
        listed = {p.from_uid for p in pending}
        self.inflight.keep_only(listed)  # a record gone: someone finished it
        for uid in self.retry.keys() - listed:
            del self.retry[uid]
        for item in pending:
            if self.inflight.acting_on(item.from_uid):
                self.wanted = True  # its act task is writing it right now
                continue
            if item.from_uid in waiting:
                continue
            finished += await self._finish(item, now)
        return finished

    async def _finish(self, item: PendingResubmission, now: datetime) -> int:
        ctx = self.ctx
        what, result, _ = await ctx.writer.finish_resubmission(item)
        job = f"{item.namespace}/{item.name}"
        retry_in_s = 0.0
        if result.outcome is Outcome.FAILED and result.retriable:
            retry_in_s = self._back_off(item.from_uid, now)
        else:
            self.retry.pop(item.from_uid, None)
        if what is Leftover.OLD_EXISTS:
            self.inflight.release(item.from_uid)
            if self._stale(item):
                await self._forget_stale(item)
            return 0
        if result.outcome is Outcome.DRY_RUN:
            return 0
        if result.outcome is Outcome.FAILED:
            if result.retriable:  # tried again after its wait; its incident is not abandoned meanwhile, even
                self.inflight.keep(item.from_uid)  # in a new term of this replica (which cleared kept)
            else:
                self.inflight.release(item.from_uid)  # its incident ends as its job's absence says
            if item.configmap not in self.reported:
                self.reported.add(item.configmap)
                log.error(
                    "resubmission cannot be finished; record kept", incident=item.incident, job=job,
                    kind=item.kind.value, from_uid=item.from_uid, configmap=item.configmap, leftover=what.value,
                    detail=result.detail, retry_in_s=retry_in_s or None,
                )  # fmt: skip
                ctx.metrics.action(ACTION, "conflict" if what is Leftover.CONFLICT else Outcome.FAILED.value)
            return 0
        new_uid = result.uid
        if not await self._has_incident(item, new_uid):
            await self._follow(item, new_uid, now)
        deleted = await ctx.writer.forget_resubmission(item.from_uid, incident=item.incident)
        if deleted.outcome is Outcome.FAILED:
            log.warning("resubmission record not deleted", configmap=item.configmap, detail=deleted.detail)
            self.wanted = True
        self.inflight.release(item.from_uid)
        log.info(
            "resubmission finished by the leader from its record", incident=item.incident, job=job,
            kind=item.kind.value, from_uid=item.from_uid, uid=new_uid, created=what is Leftover.CREATE,
        )  # fmt: skip
        ctx.metrics.action(ACTION, result.outcome.value)
        return 1

    async def _has_incident(self, item: PendingResubmission, new_uid: str) -> bool:
        """Whether the new job's record holds an incident already (its incident was moved to it): read from the
        apiserver, as the watch may not have delivered it yet; a failed read counts as none (moving it again
        writes the same record)."""
        try:
            record = await self.ctx.writer.read_record(JobRef(item.kind, item.namespace, item.name, new_uid))
        except KubeError as e:  # not read: counted as no incident
            log.warning("resubmitted job's record not read", configmap=item.configmap, error=str(e))
            return False
        return record is not None and bool(record.incident)

    def _back_off(self, from_uid: str, now: datetime) -> float:
        """Set the wait before `from_uid`'s record is tried again after a retriable failure: RETRY_FIRST_S, then
        twice the last wait, at most RETRY_MAX_S. Returns it, seconds."""
        last = self.retry.get(from_uid, (now, 0.0))[1]
        wait_s = min(RETRY_MAX_S, max(RETRY_FIRST_S, 2 * last))
        self.retry[from_uid] = (now + timedelta(seconds=wait_s), wait_s)
        return wait_s

    def _stale(self, item: PendingResubmission) -> bool:
        """True when `item`'s old job is in the watch cache with its UID and has no open ``resubmit`` incident:
        nothing will finish the resubmission. A job this replica does not watch (another namespace) is not judged."""
        ctx = self.ctx
        job = ctx.state.job(item.kind, item.namespace, item.name)
        if job is None or job.uid != item.from_uid:
            return False
        incident = ctx.store.incident(item.from_uid)
        return incident is None or not incident.phase.open or incident.action != Action.RESUBMIT.value

    async def _forget_stale(self, item: PendingResubmission) -> None:
        """Delete a stale record (see :meth:`_stale`); counted as ``resubmit-recover`` ``stale``."""
        deleted = await self.ctx.writer.forget_resubmission(item.from_uid, incident=item.incident)
        if deleted.outcome is Outcome.FAILED:
            log.warning("stale resubmission record not deleted", configmap=item.configmap, detail=deleted.detail)
            self.wanted = True
            return
        if deleted.outcome is Outcome.DRY_RUN:
            return
        log.info(
            "stale resubmission record deleted: its job is still there and no open incident resubmits it",
            incident=item.incident, job=f"{item.namespace}/{item.name}", from_uid=item.from_uid,
            configmap=item.configmap,
        )  # fmt: skip
        self.ctx.metrics.action(ACTION, "stale")

    async def _follow(self, item: PendingResubmission, new_uid: str, now: datetime) -> None:
        """Move the resubmission's incident to the new job and persist it there: the store's (this term's own
        resubmission), else the one the record kept (a previous leader's)."""
        store = self.ctx.store
        for err in store.adopt_resubmission(item.from_uid, item.incident_state, item.ledger):
            log.warning("resubmission record's incident not adopted", configmap=item.configmap, error=str(err))
        incident = store.incident(item.from_uid)
        if incident is None or incident.phase is not Phase.ACTING:
            log.warning("resubmitted job has no acting incident to follow it", configmap=item.configmap,
                        incident=item.incident)  # fmt: skip
            return
        old = JobRef(item.kind, item.namespace, item.name, item.from_uid)
        await self.follow_resubmitted(old, new_uid, now)  # NotLeader: the record stays for the next leader

    async def resubmit(self, job: JobRecord, incident: Incident) -> None:
        """Delete the Failed job and create it again from its spec; the incident follows the new UID and is
        recovered when the new job runs (see agent.engine.ticking). The lineage count is the ledger's
        resubmissions, already charged when the incident opened (and read back from the job's record after a
        restart)."""
        ctx = self.ctx
        store = ctx.store
        count = store.ledger(job.uid).resubmits_used
        started = ctx.clock.now()  # the new job's restart time: its pods are made before the answers are all in
        try:
            result = await ctx.writer.resubmit_job(job_ref(job), incident=incident.id, count=count)
        except NotLeader:
            raise
        except Exception as e:  # last resort of the resubmission: API errors come back as FAILED, a bug fails this one
            detail = f"resubmit failed: {error_detail(e)}"[:300]
            result = ActionResult("resubmit", str(job_ref(job)), Outcome.FAILED, detail)
        ctx.metrics.action(Action.RESUBMIT.value, result.outcome.value)
        now = ctx.clock.now()
        if result.outcome is Outcome.FAILED and result.kept:
            # the job is deleted but its resubmission is recorded: the incident stays acting and follows the job
            # once a tick (this leader's or a successor's) creates it from the record
            self.inflight.keep(job.uid)
            log.warning(
                "resubmission cut short after the delete; kept for the next pass", incident=incident.id,
                job=f"{job.namespace}/{job.name}", configmap=result.kept, detail=result.detail,
            )  # fmt: skip
            return
        if result.outcome is Outcome.FAILED or (result.outcome is not Outcome.DRY_RUN and not result.uid):
            await self.closing.action_failed(
                job, now, Action.RESUBMIT.value, result.detail or "resubmit gave no new job"
            )
            return
        if result.outcome is Outcome.DRY_RUN:
            restarting = store.restarting(job.uid, now)
            await self.claiming.persist(job, restarting.id)
            return
        log.info(
            "job resubmitted", incident=incident.id, job=f"{job.namespace}/{job.name}", uid=result.uid, count=count
        )
        await self.follow_resubmitted(job_ref(job), result.uid, min(started, now))

    async def follow_resubmitted(self, old: JobRef, new_uid: str, now: datetime) -> None:
        """The job `old` was created again as `new_uid`: its ``acting`` incident (in the store) moves to the new
        UID, ``restarting``, and is persisted in the new job's record (recovered once it runs: agent.engine.ticking);
        the old job's record goes (best effort: else when the old job's deletion is seen, or at a term's sweep).

        Raises:
            TransitionError: the store has no acting incident for `old.uid`.
            NotLeader: the fence closed before the record was written.
        """
        ctx = self.ctx
        store = ctx.store
        moved = store.resubmitted(old.uid, new_uid, now)
        self.inflight.release(old.uid)
        ctx.restored.add(new_uid)  # the store already holds the new job's incident and ledger
        new_ref = JobRef(old.kind, old.namespace, old.name, new_uid)
        written = await ctx.writer.write_record(new_ref, record_data(*store.encoded(new_uid), ""), incident=moved.id)
        if written.outcome is Outcome.FAILED:
            log.warning(
                "incident state not persisted for the resubmitted job", incident=moved.id, detail=written.detail
            )
        else:
            dropped = await ctx.writer.delete_record(old.uid, incident=moved.id)
            if dropped.outcome is Outcome.FAILED:
                log.warning("old job's record not deleted", incident=moved.id, detail=dropped.detail)
        ctx.metrics.incidents_open(*store.counts())
