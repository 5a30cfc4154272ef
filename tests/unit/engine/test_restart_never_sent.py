"""An incident whose restart was never sent still ends (agent.engine.unsent; found by the soak, seed 1710049074).

The leader decides a whole-job restart on the one-round-trip path: its ``recovery.started`` is durable before
anything is sent, then the job's claim and the RestartJob Command go out together, the claim first
(agent.engine.sending ``Sending._restart_with_claim``). The lease runs out in between (the soak SIGSTOPped the
leader): the fence refuses the claim, so the job's record never holds the incident and no successor resumes it.
Unless a leader takes the same incident id up (a successor deciding the same still-active fault on the same record
derives it), this replica, now a standby, ends it itself: one ``recovery.failed`` reason ``leadership-lost`` and one
``fault_agent_recovery_seconds`` sample, as the soak's lifecycle invariant wants (testbed/soak/checks.py
``check_lifecycle``).

The writer (tests/support/fakes.py PortWriter) plays the apiserver with the job's record; a NotLeader it raises is
the lease fence refusing that write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support import factories
from support.factories import SETTINGS, change
from support.factories import T0 as NOW
from support.fakes import Apiserver, Leadership, ListSink, PortWriter, record_change

from agent.core.clock import FixedClock
from agent.core.fence import NotLeader
from agent.core.incidents import Phase, decode_incident
from agent.core.records import KEY_INCIDENT
from agent.engine.recovery import RecoveryEngine
from agent.sinks import events as ev
from agent.sinks.metrics import AgentMetrics
from agent.sources.state import ChangeType, ClusterState

DEADLINE = timedelta(seconds=SETTINGS.policy.recovery_deadline_s)


def _state(*, version: str = "0", phase: str = "Running") -> ClusterState:
    """The cache: node n1, the Volcano job ns/job (force mode) and its two Running pods on Ascend910-0 and -1."""
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node(at=NOW)))
    job = factories.job(version=version, phase=phase, created_at=NOW - timedelta(minutes=10))
    state.apply(change("vcjobs", "ns/job", job))
    for i in range(2):
        pod = factories.pod(
            f"job-{i}", uid=f"uid-pod-{i}", chips=(f"Ascend910-{i}",), rank=i, created_at=NOW - timedelta(minutes=5)
        )
        state.apply(change("pods", f"ns/job-{i}", pod))
    return state


class Replica:
    """One agent replica: its engine over its own cache, its own event sink and metrics registry, one Apiserver."""

    def __init__(
        self,
        api: Apiserver,
        *,
        fail: dict[str, Any] | None = None,
        actor: str = "agent-a#1",
        active: Callable[[], list[Any]] | None = None,
        version: str = "0",
    ) -> None:
        self.api = api
        self.state = _state(version=version)
        self.writer = PortWriter(api, fail=fail)
        self.sink = ListSink()
        self.registry = CollectorRegistry()
        self.leadership = Leadership(True)
        self.actor = [actor]
        self.clock = FixedClock(NOW)
        self.engine = RecoveryEngine(
            SETTINGS, self.state, self.writer, events=self.sink, metrics=AgentMetrics(self.registry),
            is_leader=self.leadership, actor=lambda: self.actor[0], clock=self.clock, active_faults=active,
        )  # fmt: skip

    async def fault(self) -> None:
        await self.engine.handle_fault(factories.fault(at=NOW), NOW)
        await self.engine.idle()

    async def tick(self, at: Any) -> None:
        self.clock.set(at)
        await self.engine.tick(at)
        await self.engine.idle()

    def see_record(self) -> None:
        """The watch of the job records delivers the Apiserver's record of the job."""
        self.state.apply(record_change(factories.job(), self.api.record, resource_version=str(self.api.record_rv)))

    def see_job(self, **fields: Any) -> None:
        self.state.apply(change("vcjobs", "ns/job", factories.job(created_at=NOW - timedelta(minutes=10), **fields)))

    def started(self) -> list[str]:
        return [d["data"]["incident_id"] for d in self.sink.of(ev.RECOVERY_STARTED)]

    def failed(self) -> list[tuple[str, str]]:
        return [(d["data"]["incident_id"], d["data"]["reason"]) for d in self.sink.of(ev.RECOVERY_FAILED)]

    def samples(self) -> float:
        """Every ``fault_agent_recovery_seconds`` sample of this replica, whatever its labels."""
        total = 0.0
        for metric in self.registry.collect():
            for s in metric.samples:
                if s.name == "fault_agent_recovery_seconds_count":
                    total += s.value
        return total

    def failures(self, reason: str) -> float | None:
        labels = {"job_kind": "vcjob", "reason": reason}
        return self.registry.get_sample_value("fault_agent_recovery_failures_total", labels)


def _fenced() -> dict[str, Any]:
    """The lease fence refusing the claim (first) and the Command: nothing of the restart is sent."""
    return {"claim": NotLeader("claim-record", "job"), "command": NotLeader("restart-command", "job")}


def _gone(replica: Replica) -> None:
    replica.state.apply(change("vcjobs", "ns/job", None, factories.job(), type=ChangeType.DELETED))


@pytest.mark.parametrize(
    ("end", "when", "why"),
    [
        pytest.param(lambda r: r.see_job(phase="Failed", retry_count=3), NOW + timedelta(seconds=40), "Failed",
                     id="job-failed"),
        pytest.param(lambda r: r.see_job(phase="Completed"), NOW + timedelta(seconds=40), "Completed",
                     id="job-completed"),
        pytest.param(_gone, NOW + timedelta(seconds=40), "gone", id="job-deleted"),
        pytest.param(lambda r: None, NOW + DEADLINE + timedelta(seconds=1), "recovery_deadline_s", id="deadline"),
    ],
)  # fmt: skip
async def test_a_restart_the_fence_refused_whole_ends_once_as_leadership_lost(
    end: Callable[[Replica], None], when: Any, why: str
) -> None:
    """Regression (the soak, seed 1710049074): claim and Command refused by the lease fence, no leader takes the
    incident up; once the job ends (or the deadline passes) this replica, a standby now, publishes its end.
    Before, no terminal event ever followed its recovery.started."""
    replica = Replica(Apiserver(), fail=_fenced())
    await replica.fault()
    [incident] = replica.started()
    assert replica.api.commands == []  # nothing sent
    assert replica.api.record_rv == 0  # no record
    replica.leadership.leads = False  # the elector stepped down

    await replica.tick(NOW + timedelta(seconds=30))  # the job runs on, a leader may still take it up
    assert replica.failed() == []
    end(replica)
    await replica.tick(when)
    await replica.tick(when + timedelta(seconds=1))  # ended once
    assert replica.failed() == [(incident, "leadership-lost")]
    [failed] = replica.sink.of(ev.RECOVERY_FAILED)
    assert why in failed["data"]["detail"]
    assert failed["data"]["action"] == "restart-job"
    assert ev.event_errors(failed) == []  # the schema knows the reason
    assert replica.samples() == 1
    assert replica.failures("leadership-lost") == 1


async def test_a_leader_taking_up_the_same_incident_id_ends_it_and_this_replica_publishes_nothing() -> None:
    """A successor decides the same still-active fault on the same record: the same incident id (and the same
    recovery.started id); its record shows it, so this replica drops its unsent incident, even past the deadline
    and after the job failed (the successor's end is the only one)."""
    api = Apiserver()
    first = Replica(api, fail=_fenced())
    await first.fault()
    first.leadership.leads = False
    successor = Replica(api, actor="agent-b#1")
    await successor.fault()
    assert successor.started() == first.started()
    assert [d["id"] for d in successor.sink.of(ev.RECOVERY_STARTED)] == [
        d["id"] for d in first.sink.of(ev.RECOVERY_STARTED)
    ]
    assert len(api.commands) == 1
    first.see_record()
    first.see_job(phase="Failed", retry_count=3)
    await first.tick(NOW + DEADLINE + timedelta(seconds=1))
    assert first.failed() == []
    assert first.samples() == 0
    assert len(first.engine.unsent) == 0


async def test_this_replicas_next_term_taking_up_the_same_incident_id_publishes_no_second_end() -> None:
    """The same replica takes the Lease back (a new term, a fresh store) and re-evaluates the still-active fault:
    the same incident id, in its own store before its claim shows in the watch; the unsent one is dropped."""
    api = Apiserver()
    replica = Replica(api, fail=_fenced(), active=lambda: [factories.fault(at=NOW)])
    await replica.tick(NOW)  # the first term begins
    await replica.fault()
    [incident] = replica.started()
    replica.leadership.leads = False
    await replica.tick(NOW + timedelta(seconds=10))
    replica.writer.fail = {}
    replica.actor[0] = "agent-a#2"
    replica.leadership.leads = True
    await replica.tick(NOW + DEADLINE + timedelta(seconds=1))  # re-evaluates, then settles past the deadline
    assert replica.started() == [incident, incident]  # the same event id twice: one incident
    assert replica.failed() == []
    assert len(api.commands) == 1
    assert len(replica.engine.unsent) == 0


async def test_this_replica_leading_again_after_the_fault_cleared_ends_its_unsent_incident_at_the_deadline() -> None:
    """A new term of this replica finds the fault cleared (nothing to re-evaluate): nobody takes the incident up,
    so the leader ends it itself once the deadline passed, not before."""
    api = Apiserver()
    active: list[Any] = [factories.fault(at=NOW)]
    replica = Replica(api, fail=_fenced(), active=lambda: list(active))
    await replica.tick(NOW)
    await replica.fault()
    [incident] = replica.started()
    replica.leadership.leads = False
    await replica.tick(NOW + timedelta(seconds=10))
    active.clear()  # the fault cleared while this replica stood by
    replica.writer.fail = {}
    replica.actor[0] = "agent-a#2"
    replica.leadership.leads = True
    await replica.tick(NOW + timedelta(seconds=20))
    assert replica.failed() == []
    await replica.tick(NOW + DEADLINE + timedelta(seconds=1))
    assert replica.failed() == [(incident, "leadership-lost")]
    assert replica.samples() == 1
    assert api.commands == []


async def test_a_later_incident_in_the_jobs_record_ends_the_unsent_one() -> None:
    """The successor's next incident of the job got another id (here: the job's generation moved on, so its
    first incident's id differs): no leader can take the unsent one up any more, so it ends at once."""
    api = Apiserver()
    first = Replica(api, fail=_fenced())
    await first.fault()
    [incident] = first.started()
    first.leadership.leads = False
    successor = Replica(api, actor="agent-b#1", version="1")
    await successor.fault()
    [other] = successor.started()
    assert other != incident
    first.see_record()
    await first.tick(NOW + timedelta(seconds=30))
    assert first.failed() == [(incident, "leadership-lost")]
    assert first.samples() == 1


async def test_the_claim_landed_and_the_command_fenced_is_left_to_the_leader_as_before() -> None:
    """The claim passed the fence and the Command did not: the job's record holds the incident ``acting``, a
    successor resumes it; this replica publishes no end of its own, whatever happens to the job."""
    refused = NotLeader("restart-command", "job")
    replica = Replica(Apiserver(), fail={"command": refused, "rings": refused})
    await replica.fault()
    assert decode_incident(replica.api.record[KEY_INCIDENT]).phase is Phase.ACTING
    replica.leadership.leads = False
    replica.see_record()
    await replica.tick(NOW + timedelta(seconds=30))
    replica.see_job(phase="Failed", retry_count=3)
    await replica.tick(NOW + DEADLINE + timedelta(seconds=1))
    assert replica.failed() == []
    assert replica.samples() == 0
    assert len(replica.engine.unsent) == 0


async def test_a_claim_fenced_after_a_conflict_is_not_taken_for_nothing_sent() -> None:
    """The claim's first try was sent (and answered 409: the record changed), its second try was fenced: the
    Command went out beside the first try, so the incident is not kept as unsent (the old NotLeader path)."""
    api = Apiserver()
    api.record_rv = 3  # a record this replica's cache does not show: the claim (a create) meets 409
    replica = Replica(api)
    claims = 0
    claim = replica.writer.claim_record

    async def fenced_on_retry(*args: Any, **kwargs: Any) -> Any:
        nonlocal claims
        claims += 1
        if claims > 1:
            raise NotLeader("claim-record", "job")
        return await claim(*args, **kwargs)

    replica.writer.claim_record = fenced_on_retry  # type: ignore[method-assign]
    await replica.fault()
    assert claims == 2
    assert len(api.commands) == 1
    assert len(replica.engine.unsent) == 0


async def test_an_act_task_cancelled_before_its_claim_is_kept_and_ended() -> None:
    """Leadership lost between the decision and the claim: the act task is cancelled (agent.runtime.app cancels
    the leader-only steps) before its first step; nothing was sent, so the incident ends as leadership-lost."""
    replica = Replica(Apiserver())
    await replica.engine.handle_fault(factories.fault(at=NOW), NOW)
    assert replica.engine.tasks.cancel_leader_only() == 1
    replica.leadership.leads = False
    await replica.engine.idle()
    [incident] = replica.started()
    assert replica.api.log == []  # no write was handed to the writer
    assert not replica.engine.inflight.acting_on("uid-job")  # its coroutine never ran: idle again all the same
    assert replica.engine.acting.sending_now.count == 0
    replica.see_job(phase="Failed", retry_count=3)
    await replica.tick(NOW + timedelta(seconds=40))
    assert replica.failed() == [(incident, "leadership-lost")]
    assert replica.samples() == 1


async def test_a_claim_refused_then_the_act_task_cancelled_while_the_restart_waits_is_kept_and_ended() -> None:
    """The soak's sequence (seed 1710049074 on the testbed, 2026-12-05): the fence refuses the claim, and the
    leadership change cancels the act task while it still waits for the restart's write; the claim's refusal alone
    keeps the incident (before, the cancellation went through the act task without a word)."""
    replica = Replica(Apiserver(), fail={"claim": NotLeader("claim-record", "job")})
    held = asyncio.Event()

    async def restart_command(*_: Any, **__: Any) -> Any:
        await held.wait()  # the request hangs until the task is cancelled
        raise AssertionError("not answered")

    replica.writer.restart_command = restart_command  # type: ignore[method-assign]
    await replica.engine.handle_fault(factories.fault(at=NOW), NOW)
    for _ in range(100):
        await asyncio.sleep(0)
        if "claim end" in replica.api.log:
            break
    assert "claim end" in replica.api.log  # refused
    replica.leadership.leads = False
    assert replica.engine.tasks.cancel_leader_only() == 1
    await replica.engine.idle()
    [incident] = replica.started()
    replica.see_job(phase="Failed", retry_count=3)
    await replica.tick(NOW + timedelta(seconds=40))
    assert replica.failed() == [(incident, "leadership-lost")]
    assert replica.samples() == 1
