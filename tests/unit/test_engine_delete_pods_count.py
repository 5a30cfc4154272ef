"""A Volcano Job restarted by deleting its pods (``policy.volcano_restart=delete-pods``): the agent writes
nothing more on the job until Volcano's controller has counted the restart.

Regression (bench_e2e ``--volcano-restart delete-pods``, 2026-12-04): the ``restarting`` annotation PATCH went
out as soon as the deletions were answered, while Volcano's controller was killing the job for the first deleted
pod; its status update (``status.version``, ``retryCount``), made with the resourceVersion it had read before our
PATCH, conflicted ("Failed to update status of Job ... the object has been modified") 20–90 ms after our write.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from app_support import InstantWriter, ListSink
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import change
from test_app_takeover import NOW, _fault, _state

from agent.actions import ActionResult, Outcome, PodRef
from agent.core.clock import FixedClock
from agent.core.cluster import JobRef
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
from agent.engine.acting import COUNT_WAIT_S
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sources.state import ClusterState

DELETE_PODS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"volcano_restart": "delete-pods"}})
COMMAND = Settings.model_validate({"kafka": {"enabled": False}})
SENT = NOW + timedelta(seconds=1)
"""When the restart is sent: a second after the job's pods were created, so they are the old ones."""


class RecordingWriter(InstantWriter):
    """Answers at once and records each write to the job and to its pods, in order: ("claim" | "annotate",
    incident phase written) or ("delete", pod names) or ("command", "")."""

    def __init__(self, api: k8s.ApiClient) -> None:
        super().__init__(api)
        self.writes: list[tuple[str, Any]] = []

    async def claim_job(self, job: JobRef, annotations: Any, *, resource_version: str, incident: str) -> ActionResult:
        self.writes.append(("claim", json.loads(annotations[INCIDENT_ANNOTATION])["phase"]))
        return ActionResult("claim-job", str(job), Outcome.DONE)

    async def annotate_job(self, job: JobRef, annotations: Any, *, incident: str) -> ActionResult:
        self.writes.append(("annotate", json.loads(annotations[INCIDENT_ANNOTATION])["phase"]))
        return ActionResult("annotate-job", str(job), Outcome.DONE)

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        if pods:
            self.writes.append(("delete", sorted(p.name for p in pods)))
        return ActionResult("delete-pods", target, Outcome.DONE)

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        self.writes.append(("command", ""))
        return ActionResult("restart-command", str(job), Outcome.DONE)

    def job_writes(self) -> list[tuple[str, Any]]:
        return [w for w in self.writes if w[0] in ("claim", "annotate")]


def _counted(state: ClusterState) -> None:
    """Volcano's controller counted the restart: the job's status.version moved on (its pods are not back yet)."""
    job = state.vcjobs["ns/job"]
    state.apply(change("vcjobs", "ns/job", replace(job, version="1", resource_version="99")))


async def test_nothing_is_written_on_the_job_until_volcano_counted_the_restart() -> None:
    api = k8s.ApiClient()
    try:
        state = _state()
        writer = RecordingWriter(api)
        engine = RecoveryEngine(DELETE_PODS, state, writer, events=ListSink(), clock=FixedClock(SENT))
        await engine.handle_fault(_fault(), SENT)
        await engine.idle()
        assert ("delete", ["job-0", "job-1"]) in writer.writes
        assert writer.job_writes() == [("claim", "acting")]  # the claim went out with the deletions, nothing after
        incident = engine.store.incident("uid-job")
        assert incident is not None
        assert incident.phase is Phase.RESTARTING  # in memory: the recovery goes on

        await engine.tick(SENT + timedelta(seconds=1))  # Volcano has not counted it yet
        assert writer.job_writes() == [("claim", "acting")]

        _counted(state)
        await engine.tick(SENT + timedelta(seconds=2))
        assert writer.job_writes() == [("claim", "acting"), ("annotate", "restarting")]
        await engine.tick(SENT + timedelta(seconds=3))
        assert writer.job_writes() == [("claim", "acting"), ("annotate", "restarting")]  # once
    finally:
        await api.close()


async def test_a_restart_that_recovers_by_the_time_volcano_counted_it_is_written_once() -> None:
    """The count and the recovery seen in one tick: only the incident's end is written (it holds the restart)."""
    api = k8s.ApiClient()
    try:
        state = _state()
        writer = RecordingWriter(api)
        engine = RecoveryEngine(DELETE_PODS, state, writer, events=ListSink(), clock=FixedClock(SENT))
        await engine.handle_fault(_fault(), SENT)
        await engine.idle()
        _counted(state)
        later = SENT + timedelta(seconds=3)
        for i in range(2):  # the new pods, Running and Ready, on another node
            pod = factories.pod(f"job-{i}", uid=f"uid-new-{i}", node="n2", rank=i, created_at=later)
            state.apply(change("pods", f"ns/job-{i}", pod))
        await engine.tick(later + timedelta(seconds=1))
        assert writer.job_writes() == [("claim", "acting"), ("annotate", "recovered")]
        assert not engine.acting.uncounted
    finally:
        await api.close()


async def test_a_restart_volcano_never_counts_is_written_after_the_wait() -> None:
    api = k8s.ApiClient()
    try:
        writer = RecordingWriter(api)
        engine = RecoveryEngine(DELETE_PODS, _state(), writer, events=ListSink(), clock=FixedClock(SENT))
        await engine.handle_fault(_fault(), SENT)
        await engine.idle()
        await engine.tick(SENT + timedelta(seconds=COUNT_WAIT_S - 0.5))
        assert writer.job_writes() == [("claim", "acting")]
        await engine.tick(SENT + timedelta(seconds=COUNT_WAIT_S))
        assert writer.job_writes() == [("claim", "acting"), ("annotate", "restarting")]
    finally:
        await api.close()


async def test_a_new_term_does_not_write_what_the_last_one_left_unwritten() -> None:
    """The job's claim says ``acting``; a new term adopts that and resumes it (the generation moved: recorded as
    restarted, written by the resume itself), never the earlier term's memory."""
    api = k8s.ApiClient()
    try:
        state = _state()
        writer = RecordingWriter(api)
        engine = RecoveryEngine(DELETE_PODS, state, writer, events=ListSink(), clock=FixedClock(SENT))
        await engine.handle_fault(_fault(), SENT)
        await engine.idle()
        assert engine.acting.uncounted
        engine.ticking.new_term()
        assert not engine.acting.uncounted
    finally:
        await api.close()


async def test_a_restart_by_command_is_written_on_the_job_at_once() -> None:
    """The default mode is unchanged: Volcano takes the Command seconds later, so the ``restarting`` write
    lands long before its status update."""
    api = k8s.ApiClient()
    try:
        writer = RecordingWriter(api)
        engine = RecoveryEngine(COMMAND, _state(), writer, events=ListSink(), clock=FixedClock(SENT))
        await engine.handle_fault(_fault(), SENT)
        await engine.idle()
        assert ("command", "") in writer.writes
        assert writer.job_writes() == [("claim", "acting"), ("annotate", "restarting")]
    finally:
        await api.close()


async def test_a_resumed_restart_waits_for_volcanos_count_too() -> None:
    """A successor resuming an ``acting`` incident whose restart was never sent claims the job first, then deletes
    the pods: the same wait before it writes ``restarting`` (the claim path of escalations and graceExit too)."""
    api = k8s.ApiClient()
    try:
        incident = Incident(
            id=make_incident_id("job", "uid-job", "0", 1), job_uid="uid-job", kind="vcjob", namespace="ns",
            name="job", generation="0", phase=Phase.DETECTED, first_fault_at=NOW, steps=((Phase.DETECTED, NOW),),
        ).join(_fault())  # fmt: skip
        incident = incident.move(Phase.ACTING, NOW, action="restart-job", mode="force", reason="r")
        annotations = (
            (INCIDENT_ANNOTATION, encode_incident(incident)),
            (LEDGER_ANNOTATION, encode_ledger(RetryLedger(incidents=1))),
        )
        state = _state(annotations=annotations)
        writer = RecordingWriter(api)
        engine = RecoveryEngine(
            DELETE_PODS, state, writer, events=ListSink(), clock=FixedClock(SENT), active_faults=lambda: [_fault()]
        )
        await engine.tick(SENT)
        await engine.idle()
        assert ("delete", ["job-0", "job-1"]) in writer.writes
        assert writer.job_writes() == [("claim", "acting")]
        _counted(state)
        await engine.tick(SENT + timedelta(seconds=1))
        assert writer.job_writes() == [("claim", "acting"), ("annotate", "restarting")]
    finally:
        await api.close()
