"""The restart reaches the apiserver in one round trip after the decision (issue 19): the job's claim, the
rings-config reset and the RestartJob Command go out at once; no order in which they land, no failure of one of
them and no crash between them restarts the job twice for one fault or loses its incident.

The writer (tests/support/fakes.py PortWriter) is a fake of the engine's writer port that plays the apiserver:
it holds the job's resourceVersion and its record (the agent's ConfigMap, agent.core.records) with the record's
resourceVersion, answers a claim at a stale record version (or a create of a record that exists) with 409,
answers a second Command of the same name with 409, and can fail (or hold) any one write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import pytest
from support import factories
from support.factories import SETTINGS, change
from support.factories import T0 as NOW
from support.fakes import Apiserver, ConsumingWriter, PortWriter, record_change

from agent.actions import ActionResult, Outcome, PodRef
from agent.actions.writer import command_name
from agent.core.clock import FixedClock
from agent.core.cluster import JobRef
from agent.core.fence import NotLeader
from agent.core.incidents import Phase, decode_incident
from agent.core.records import KEY_ACTOR, KEY_INCIDENT, KEY_LEDGER
from agent.engine.recovery import RecoveryEngine
from agent.runtime.clock import SystemClock
from agent.sources.state import ClusterState

FAULT_AT = NOW
LATER = NOW + timedelta(seconds=30)


def _state(
    *,
    resource_version: str = "1",
    version: str = "0",
    retry_count: int = 0,
    annotations: Mapping[str, str] | None = None,
    pods_created: Any = NOW - timedelta(minutes=5),
    api: Apiserver | None = None,
) -> ClusterState:
    """The cache: the job, its two pods, and (from `api`) its record as the watch delivered it."""
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node(at=NOW)))
    job = factories.job(
        resource_version=resource_version,
        version=version,
        retry_count=retry_count,
        annotations=dict(annotations or {}),
        created_at=NOW - timedelta(minutes=10),
    )
    state.apply(change("vcjobs", "ns/job", job))
    if api is not None and api.record_rv:
        state.apply(record_change(job, api.record, resource_version=str(api.record_rv)))
    for i in range(2):
        pod = factories.pod(f"job-{i}", uid=f"uid-pod-{i}", chips=(f"Ascend910-{i}",), rank=i, created_at=pods_created)
        state.apply(change("pods", f"ns/job-{i}", pod))
    return state


async def _act(engine: RecoveryEngine) -> None:
    await engine.handle_fault(factories.fault(at=FAULT_AT), NOW)
    await engine.idle()


async def test_the_claim_and_the_command_go_out_together_claim_first_the_rings_reset_after_the_command() -> None:
    """One round trip: every write of the restart has started before any of them answered; the claim was handed
    over first (its lease-fence check comes first); nothing is read from the apiserver before the Command but the
    job itself, in the same round trip (it proves the cached version for the force follow-up). The rings-config
    reset waits for the Command's answer (issue 36, item 8: tests/unit/actions/test_rings_reset_after_restart.py)."""
    api = Apiserver()
    writer = PortWriter(api)
    writer.gate = asyncio.Event()
    engine = RecoveryEngine(SETTINGS, _state(), writer, clock=SystemClock())
    await engine.handle_fault(factories.fault(at=FAULT_AT), NOW)
    for _ in range(50):
        await asyncio.sleep(0)
        if len(api.log) >= 3:
            break
    assert api.log == ["claim start", "command start"]
    assert writer.reads == ["job_meta"]  # the pods and the job's version came from the watch cache
    writer.gate.set()
    await engine.idle()
    assert api.log.index("rings start") > api.log.index("command end")
    assert len(api.commands) == 1
    incident = decode_incident(api.record[KEY_INCIDENT])
    assert incident.phase is Phase.RESTARTING  # recorded in the job's record after the restart went out
    assert api.annotations == {}  # nothing written on the job


@pytest.mark.parametrize(
    ("failing", "phase", "commands"),
    [
        pytest.param("claim", Phase.RESTARTING, 1, id="claim-fails-command-lands"),
        pytest.param("rings", Phase.RESTARTING, 1, id="rings-fails"),
        pytest.param("command", Phase.FAILED, 0, id="command-fails-claim-lands"),
    ],
)
async def test_one_failing_write_neither_restarts_twice_nor_loses_the_incident(
    failing: str, phase: Phase, commands: int
) -> None:
    api = Apiserver()
    writer = PortWriter(api, fail={failing: True})
    engine = RecoveryEngine(SETTINGS, _state(), writer, clock=SystemClock())
    await _act(engine)
    writer.fail = {}
    for i in range(3):  # the ticks that would resume an incident left acting
        await engine.tick(NOW + timedelta(seconds=1 + i))
        await engine.idle()
    assert len(api.commands) == commands
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is phase
    assert decode_incident(api.record[KEY_INCIDENT]).phase is phase  # on the job, not only in memory


async def test_claim_and_command_both_failing_leave_the_incident_acting_and_the_tick_restarts_once() -> None:
    api = Apiserver()
    writer = PortWriter(api, fail={"claim": True, "command": True})
    engine = RecoveryEngine(SETTINGS, _state(), writer, clock=SystemClock())
    await _act(engine)
    assert api.commands == []
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.ACTING
    writer.fail = {}
    for i in range(3):
        await engine.tick(NOW + timedelta(seconds=1 + i))
        await engine.idle()
    assert len(api.commands) == 1
    assert api.commands == [command_name("job", incident.id)]  # the same incident's Command, resumed


async def test_the_fence_closing_after_the_claim_stops_the_rest() -> None:
    """The claim passed the lease fence, the Command did not (the lease ran out between the two checks)."""
    api = Apiserver()
    writer = PortWriter(api, fail={"command": NotLeader("restart-command", "job"), "rings": NotLeader("r", "x")})
    engine = RecoveryEngine(SETTINGS, _state(), writer, clock=SystemClock())
    await _act(engine)
    assert api.commands == []
    assert decode_incident(api.record[KEY_INCIDENT]).phase is Phase.ACTING  # a successor resumes it


def _after_lost_claim(api: Apiserver, *, pods_created: Any) -> ClusterState:
    """The job as a successor sees it after a leader's Command landed and its claim did not: Volcano restarted
    it (status.version 1, retryCount 1), its record says nothing of that restart."""
    return _state(resource_version="5", version="1", retry_count=1, pods_created=pods_created, api=api)


async def test_a_leader_dying_after_its_command_landed_and_its_claim_did_not_is_not_restarted_again() -> None:
    """Crash between the writes: the first leader's Command lands, its claim is lost and it dies. The successor
    re-evaluates the still-active fault on the restarted job's new pods: the restart no record holds
    (Volcano's retryCount above the ledger's) came after the fault, so no second Command.
    Regression: before, the successor found no incident covering the fault and restarted the job again."""
    api = Apiserver()
    first = RecoveryEngine(
        SETTINGS, _state(), PortWriter(api, fail={"claim": True, "annotate": True}), clock=SystemClock()
    )
    await _act(first)
    assert len(api.commands) == 1
    assert api.record_rv == 0  # the first leader wrote no record

    state = _after_lost_claim(api, pods_created=NOW + timedelta(seconds=2))
    successor = RecoveryEngine(
        SETTINGS, state, PortWriter(api), active_faults=lambda: [factories.fault(at=FAULT_AT)], clock=SystemClock()
    )
    await successor.tick(LATER)
    await successor.idle()
    assert len(api.commands) == 1


async def test_a_fault_on_pods_older_than_it_is_still_acted_on_after_an_unrecorded_restart() -> None:
    """The rule above only covers faults that predate the pods they hit: a fault on pods that were there before
    it is acted on by the successor."""
    api = Apiserver()
    state = _after_lost_claim(api, pods_created=NOW - timedelta(seconds=60))
    successor = RecoveryEngine(
        SETTINGS, state, PortWriter(api), active_faults=lambda: [factories.fault(at=FAULT_AT)], clock=SystemClock()
    )
    await successor.tick(LATER)
    await successor.idle()
    assert len(api.commands) == 1


async def test_two_replicas_deciding_on_the_same_job_state_send_one_command() -> None:
    """Stale cache: an old leader's claim landed after this replica's cache was filled. This replica's claim (a
    create: its cache shows no record) fails (409) and the re-read shows the other actor; both Commands carry the
    name of the incident both derived from the same job state, so the apiserver holds one."""
    api = Apiserver()
    old = RecoveryEngine(SETTINGS, _state(), PortWriter(api), actor=lambda: "old#1", clock=SystemClock())
    new = RecoveryEngine(SETTINGS, _state(), PortWriter(api), actor=lambda: "new#2", clock=SystemClock())
    await _act(old)
    assert api.record[KEY_ACTOR] == "old#1"
    await _act(new)  # its cache still shows resourceVersion 1, no actor
    assert len(api.commands) == 1


async def test_a_stale_cached_version_is_not_used_by_the_force_follow_up() -> None:
    """The cache says status.version 0 but Volcano moved the job on (version 1, resourceVersion 2): the GET of
    the job sent with the restart finds another resourceVersion, so the cached version is unproven (the claim, on
    the agent's own record, proves nothing about the job) and the follow-up reads it again before
    it waits for Volcano to take the Command (with 0 it would force-delete the pods at once, before Volcano took
    it, and Volcano would restart the job a second time for those evictions)."""
    api = Apiserver(resource_version="2", version="1")
    api.volcano_takes = False
    writer = PortWriter(api)
    deleted: list[str] = []

    async def job_version(job: JobRef) -> str | None:
        writer.reads.append("job_version")
        return api.version

    async def delete_pods(pods: Sequence[PodRef], **_: Any) -> ActionResult:
        deleted.append(api.version)
        return ActionResult("delete-pods", "x", Outcome.DONE)

    writer.job_version = job_version  # type: ignore[method-assign]
    writer.delete_pods = delete_pods  # type: ignore[method-assign]
    engine = RecoveryEngine(SETTINGS, _state(resource_version="1", version="0"), writer, clock=SystemClock())
    await engine.handle_fault(factories.fault(at=FAULT_AT), NOW)
    for _ in range(100):
        await asyncio.sleep(0)
    assert "job_version" in writer.reads  # read again: the GET did not prove the cached "0"
    assert deleted == []  # still waiting: the job's version is the one read, Volcano has not taken the Command
    api.version = "2"  # Volcano took it
    await engine.idle()
    assert deleted == ["2"]
    assert KEY_LEDGER in api.record
    assert api.annotations == {}


async def test_a_successor_process_taking_the_fault_from_its_first_list_does_not_restart_again() -> None:
    """The successor is a new process, leader from its start: the still-active fault comes from its first list as
    a fault like any other (not re-evaluated); its admission takes it as stale all the same (found on the
    testbed: the successor restarted the job a second time)."""
    api = Apiserver()
    first = RecoveryEngine(
        SETTINGS, _state(), PortWriter(api, fail={"claim": True, "annotate": True}), clock=SystemClock()
    )
    await _act(first)
    state = _after_lost_claim(api, pods_created=NOW + timedelta(seconds=2))
    successor = RecoveryEngine(SETTINGS, state, PortWriter(api), clock=SystemClock())
    await successor.handle_fault(factories.fault(at=FAULT_AT), LATER)
    await successor.idle()
    assert len(api.commands) == 1


async def test_a_restart_answered_late_recovers_on_the_pods_volcano_created_before_the_answer() -> None:
    """The restart's time (the recovery check's floor: pods created since it) is when its writes went out, not
    when their answers came back. Volcano may take the Command, stop the old pods and create new ones before a
    loaded apiserver answers; timed from the answer, those new pods looked older than the restart and the job
    never counted as recovered (found in CI: tests/integration/test_deploy_admission_policy.py, the job Running
    again on new pods and the agent waiting on it until the test gave up).
    Regression: before, the incident stayed ``restarting``."""
    api = Apiserver()
    sent = NOW.replace(microsecond=900_000)  # the writes go out 0.1 s before a whole second
    clock = FixedClock(sent)
    writer = PortWriter(api)
    command = writer.restart_command

    async def answered_late(job: JobRef, **kwargs: Any) -> ActionResult:
        result = await command(job, **kwargs)
        clock.advance(1.5)  # Volcano restarts the job meanwhile; the answer comes at 12:00:02.4
        return result

    writer.restart_command = answered_late  # type: ignore[method-assign]
    state = _state()
    engine = RecoveryEngine(SETTINGS, state, writer, clock=clock)
    await engine.handle_fault(factories.fault(at=FAULT_AT), sent)
    await engine.idle()
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.RESTARTING
    assert incident.restart_at == sent

    created = NOW + timedelta(seconds=1)  # creationTimestamp (whole seconds) of the pods made at 12:00:01.2
    state.apply(change("vcjobs", "ns/job", factories.job(resource_version="9", version="1", retry_count=1)))
    for i in range(2):
        pod = factories.pod(f"job-{i}", uid=f"uid-new-{i}", chips=(f"Ascend910-{i}",), rank=i, created_at=created)
        state.apply(change("pods", f"ns/job-{i}", pod))
    await engine.tick(clock.advance(1.0))
    await engine.idle()
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.RECOVERED


async def test_a_new_term_of_the_same_replica_does_not_send_a_command_volcano_already_consumed_again() -> None:
    """The lease runs out between the Command and the record update (the rings reset after the Command is fenced:
    NotLeader), so the record keeps the incident ``acting``. Volcano runs the Command and deletes it; before it
    writes the job's new status.version, this replica leads again (a new term: the same process may take its
    own Lease back at once) and resumes the incident: its cache and its GET of the job still show the old
    version. The replica sent that Command itself, so it records the restart instead of creating the Command of
    the same name again, which Volcano would run a second time (the name is free once Volcano deleted it).
    Regression: before, the new term created the Command again: two restarts for one fault (seen on the testbed
    under load: 11-13 Commands for 10 faults in
    tests/integration/test_recovery_bookkeeping.py::test_a_burst_of_restarts_writes_every_jobs_bookkeeping_in_a_few_coalesced_writes)."""
    api = Apiserver()
    writer = ConsumingWriter(api, versions=["0", "1"], fail={"rings": NotLeader("reset-rings", "rings-config-job")})
    actor = ["agent-a#1"]
    state = _state()
    engine = RecoveryEngine(SETTINGS, state, writer, actor=lambda: actor[0], clock=SystemClock())
    await engine.tick(NOW)  # the first term begins
    await _act(engine)
    assert len(writer.created) == 1
    assert decode_incident(api.record[KEY_INCIDENT]).phase is Phase.ACTING  # the record update was fenced

    state.apply(record_change(factories.job(), api.record, resource_version=str(api.record_rv)))
    writer.fail = {}
    actor[0] = "agent-a#2"  # the Lease taken back: a new term, which adopts the incident from the record
    for i in range(3):
        await engine.tick(NOW + timedelta(seconds=1 + i))
        await engine.idle()
    assert len(writer.created) == 1, writer.created
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.RESTARTING
    assert decode_incident(api.record[KEY_INCIDENT]).phase is Phase.RESTARTING


async def test_a_command_the_fence_refused_is_sent_by_the_next_term_of_the_same_replica() -> None:
    """The other side of the rule above: a Command the lease fence refused was never sent, so the next term sends
    it (once); only a Command that may have reached the apiserver is not sent again."""
    api = Apiserver()
    refused = NotLeader("restart-command", "job")
    writer = ConsumingWriter(api, versions=["0", "1"], fail={"command": refused, "rings": refused})
    actor = ["agent-a#1"]
    state = _state()
    engine = RecoveryEngine(SETTINGS, state, writer, actor=lambda: actor[0], clock=SystemClock())
    await engine.tick(NOW)
    await _act(engine)
    assert writer.created == []
    assert engine.inflight.commands_sent() == ()

    state.apply(record_change(factories.job(), api.record, resource_version=str(api.record_rv)))
    writer.fail = {}
    actor[0] = "agent-a#2"
    for i in range(3):
        await engine.tick(NOW + timedelta(seconds=1 + i))
        await engine.idle()
    assert len(writer.created) == 1
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.RESTARTING
