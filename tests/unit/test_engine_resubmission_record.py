"""The engine finishes its own resubmission cut short after the delete: the job is gone, its record left; the
incident stays acting (not abandoned), and the next tick creates the job from the record and moves the incident
to the new UID. No API client, a fixed clock."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from app_support import FakeWriter
from support import factories
from support.factories import T0, change

from agent.actions import ActionResult, Outcome
from agent.core.clock import FixedClock
from agent.core.cluster import JobRef
from agent.core.incidents import INCIDENT_ANNOTATION, RESUBMITTED_FROM_ANNOTATION, Phase, decode_incident
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
        self.annotated: list[tuple[str, dict[str, str]]] = []  # (job UID, annotations)

    async def annotate_job(self, job: JobRef, annotations: Mapping[str, str], *, incident: str) -> ActionResult:
        self.annotated.append((job.uid, dict(annotations)))
        return self._done("annotate_job", str(job))

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
    [(_, annotations)] = [a for a in writer.annotated if a[0] == NEW_UID]  # persisted on the new job
    assert decode_incident(annotations[INCIDENT_ANNOTATION]).job_uid == NEW_UID
    assert writer.resubmissions == []  # the record deleted once the incident is on the new job
    assert ("resubmit-recover", "done") in metrics.actions
    await engine.tick(clock.advance(1))  # nothing left: no second create
    assert writer.methods().count("finish_resubmission") == 1
