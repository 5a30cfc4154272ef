"""Issue 13 A.1: a fault that joins an open incident is decided again when that incident closes, if it is still
active on the job's current pods (it may sit on a pod the incident's own restart created)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import change
from support.fakes import CountingWriter

from agent.core.cluster import JobRecord, PodRecord
from agent.core.faults import Fault
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
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
# faults on two of four nodes: the breaker must not be what stops the second restart here
SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 100}})


def _job(version: str) -> JobRecord:
    return factories.job(version=version, created_at=NOW)


def _pod(i: int, node: str, *, uid: str, created: datetime | None, phase: str = "Running") -> PodRecord:
    return factories.pod(
        f"job-{i}",
        uid=uid,
        node=node,
        phase=phase,
        ready=phase == "Running",
        chips=tuple(f"Ascend910-{c}" for c in range(8)),
        rank=i,
        created_at=created,
    )


def _fault(node: str, at: datetime) -> Fault:
    return factories.fault(node=node, chips=("Ascend910-3",), codes=("80E3A201",), at=at)


def _state() -> ClusterState:
    state = ClusterState()
    for n in ("n1", "n2", "n3", "n4"):
        state.apply(change("nodes", n, factories.node(n, at=NOW)))  # fmt: skip
    state.apply(change("vcjobs", "ns/job", _job("0")))
    for i, node in enumerate(("n1", "n2", "n3")):
        state.apply(change("pods", f"ns/job-{i}", _pod(i, node, uid=f"old-{i}", created=NOW)))
    return state


@pytest.mark.parametrize("still_active", [True, False], ids=["still-active-restarts-again", "cleared-no-restart"])
async def test_a_fault_that_joined_the_open_incident_is_decided_again_when_it_closes(still_active: bool) -> None:
    """3 replicas; chip fault on n1 → restart; the new pods land on n2, n4 and one is Pending; a chip fault on n2
    (a new pod's node) joins the open incident; once the job recovers, that fault is decided again at once."""
    api = k8s.ApiClient()
    writer = CountingWriter(api)
    state = _state()
    first = _fault("n1", NOW)
    active = [first]
    engine = RecoveryEngine(SETTINGS, state, writer, active_faults=lambda: list(active), clock=SystemClock())
    await engine.handle_fault(first, NOW)
    await engine.idle()
    assert len(writer.messages) == 1
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.RESTARTING
    restart_at = incident.restart_at
    assert restart_at is not None

    # Volcano restarted the job: new generation, new pods (one still Pending: the incident stays open)
    state.apply(change("vcjobs", "ns/job", _job("1")))
    state.apply(change("pods", "ns/job-0", _pod(0, "n2", uid="new-0", created=restart_at)))
    state.apply(change("pods", "ns/job-1", _pod(1, "n4", uid="new-1", created=restart_at)))
    state.apply(change("pods", "ns/job-2", _pod(2, "", uid="new-2", created=restart_at, phase="Pending")))
    second = _fault("n2", NOW + timedelta(seconds=5))
    active.append(second)
    assert await engine.handle_fault(second, NOW + timedelta(seconds=5)) == []  # joined the open incident
    await engine.idle()
    assert len(writer.messages) == 1
    if not still_active:
        active.remove(second)

    # the Pending pod lands on n3: the job is healthy, the incident closes as recovered
    state.apply(change("pods", "ns/job-2", _pod(2, "n3", uid="new-2", created=restart_at)))
    await engine.tick(NOW + timedelta(seconds=10))
    await engine.idle()
    await api.close()
    closed = [d for _, j, d in engine.decisions if j.uid == "uid-job"]
    if still_active:
        assert len(writer.messages) == 2, "the job was left running on the faulty chip of n2"
        assert "Ascend910-3 on n2" in writer.messages[1]
        now_open = engine.store.incident("uid-job")
        assert now_open is not None
        assert now_open.phase is Phase.RESTARTING
        assert now_open.id != incident.id
        assert engine.store.ledger("uid-job").restarts_used == 2
    else:
        assert len(writer.messages) == 1
        assert len(closed) == 1


async def test_a_new_leader_decides_again_an_active_fault_the_open_incident_absorbed() -> None:
    """After a takeover, the active faults an open (persisted) incident covers are remembered too, so they are
    decided again when it closes (else a fault on a new pod, seen around the crash, was dropped the same way)."""
    api = k8s.ApiClient()
    writer = CountingWriter(api)
    restart_at = NOW + timedelta(seconds=2)
    incident = Incident(
        id=make_incident_id("job", "uid-job", "0", 1), job_uid="uid-job", kind="vcjob", namespace="ns",
        name="job", generation="0",
        phase=Phase.DETECTED, first_fault_at=NOW, steps=((Phase.DETECTED, NOW),),
    )  # fmt: skip
    incident = incident.move(Phase.ACTING, NOW, action="restart-job", mode="force", reason="r")
    incident = incident.move(Phase.RESTARTING, restart_at, restart_at=restart_at)
    annotations = (
        (INCIDENT_ANNOTATION, encode_incident(incident)),
        (LEDGER_ANNOTATION, encode_ledger(RetryLedger(restarts_used=1, incidents=1))),
    )
    state = _state()
    state.apply(change("vcjobs", "ns/job", replace(_job("1"), annotations=annotations)))
    created = restart_at + timedelta(seconds=1)
    state.apply(change("pods", "ns/job-0", _pod(0, "n2", uid="new-0", created=created)))
    state.apply(change("pods", "ns/job-1", _pod(1, "n4", uid="new-1", created=created)))
    state.apply(change("pods", "ns/job-2", _pod(2, "", uid="new-2", created=created, phase="Pending")))
    on_new_pod = _fault("n2", NOW + timedelta(seconds=5))
    engine = RecoveryEngine(SETTINGS, state, writer, active_faults=lambda: [on_new_pod], clock=SystemClock())
    await engine.tick(NOW + timedelta(seconds=6))  # a new leader: re-evaluates, the open incident absorbs it
    await engine.idle()
    assert writer.messages == []
    state.apply(change("pods", "ns/job-2", _pod(2, "n3", uid="new-2", created=created)))
    await engine.tick(NOW + timedelta(seconds=7))
    await engine.idle()
    await api.close()
    closed = engine.store.incident("uid-job")
    assert closed is not None
    assert closed.id != incident.id
    assert len(writer.messages) == 1, "the job was left running on the faulty chip of n2"
