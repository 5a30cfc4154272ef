"""One error vocabulary in the engine (issue 40): a read of the writer port that fails raises a
:class:`~agent.kube.errors.KubeError`, and each room of a restart handles exactly that as it always did (decided on
the cache, tried again next tick, the incident failed with the apiserver's answer). Anything else a read raises is
a bug: it is no longer taken for a failed read there, but reaches the last-resort guard of the task it runs in,
which logs it with its traceback and counts it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs
from support import factories
from support.factories import T0 as NOW
from support.factories import left_acting_state, one_job_state
from support.fakes import ListSink, ReadFailingWriter

from agent.actions import PodRef
from agent.core.clock import FixedClock
from agent.core.cluster import JobKind
from agent.core.incidents import Incident, Phase
from agent.core.resubmission import PendingResubmission
from agent.engine.claiming import ClaimResult
from agent.engine.loops import tick_loop
from agent.engine.ports import NoMetrics
from agent.engine.recovery import RecoveryEngine
from agent.kube.errors import KubeApiError, KubeConnectionError
from agent.settings import Settings

SETTINGS = Settings.model_validate({"kafka": {"enabled": False}})
REFUSED = KubeApiError("HTTP 403: Forbidden", status=403, retriable=False, reason="Forbidden")
LOST = KubeConnectionError("connection error: ServerDisconnectedError()")
INCIDENT = Incident(
    id="i",
    job_uid="uid-job",
    kind="vcjob",
    namespace="ns",
    name="job",
    generation="0",
    phase=Phase.DETECTED,
    first_fault_at=NOW,
    steps=((Phase.DETECTED, NOW),),
).join(factories.fault(at=NOW))
PODS = (PodRef("ns", "job-0", "uid-pod-0"), PodRef("ns", "job-1", "uid-pod-1"))


class Bug(Exception):
    """What a read raises when the code behind it is wrong (not an answer of the apiserver)."""


class Counting(NoMetrics):
    def __init__(self) -> None:
        self.actions: list[tuple[str, str]] = []
        self.task_failures: list[str] = []

    def action(self, action: str, result: str) -> None:
        self.actions.append((action, result))

    def task_failed(self, task: str) -> None:
        self.task_failures.append(task)


def _engine(writer: ReadFailingWriter, *, state: Any = None, settings: Settings = SETTINGS) -> RecoveryEngine:
    return RecoveryEngine(
        settings, state if state is not None else one_job_state(), writer, events=ListSink(), metrics=Counting(),
        clock=FixedClock(NOW),
    )  # fmt: skip


def _job(engine: RecoveryEngine) -> Any:
    job = engine.ctx.state.job(JobKind.VOLCANO, "ns", "job")
    assert job is not None
    return job


def _errors(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["log_level"] == "error" and "exc_info" in e]


@pytest.mark.parametrize("error", [REFUSED, LOST], ids=["refused", "lost"])
async def test_a_failed_read_of_the_jobs_version_on_resume_is_decided_on_the_cache(error: Exception) -> None:
    engine = _engine(ReadFailingWriter({"job_version": error}), state=left_acting_state())
    incident = INCIDENT
    assert await engine.ticking._moved_on(_job(engine), incident) is False


async def test_a_bug_reading_the_jobs_version_on_resume_is_not_taken_for_a_failed_read() -> None:
    engine = _engine(ReadFailingWriter({"job_version": Bug("version")}), state=left_acting_state())
    incident = INCIDENT
    with pytest.raises(Bug):  # to the tick task's last resort (agent.engine.loops.tick_loop)
        await engine.ticking._moved_on(_job(engine), incident)


async def test_the_read_sent_with_a_restart_counts_a_failed_read_as_unproven_and_lets_a_bug_through() -> None:
    engine = _engine(ReadFailingWriter({"job_meta": LOST}))
    assert await engine.sending._job_unchanged(_job(engine)) is False
    engine = _engine(ReadFailingWriter({"job_meta": Bug("meta")}))
    with pytest.raises(Bug):
        await engine.sending._job_unchanged(_job(engine))


async def test_a_failed_list_of_resubmissions_waits_for_the_next_tick_and_a_bug_goes_through() -> None:
    engine = _engine(ReadFailingWriter({"pending_resubmissions": REFUSED}))
    engine.resubmitting.wanted = True
    assert await engine.resubmitting.recover(NOW) == 0
    assert engine.resubmitting.wanted  # listed again next tick
    engine = _engine(ReadFailingWriter({"pending_resubmissions": Bug("list")}))
    engine.resubmitting.wanted = True
    with pytest.raises(Bug):
        await engine.resubmitting.recover(NOW)


async def test_a_failed_read_of_a_resubmitted_jobs_record_counts_as_none_and_a_bug_goes_through() -> None:
    item = PendingResubmission(JobKind.VOLCANO, "ns", "job", "uid-old", "i", 1, {})
    engine = _engine(ReadFailingWriter({"read_record": LOST}))
    assert await engine.resubmitting._has_incident(item, "uid-new") is False
    engine = _engine(ReadFailingWriter({"read_record": Bug("record")}))
    with pytest.raises(Bug):
        await engine.resubmitting._has_incident(item, "uid-new")


async def test_a_claim_whose_record_is_not_re_read_after_a_conflict_stays_unsent() -> None:
    engine = _engine(ReadFailingWriter({"read_record": REFUSED}, claim_conflict=True))
    assert await engine.claiming.try_claim(_job(engine), "i") is ClaimResult.NOT_CLAIMED
    assert engine.inflight.unsent("i") == "record not re-read after a claim's conflict: HTTP 403: Forbidden"
    engine = _engine(ReadFailingWriter({"read_record": Bug("record")}, claim_conflict=True))
    with pytest.raises(Bug):  # to the claim's guard in agent.engine.sending, or the act task's
        await engine.claiming.try_claim(_job(engine), "i")


async def test_a_failed_read_ends_the_force_follow_up_quietly_and_a_bug_is_logged_and_counted() -> None:
    engine = _engine(ReadFailingWriter({"job_version": LOST}))
    with capture_logs() as logs:
        await engine.follow_ups._force(_job(engine), PODS, "", "i")
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["force follow-up failed"]
    assert not _errors(logs)
    assert engine.ctx.metrics.actions == []  # type: ignore[attr-defined]

    engine = _engine(ReadFailingWriter({"job_version": Bug("version")}))
    with capture_logs() as logs:
        await engine.follow_ups._force(_job(engine), PODS, "", "i")  # the task's last resort: it does not raise
    [error] = _errors(logs)
    assert error["event"] == "force follow-up failed"
    assert engine.ctx.metrics.actions == [("force-after-command", "failed")]  # type: ignore[attr-defined]


async def test_a_failed_read_ends_the_grace_follow_up_quietly_and_a_bug_is_logged_and_counted() -> None:
    incident = INCIDENT
    engine = _engine(ReadFailingWriter({"pods_remaining": REFUSED}))
    with capture_logs() as logs:
        await engine.follow_ups._grace(_job(engine), PODS, incident, 0.0)
    assert not _errors(logs)
    assert engine.ctx.metrics.actions == []  # type: ignore[attr-defined]

    engine = _engine(ReadFailingWriter({"pods_remaining": Bug("pods")}))
    with capture_logs() as logs:
        await engine.follow_ups._grace(_job(engine), PODS, incident, 0.0)
    [error] = _errors(logs)
    assert error["event"] == "grace follow-up failed"
    assert engine.ctx.metrics.actions == [("force-after-grace", "failed")]  # type: ignore[attr-defined]


DELETE_PODS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"volcano_restart": "delete-pods"}})


async def test_a_refused_pod_list_fails_the_incident_and_a_bug_reaches_the_act_tasks_guard() -> None:
    """The restart lists the job's pods (delete-pods restart): a KubeError fails the incident with the
    apiserver's answer (as before); a bug is no longer written into the incident as if the apiserver had said it,
    but logged with its traceback and counted by the act task's last resort."""
    engine = _engine(ReadFailingWriter({"list_job_pods": REFUSED}), settings=DELETE_PODS)
    await engine.handle_fault(factories.fault(), NOW)
    await engine.idle()
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.FAILED
    assert incident.detail == "restart failed: HTTP 403: Forbidden"

    engine = _engine(ReadFailingWriter({"list_job_pods": Bug("pods")}), settings=DELETE_PODS)
    with capture_logs() as logs:
        await engine.handle_fault(factories.fault(), NOW)
        await engine.idle()
    [error] = _errors(logs)
    assert error["event"] == "acting on an incident failed"
    assert ("restart-job", "failed") in engine.ctx.metrics.actions  # type: ignore[attr-defined]
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert "Bug" not in incident.detail
    assert not engine.tasks.running


class Ready:
    """What tick_loop asks of the state: whether every source has listed."""

    ready = True


class _Pipeline:
    """What tick_loop asks of the detect pipeline: its tick, and whether its queue is empty."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[object] = asyncio.Queue()

    def tick(self) -> None:
        pass


async def test_a_bug_a_tick_meets_is_logged_and_counted_by_the_tick_tasks_last_resort_and_the_loop_goes_on() -> None:
    """A non-KubeError from a read of the resubmission records is no longer taken for a failed list: it ends that
    tick, and the tick loop's last resort logs it with its traceback and counts it; the next tick runs."""
    engine = _engine(ReadFailingWriter({"pending_resubmissions": Bug("list")}))
    engine.resubmitting.wanted = True
    stop = asyncio.Event()
    ticks = 0
    real_tick = engine.tick

    async def tick(now: Any, **kwargs: Any) -> None:
        nonlocal ticks
        ticks += 1
        if ticks == 2:
            stop.set()
        engine.resubmitting.wanted = True
        await real_tick(now, **kwargs)

    engine.tick = tick  # type: ignore[method-assign]
    with capture_logs() as logs:
        await asyncio.wait_for(tick_loop(engine, _Pipeline(), Ready(), stop, 0.01), 5.0)  # type: ignore[arg-type]
    assert ticks == 2
    assert [e["event"] for e in _errors(logs)] == ["tick failed", "tick failed"]
    assert engine.ctx.metrics.task_failures == ["tick", "tick"]  # type: ignore[attr-defined]
