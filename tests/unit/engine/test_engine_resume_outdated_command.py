"""A new leader resumes the force follow-up of a restart its predecessor sent as a RestartJob Command in place of
pod deletions (a job of ``policy.volcano_restart: auto`` whose pods were all older than it: agent.engine.sending
``Sending._by_command``, issue 39): the stopped pods, older than the incident's generation, say it was a Command, so
the old pods still there are force-deleted (grace 0) as after any Command (agent.engine.follow_ups
``FollowUps.resume``). Without it a stuck-terminating pod on a dead node kept the force-mode job from recovering."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

import pytest
from support import factories
from support.factories import T0, change
from support.fakes import FakeWriter

from agent.actions import ActionResult, PodRef
from agent.core.clock import FixedClock
from agent.core.cluster import JobKind, JobRef
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    Incident,
    Phase,
    encode_incident,
    encode_ledger,
    make_incident_id,
)
from agent.core.policy import RetryLedger
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sources.state import ClusterState

RESTART_AT = T0 + timedelta(seconds=1)
OLD_PODS = ("job-0", "job-1")


class Deletions(FakeWriter):
    """The fake port over the test's cache: a pod remains while the cache has it (same UID); each deletion is
    recorded as (pod names, grace seconds)."""

    def __init__(self, state: ClusterState) -> None:
        super().__init__()
        self.state = state
        self.deletions: list[tuple[tuple[str, ...], int | None]] = []

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        here = {(p.namespace, p.name, p.uid) for p in self.state.pods.values()}
        return [p for p in pods if (p.namespace, p.name, p.uid) in here]

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        self.deletions.append((tuple(p.name for p in pods), grace_seconds))
        return await super().delete_pods(pods, incident=incident, grace_seconds=grace_seconds, target=target)


def _left(pod_version: str) -> ClusterState:
    """A force-mode job its predecessor restarted at generation "1" (now "2": Volcano counted the restart), its
    record ``restarting`` with a ledger naming the old pods, which carry job-version `pod_version` and are still
    terminating (Volcano honours their grace period: on a dead node that never ends)."""
    incident = Incident(
        id=make_incident_id("job", "uid-job", "1", 1), job_uid="uid-job", kind="vcjob", namespace="ns", name="job",
        generation="1", phase=Phase.DETECTED, first_fault_at=T0, steps=((Phase.DETECTED, T0),),
    ).join(factories.fault())  # fmt: skip
    incident = incident.move(Phase.ACTING, T0, action="restart-job", mode="force", reason="r")
    incident = incident.move(Phase.RESTARTING, RESTART_AT, restart_at=RESTART_AT)
    ledger = RetryLedger(restarts_used=1, incidents=1, agent_pod_uids=tuple(f"uid-{n}" for n in OLD_PODS))
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node("n1")))
    job = factories.job(
        labels={"fault-scheduling": "force"}, version="2", retry_count=1,
        annotations=((INCIDENT_ANNOTATION, encode_incident(incident)), (LEDGER_ANNOTATION, encode_ledger(ledger))),
    )  # fmt: skip
    state.apply(change("vcjobs", "ns/job", replace(job, restarts_on_eviction=True)))
    for i, name in enumerate(OLD_PODS):
        link = JobRef(JobKind.VOLCANO, "ns", "job", "uid-job", pod_version)
        pod = factories.pod(name, rank=i, job=link, deletion_timestamp=RESTART_AT, created_at=T0 - timedelta(minutes=1))
        state.apply(change("pods", f"ns/{name}", pod))
    return state


@pytest.mark.parametrize(
    ("pod_version", "want"),
    [
        ("0", [(OLD_PODS, 0)]),  # older than the generation: the restart was a Command, its force follow-up redone
        ("1", []),  # the generation's own pods: a restart by deletion (grace 0 already), nothing to follow up
    ],
)
async def test_a_new_leader_redoes_the_force_follow_up_of_a_command_sent_for_outdated_pods(
    pod_version: str, want: list[tuple[tuple[str, ...], int]]
) -> None:
    state = _left(pod_version)
    writer = Deletions(state)
    settings = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 50}})
    now = T0 + timedelta(seconds=10)
    engine = RecoveryEngine(settings, state, writer, clock=FixedClock(now), active_faults=lambda: [])
    await engine.tick(now)
    await engine.idle()
    assert writer.deletions == want
    assert writer.commands == 0  # the restart itself is not sent again
