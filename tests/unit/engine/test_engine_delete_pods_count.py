"""A Volcano Job restarted by deleting its pods (``policy.volcano_restart=delete-pods``) is restarted once per
fault across a leadership change that comes before Volcano's controller counted the restart.

Why this test exists: holding the incident's ``restarting`` write back until Volcano counted the restart (tried on
2026-12-04 to keep that PATCH out of the controller's ``killJob``; bench/RESULTS.md) left the job's record at the
claim's ``acting`` for that wait, and a new term resuming it deleted the new pods again: a second restart for one
fault. The write goes out when the deletions are answered, as for every restart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import T0 as NOW
from support.factories import one_job_state
from support.fakes import InstantWriter, Leadership, ListSink, record_change

from agent.actions import ActionResult, Outcome, PodRef
from agent.core.clock import FixedClock
from agent.core.cluster import JobRef
from agent.core.records import KEY_INCIDENT
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings

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
        self.on_job: dict[str, str] = {}  # the job's record as written

    async def claim_record(self, job: JobRef, data: Any, *, resource_version: str, incident: str) -> ActionResult:
        self.writes.append(("claim", json.loads(data[KEY_INCIDENT])["phase"]))
        self.on_job = dict(data)
        return ActionResult("claim-record", str(job), Outcome.DONE)

    async def write_record(self, job: JobRef, data: Any, *, incident: str) -> ActionResult:
        self.writes.append(("annotate", json.loads(data[KEY_INCIDENT])["phase"]))
        self.on_job = {**self.on_job, **data}
        return ActionResult("write-record", str(job), Outcome.DONE)

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


async def test_a_new_term_before_volcano_counted_the_restart_does_not_restart_again() -> None:
    api = k8s.ApiClient()
    try:
        state = one_job_state()
        writer = RecordingWriter(api)
        leadership = Leadership(True)
        engine = RecoveryEngine(
            DELETE_PODS, state, writer, events=ListSink(), clock=FixedClock(SENT), is_leader=leadership,
            active_faults=lambda: [factories.fault()],
        )  # fmt: skip
        await engine.handle_fault(factories.fault(), SENT)
        await engine.idle()
        # the job's record as written, which the next term reads back
        job = state.vcjobs["ns/job"]
        state.apply(record_change(job, writer.on_job, resource_version="50"))
        leadership.leads = False
        await engine.tick(SENT + timedelta(seconds=1))
        leadership.leads = True  # a new term, Volcano's count not in the cache yet
        await engine.tick(SENT + timedelta(seconds=2))
        await engine.idle()
        deletions = [w for w in writer.writes if w[0] == "delete"]
        assert deletions == [("delete", ["job-0", "job-1"])]
        assert writer.job_writes()[:2] == [("claim", "acting"), ("annotate", "restarting")]
    finally:
        await api.close()


async def test_a_restart_by_command_is_recorded_at_once() -> None:
    api = k8s.ApiClient()
    try:
        writer = RecordingWriter(api)
        engine = RecoveryEngine(COMMAND, one_job_state(), writer, events=ListSink(), clock=FixedClock(NOW))
        await engine.handle_fault(factories.fault(), NOW)
        await engine.idle()
        assert ("command", "") in writer.writes
        assert writer.job_writes() == [("claim", "acting"), ("annotate", "restarting")]
    finally:
        await api.close()
