"""What a new leader must redo of a restart a previous leader left unfinished: the restart's follow-ups (the old
pods force-deleted), the pod-level reset-config update once the pods are back, and a pod-level restart's own pods.

Each test starts from the job's annotations as the previous leader left them (or runs that leader until its lease
fence closes) and a new leader's engine on a fake writer port and a fixed clock. No API client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from support import factories
from support.factories import OLD_PODS, RESTART_AT, T0, change, left_incident, left_restart_state
from support.fakes import CacheWriter, FakeWriter, ListSink

from agent.actions import ActionResult
from agent.core.bookkeeping import FAULT_NPU_CM, KEY_REMAIN_RETRY_TIMES, KEY_RESCHEDULE_RECORDS, RESCHEDULE_REASON_CM
from agent.core.clock import FixedClock
from agent.core.cluster import JobKind, JobRef
from agent.core.fence import NotLeader
from agent.core.incidents import Phase
from agent.core.resetconfig import ResetConfigUpdate
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sources.state import ClusterState


class PodsWriter(CacheWriter):
    """The fake port over the test's state cache (:class:`CacheWriter`: pods there while the cache has them, each
    deletion recorded as (pod names, grace seconds)); the job's annotations are written into the cache (a successor
    reads them back); a reset-config write raises NotLeader once `fence_at_reset` is set (the lease ran out right
    then)."""

    def __init__(self, state: ClusterState) -> None:
        super().__init__(state)
        self.fence_at_reset = False

    async def write_record(self, job: JobRef, annotations: Mapping[str, str], *, incident: str) -> ActionResult:
        self._annotate(job, annotations)
        return await super().write_record(job, annotations, incident=incident)

    async def claim_record(
        self, job: JobRef, annotations: Mapping[str, str], *, resource_version: str, incident: str
    ) -> ActionResult:
        self._annotate(job, annotations)
        return await super().claim_record(job, annotations, resource_version=resource_version, incident=incident)

    def _annotate(self, job: JobRef, annotations: Mapping[str, str]) -> None:
        current = self.state.job(JobKind.VOLCANO, job.namespace, job.name)
        assert current is not None
        merged = {**dict(current.annotations), **annotations}
        self.state.apply(
            change("vcjobs", f"{job.namespace}/{job.name}", replace(current, annotations=tuple(merged.items())))
        )

    async def update_reset_config(self, update: ResetConfigUpdate, *, incident: str) -> ActionResult:
        if self.fence_at_reset:
            raise NotLeader("reset-config", update.name)
        return await super().update_reset_config(update, incident=incident)


def _settings(grace_over_time_s: float = 2) -> Settings:
    return Settings.model_validate(
        {
            "kafka": {"enabled": False},
            "policy": {"breaker_min_faulty_nodes": 50, "grace_over_time_s": grace_over_time_s},
        }
    )


def _new_leader(
    state: ClusterState, writer: FakeWriter, now: timedelta, grace_over_time_s: float = 2
) -> RecoveryEngine:
    return RecoveryEngine(
        _settings(grace_over_time_s), state, writer, clock=FixedClock(T0 + now), active_faults=lambda: [],
    )  # fmt: skip


async def test_a_new_leader_redoes_the_force_follow_up_of_a_command_restart() -> None:
    """Regression: the previous leader sent the RestartJob Command of a force-mode job and died before its force
    follow-up deleted the old pods (grace 0). Volcano deletes them honouring their grace period, which never ends on
    a dead node; the stuck-terminating fault only joins the open incident. The job never recovered."""
    incident = left_incident("restart-job", "force")
    state = left_restart_state(incident, labels={"fault-scheduling": "force"}, version="1")
    writer = PodsWriter(state)
    engine = _new_leader(state, writer, timedelta(seconds=10))
    await engine.tick(T0 + timedelta(seconds=10))
    await engine.idle()
    assert writer.deletions == [(OLD_PODS, 0)]
    assert writer.commands == 0  # the restart itself is not sent again


async def test_a_new_leader_finding_the_command_sent_but_not_recorded_redoes_its_force_follow_up() -> None:
    """The previous leader died between its RestartJob Command and recording the incident as restarting: the
    job's generation moved on, the stopped pods are not in the ledger yet (those older than the decision are)."""
    incident = left_incident("restart-job", "force", restart_at=None)
    state = left_restart_state(incident, labels={"fault-scheduling": "force"}, version="1", recorded=False)
    writer = PodsWriter(state)
    engine = _new_leader(state, writer, timedelta(seconds=10))
    await engine.tick(T0 + timedelta(seconds=10))
    await engine.idle()
    assert writer.deletions == [(OLD_PODS, 0)]
    assert writer.commands == 0
    assert set(engine.store.ledger("uid-job").agent_pod_uids) == {"uid-job-0", "uid-job-1"}
    # its reschedule record carries the restart's time (the acting step), so a later successor's repeat is found
    [record] = _records(writer)["ns/job-uid-job"]["RescheduleRecords"]
    assert record["RescheduleTimeStamp"] == int(T0.timestamp())


async def test_a_new_leader_redoes_the_grace_follow_up_once_grace_over_time_passed() -> None:
    """Regression: a grace-mode restart's follow-up (force-delete what is left after grace-over-time) lived only in
    the previous leader's task; a leader change in that window (900 s by default) left the pods terminating."""
    incident = left_incident("restart-job", "grace")
    state = left_restart_state(incident, labels={"fault-scheduling": "grace"}, version="1")
    writer = PodsWriter(state)
    engine = _new_leader(state, writer, timedelta(seconds=10))  # grace-over-time (2 s) is long past
    await engine.tick(T0 + timedelta(seconds=10))
    await engine.idle()
    assert sorted(writer.deletions) == [(("job-0",), 0), (("job-1",), 0)]


async def test_a_new_leader_waits_only_the_rest_of_grace_over_time() -> None:
    incident = left_incident("restart-job", "grace")
    state = left_restart_state(incident, labels={"fault-scheduling": "grace"}, version="1")
    writer = PodsWriter(state)
    engine = _new_leader(state, writer, timedelta(seconds=900.8), grace_over_time_s=900)  # 0.2 s left
    await engine.tick(T0 + timedelta(seconds=900.8))
    assert writer.deletions == []  # not before grace-over-time
    await engine.idle()
    assert sorted(writer.deletions) == [(("job-0",), 0), (("job-1",), 0)]


async def test_a_new_leader_has_no_follow_up_for_pods_already_gone_or_for_a_force_pod_deletion() -> None:
    # force mode by pod deletions: they went with grace 0, nothing to follow up
    incident = left_incident("restart-pods", "force", pods=("job-1",))
    state = left_restart_state(incident, labels={"fault-scheduling": "force"}, version="0", terminating=())
    writer = PodsWriter(state)
    engine = _new_leader(state, writer, timedelta(seconds=10))
    await engine.tick(T0 + timedelta(seconds=10))
    await engine.idle()
    assert writer.deletions == []


@pytest.mark.parametrize("version", ["0", "1"])
async def test_a_new_leader_resuming_a_pod_level_restart_restarts_only_its_pods(version: str) -> None:
    """Regression: an incident left ``acting`` with action restart-pods was resumed with a decision naming no pod,
    so the new leader sent a RestartJob Command for the whole job (and the reset-config update afterwards said a
    pod-level restart). Version "1": the restart went out (the pods stay as recorded, for the recovery check)."""
    labels = {"fault-scheduling": "force", "pod-rescheduling": "on"}
    incident = left_incident("restart-pods", "force", pods=("job-1",), restart_at=None)
    state = left_restart_state(incident, labels=labels, version=version, terminating=())
    writer = PodsWriter(state)
    engine = _new_leader(state, writer, timedelta(seconds=10))
    engine.ctx.active_faults = lambda: [factories.fault()]
    await engine.tick(T0 + timedelta(seconds=10))
    await engine.idle()
    assert writer.commands == 0
    if version == "0":
        assert writer.deletions == [(("job-1",), 0)]
    resumed = engine.store.incident("uid-job")
    assert resumed is not None
    assert (resumed.phase, resumed.pods) == (Phase.RESTARTING, ("job-1",))


def test_an_opened_pod_level_incident_names_its_pods_while_acting() -> None:
    """What lets a successor resume it: the pods are in the annotation the claim writes."""
    from agent.core.incidents import IncidentStore, decode_incident
    from agent.core.policy import Action, Decision

    store = IncidentStore()
    job = factories.job()
    decision = Decision(Action.RESTART_PODS, "r", pods=("job-1",))
    store.open(job, factories.fault(), decision, T0)
    assert decode_incident(store.encoded(job.uid)[0]).pods == ("job-1",)


async def test_the_pod_level_reset_config_update_survives_a_leader_change_at_the_write() -> None:
    """Regression: the incident was persisted as recovered before the pod-level reset-config update was written;
    a leader whose lease ran out in between left a closed incident, and its successor never wrote the update, so
    the surviving pods' processes (which restart on it) never did."""
    labels = {"fault-scheduling": "force", "pod-rescheduling": "on"}
    incident = left_incident("restart-pods", "force", pods=("job-1",))
    state = left_restart_state(incident, labels=labels, version="0", terminating=())
    later = T0 + timedelta(seconds=5)
    state.apply(change("pods", "ns/job-1", factories.pod("job-1", uid="uid-job-1-new", rank=1, created_at=later)))
    old = PodsWriter(state)
    old.fence_at_reset = True
    leader = _new_leader(state, old, timedelta(seconds=5))
    with pytest.raises(NotLeader):
        await leader.tick(later)
    await leader.idle()
    writer = PodsWriter(state)
    successor = _new_leader(state, writer, timedelta(seconds=6))
    await successor.tick(T0 + timedelta(seconds=6))
    await successor.idle()
    assert [(u.change, u.pod_level) for u in writer.reset_updates] == [("pod-reschedule", True)]
    closed = successor.store.incident("uid-job")
    assert closed is not None
    assert closed.phase is Phase.RECOVERED


def _records(writer: FakeWriter) -> dict[str, Any]:
    text = writer.configmaps.get(RESCHEDULE_REASON_CM, {}).get(KEY_RESCHEDULE_RECORDS, "")
    return json.loads(text) if text else {}


async def test_a_new_leader_writes_the_bookkeeping_of_an_adopted_restart_once() -> None:
    """Regression: the bookkeeping of a restart is queued once the incident is persisted ``restarting`` and written
    by a background round; a leader that died before that round landed left remain-retry-times and the reschedule
    record unwritten, and a successor adopting the ``restarting`` incident never wrote them. Written again by each
    new leader, the record is added once (the restart's time is already there)."""
    incident = left_incident("restart-job", "force")
    state = left_restart_state(incident, labels={"fault-scheduling": "force"}, version="1", terminating=())
    writer = PodsWriter(state)
    job_id = "ns/job-uid-job"
    for term in range(2):  # the second: another takeover, the bookkeeping landed the first time
        engine = _new_leader(state, writer, timedelta(seconds=10 + term))
        await engine.tick(T0 + timedelta(seconds=10 + term))
        await engine.idle()
        history = _records(writer)[job_id]
        assert history["TotalRescheduleTimes"] == 1, term
        assert [r["RescheduleTimeStamp"] for r in history["RescheduleRecords"]] == [int(RESTART_AT.timestamp())]
        assert job_id in writer.configmaps[FAULT_NPU_CM][KEY_REMAIN_RETRY_TIMES]


async def test_a_new_leader_publishes_again_the_start_of_an_escalated_restart_too() -> None:
    """Regression: a new leader published again only attempt 1's recovery.started (its id: the incident and the
    attempt), so when the previous leader died with attempt 2's (the escalation to the whole job) in its outbox,
    consumers never saw the whole-job restart start. Attempt 1 was the pod-level restart escalation started from."""
    incident = left_incident("restart-pods", "force", pods=("job-1",))
    escalated_at = RESTART_AT + timedelta(seconds=60)
    incident = incident.move(Phase.ACTING, escalated_at, action="restart-job", reason="pending", escalated=True)
    incident = incident.move(Phase.RESTARTING, escalated_at, restart_at=escalated_at)
    state = left_restart_state(incident, labels={"fault-scheduling": "force", "pod-rescheduling": "on"}, version="1")
    sink = ListSink()
    engine = RecoveryEngine(
        _settings(), state, PodsWriter(state), events=sink, clock=FixedClock(escalated_at + timedelta(seconds=5)),
        active_faults=lambda: [],
    )  # fmt: skip
    await engine.tick(escalated_at + timedelta(seconds=5))
    await engine.idle()
    started = [ev.as_json(e) for e in sink.events if ev.as_json(e)["type"] == ev.RECOVERY_STARTED]
    assert [(e["data"]["attempt"], e["data"]["action"]) for e in started] == [(1, "restart-pods"), (2, "restart-job")]
    assert started[1]["time"] == escalated_at.isoformat().replace("+00:00", "Z")


async def test_an_escalated_restart_found_sent_counts_from_the_escalation() -> None:
    """Regression: an escalated incident left ``acting`` whose whole-job Command went out was marked restarting at
    its first acting step (the pod-level restart's), so its reschedule record had that restart's second (and a
    repeat of it was taken for the pod-level one's) and the pods the pod-level restart had replaced were not
    counted as stopped."""
    incident = left_incident("restart-pods", "force", pods=("job-1",))
    escalated_at = RESTART_AT + timedelta(seconds=60)
    incident = incident.move(Phase.ACTING, escalated_at, action="restart-job", reason="pending", escalated=True)
    labels = {"fault-scheduling": "force", "pod-rescheduling": "on"}
    state = left_restart_state(incident, labels=labels, version="1", terminating=(), recorded=False)
    replaced = factories.pod("job-1", uid="uid-job-1-new", rank=1, created_at=RESTART_AT + timedelta(seconds=5))
    state.apply(change("pods", "ns/job-1", replaced))  # the pod-level restart's replacement, placed
    writer = PodsWriter(state)
    engine = _new_leader(state, writer, timedelta(seconds=70))
    await engine.tick(T0 + timedelta(seconds=70))
    await engine.idle()
    resumed = engine.store.incident("uid-job")
    assert resumed is not None
    assert (resumed.phase, resumed.restart_at) == (Phase.RESTARTING, escalated_at)
    assert set(engine.store.ledger("uid-job").agent_pod_uids) == {"uid-job-0", "uid-job-1-new"}
    [record] = _records(writer)["ns/job-uid-job"]["RescheduleRecords"]
    assert record["RescheduleTimeStamp"] == int(escalated_at.timestamp())
