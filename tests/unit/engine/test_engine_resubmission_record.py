"""The engine finishes its own resubmission cut short after the delete: the job is gone, its record left; the
incident stays acting (not abandoned), and the next tick creates the job from the record and moves the incident
to the new UID. No API client, a fixed clock."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from support import factories
from support.factories import T0, change
from support.fakes import FakeWriter

from agent.actions import ActionResult, Outcome
from agent.core.clock import FixedClock
from agent.core.cluster import JobKind, JobRef
from agent.core.incidents import RESUBMITTED_FROM_ANNOTATION, Phase, decode_incident
from agent.core.records import KEY_INCIDENT
from agent.core.resubmission import Leftover, PendingResubmission, configmap_name
from agent.engine.ports import NoMetrics
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import ChangeType
from agent.settings import Settings
from agent.sources.state import ClusterState

NEW_UID = "uid-job-again"


class CountingMetrics(NoMetrics):
    def __init__(self) -> None:
        self.actions: list[tuple[str, str]] = []

    def action(self, action: str, result: str) -> None:
        self.actions.append((str(action), str(result)))


class CutShortWriter(FakeWriter):
    """The delete goes out, the create does not (it failed after retries): the job is gone from the cluster, its
    record left; the next pass creates it from the record."""

    def __init__(self, state: ClusterState) -> None:
        super().__init__()
        self.state = state
        self.made = False
        self.annotated: list[tuple[str, dict[str, str]]] = []  # (job UID, the record's data written)

    async def write_record(self, job: JobRef, annotations: Mapping[str, str], *, incident: str) -> ActionResult:
        self.annotated.append((job.uid, dict(annotations)))
        return self._done("write_record", str(job))

    async def resubmit_job(
        self, job: JobRef, *, incident: str, count: int, wait_s: float = 30.0, poll_s: float = 0.2
    ) -> ActionResult:
        self.calls.append(("resubmit_job", str(job)))
        body = {"metadata": {"name": job.name, "namespace": job.namespace,
                             "annotations": {RESUBMITTED_FROM_ANNOTATION: job.uid}}}  # fmt: skip
        self.resubmissions.append(PendingResubmission(job.kind, job.namespace, job.name, job.uid, incident, count,
                                                      body))  # fmt: skip
        old = self.state.job(job.kind, job.namespace, job.name)
        self.state.apply(change("vcjobs", "ns/job", None, old, type=ChangeType.DELETED))
        return ActionResult("resubmit", str(job), Outcome.FAILED, "HTTP 500", True, 500, kept=configmap_name(job.uid))

    async def finish_resubmission(self, pending: PendingResubmission) -> tuple[Leftover, ActionResult, dict[str, str]]:
        self.calls.append(("finish_resubmission", pending.from_uid))
        self.made = True
        return Leftover.CREATE, ActionResult("resubmit-recover", str(pending), Outcome.DONE, uid=NEW_UID), {}

    async def forget_resubmission(self, from_uid: str, *, incident: str) -> ActionResult:
        self.resubmissions = [p for p in self.resubmissions if p.from_uid != from_uid]
        return self._done("forget_resubmission", from_uid)


async def test_a_resubmission_whose_create_failed_is_finished_on_the_next_tick() -> None:
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node("n1")))
    state.apply(change("vcjobs", "ns/job", factories.job(phase="Failed")))
    for i in range(2):
        state.apply(change("pods", f"ns/job-{i}", factories.pod(f"job-{i}", node="n1", rank=i)))
    writer, metrics = CutShortWriter(state), CountingMetrics()
    settings = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"resubmit_limit": 1}})
    clock = FixedClock(T0 + timedelta(seconds=10))
    engine = RecoveryEngine(settings, state, writer, clock=clock, metrics=metrics)
    await engine.handle_fault(factories.fault(node="n1"), T0)
    await engine.idle()
    assert writer.methods()[-1] == "resubmit_job"
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert (incident.action, incident.phase) == ("resubmit", Phase.ACTING)  # not failed: its record is kept
    await engine.tick(clock.advance(1))
    await engine.idle()
    assert writer.made
    moved = engine.store.incident(NEW_UID)
    assert moved is not None
    assert (moved.id, moved.phase) == (incident.id, Phase.RESTARTING)
    [(_, data)] = [a for a in writer.annotated if a[0] == NEW_UID]  # persisted in the new job's record
    assert decode_incident(data[KEY_INCIDENT]).job_uid == NEW_UID
    assert writer.resubmissions == []  # the record deleted once the incident is on the new job
    assert ("resubmit-recover", "done") in metrics.actions
    await engine.tick(clock.advance(1))  # nothing left: no second create
    assert writer.methods().count("finish_resubmission") == 1


class RecordOnlyWriter(FakeWriter):
    """The record is written and the delete fails (HTTP 500): the old job stays, its record left."""

    async def resubmit_job(
        self, job: JobRef, *, incident: str, count: int, wait_s: float = 30.0, poll_s: float = 0.2
    ) -> ActionResult:
        self.calls.append(("resubmit_job", str(job)))
        if not any(p.from_uid == job.uid for p in self.resubmissions):
            self.resubmissions.append(PendingResubmission(job.kind, job.namespace, job.name, job.uid, incident,
                                                          count, {"metadata": {"name": job.name}}))  # fmt: skip
        return ActionResult("resubmit", str(job), Outcome.FAILED, "HTTP 500", True, 500, kept=configmap_name(job.uid))

    async def forget_resubmission(self, from_uid: str, *, incident: str) -> ActionResult:
        self.resubmissions = [p for p in self.resubmissions if p.from_uid != from_uid]
        return self._done("forget_resubmission", from_uid)


def _failed_job_state() -> ClusterState:
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node("n1")))
    state.apply(change("vcjobs", "ns/job", factories.job(phase="Failed")))
    for i in range(2):
        state.apply(change("pods", f"ns/job-{i}", factories.pod(f"job-{i}", node="n1", rank=i)))
    return state


RESUBMIT_ONCE = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"resubmit_limit": 1}})


async def test_a_record_whose_job_is_still_there_without_an_open_resubmission_is_deleted_as_stale() -> None:
    """A record left by a resubmission nobody finishes (here: a previous leader's, its job still there and no
    incident on it) is deleted at the term's first pass: left, a later deletion of the job by anyone would make a
    leader create the job again from it. Regression: before, such a record was kept for good."""
    state = _failed_job_state()
    writer, metrics = RecordOnlyWriter(), CountingMetrics()
    writer.resubmissions.append(PendingResubmission(JobKind.VOLCANO, "ns", "job", "uid-job", "job-old", 1, {}))
    clock = FixedClock(T0)
    engine = RecoveryEngine(RESUBMIT_ONCE, state, writer, clock=clock, metrics=metrics)
    await engine.tick(clock.advance(1))
    await engine.idle()
    assert writer.resubmissions == []
    assert ("resubmit-recover", "stale") in metrics.actions


async def test_a_record_is_kept_while_its_resubmission_is_open_and_deleted_once_that_incident_closes() -> None:
    state = _failed_job_state()
    writer, metrics = RecordOnlyWriter(), CountingMetrics()
    clock = FixedClock(T0 + timedelta(seconds=10))
    engine = RecoveryEngine(RESUBMIT_ONCE, state, writer, clock=clock, metrics=metrics)
    await engine.handle_fault(factories.fault(node="n1"), T0)
    await engine.idle()
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert (incident.action, incident.phase) == ("resubmit", Phase.ACTING)
    for _ in range(2):  # the record is the open incident's: it resumes the resubmission, which needs it
        await engine.tick(clock.advance(1))
        await engine.idle()
        assert [p.from_uid for p in writer.resubmissions] == ["uid-job"]
    assert ("resubmit-recover", "stale") not in metrics.actions

    job = state.job(JobKind.VOLCANO, "ns", "job")
    assert job is not None
    # the incident ends another way (a person, the deadline, the fault gone): its record is stale from then on
    engine.closing.finished(engine.store.fail("uid-job", clock.advance(1), "ended for the test"), job)
    await engine.tick(clock.advance(1))
    await engine.idle()
    assert writer.resubmissions == []
    assert ("resubmit-recover", "stale") in metrics.actions


class ApiserverDownWriter(CutShortWriter):
    """As CutShortWriter, but finishing the record fails retriably (HTTP 503) until `up` is set."""

    def __init__(self, state: ClusterState) -> None:
        super().__init__(state)
        self.up = False
        self.tries: list[str] = []

    async def finish_resubmission(self, pending: PendingResubmission) -> tuple[Leftover, ActionResult, dict[str, str]]:
        self.tries.append(pending.from_uid)
        if not self.up:
            refused = ActionResult("resubmit-recover", str(pending), Outcome.FAILED, "HTTP 503", True, 503)
            return Leftover.CREATE, refused, {}
        return await super().finish_resubmission(pending)


async def test_a_record_the_apiserver_keeps_refusing_is_tried_with_doubling_waits_until_it_takes_it() -> None:
    """Regression: a create failing with a 5xx was tried again on every tick (1 s), for good. Now the waits
    double from 1 s to 60 s; the record is never given up, and a new term tries at once."""
    state = _failed_job_state()
    writer = ApiserverDownWriter(state)
    clock = FixedClock(T0 + timedelta(seconds=10))
    engine = RecoveryEngine(RESUBMIT_ONCE, state, writer, clock=clock, metrics=CountingMetrics())
    await engine.handle_fault(factories.fault(node="n1"), T0)
    await engine.idle()
    start = clock.now()
    tried_at: list[float] = []
    for _ in range(200):
        before = len(writer.tries)
        await engine.tick(clock.advance(1))
        await engine.idle()
        if len(writer.tries) > before:
            tried_at.append((clock.now() - start).total_seconds())
    assert tried_at == [1, 2, 4, 8, 16, 32, 64, 124, 184]  # waits 1, 2, 4, ..., 32, then 60 at most
    assert not writer.made

    engine.resubmitting.new_term()  # a new term (this replica's or a successor's) tries at once
    await engine.tick(clock.advance(1))
    await engine.idle()
    assert len(writer.tries) == len(tried_at) + 1

    writer.up = True  # the apiserver takes it again: the next try, at most 60 s later, creates the job
    for _ in range(60):
        await engine.tick(clock.advance(1))
        await engine.idle()
        if writer.made:
            break
    assert writer.made
    assert writer.resubmissions == []
    moved = engine.store.incident(NEW_UID)
    assert moved is not None
    assert moved.phase is Phase.RESTARTING
    assert engine.resubmitting.retry == {}
