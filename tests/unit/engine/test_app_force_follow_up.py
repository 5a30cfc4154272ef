"""The force follow-up after a RestartJob Command follows the watch cache for Volcano's new job version (issue 19):
the old pods go within a cache poll of the version changing there, and the apiserver is read only on the first
poll and once a second after it (it was read every 0.25 s for the whole wait: ~13% of the agent's event loop in
bench/bench_e2e.py, and load on the apiserver in the middle of the restart burst)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import change, one_job_state
from support.fakes import InstantWriter

from agent.actions import ActionResult, Outcome, PodRef
from agent.core.cluster import JobRef
from agent.engine.recovery import RecoveryEngine
from agent.runtime.clock import SystemClock
from agent.settings import Settings

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
CHANGE_AFTER_S = 1.5  # Volcano takes the Command this long after it was sent


class SlowControllerWriter(InstantWriter):
    """The apiserver keeps answering the job's old version (its watch event, applied by the test, is the only
    sign of the new one); the old pods are still there; their deletion is timed."""

    def __init__(self, api: k8s.ApiClient) -> None:
        super().__init__(api)
        self.version_reads = 0
        self.deleted_at: float | None = None

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        return ActionResult("restart-command", str(job), Outcome.DONE)

    async def job_version(self, job: JobRef) -> str | None:
        self.version_reads += 1
        return "0"

    async def job_meta(self, job: JobRef) -> tuple[str, dict[str, str]] | None:
        # the GET sent with the restart finds the job as cached (resourceVersion "1"): the cached version is
        # proven current, so the follow-up follows the watch cache
        return "1", {}

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        return list(pods)

    async def delete_pods(self, pods: Sequence[PodRef], **kwargs: Any) -> ActionResult:
        self.deleted_at = time.monotonic()
        return ActionResult("delete-pods", "pods", Outcome.DONE)


async def test_the_old_pods_go_once_the_cache_shows_the_new_version_with_few_reads() -> None:
    settings = Settings.model_validate({"kafka": {"enabled": False}})
    api = k8s.ApiClient()
    writer = SlowControllerWriter(api)
    state = one_job_state(NOW)
    engine = RecoveryEngine(settings, state, writer, clock=SystemClock())
    decisions = await engine.handle_fault(factories.fault(at=NOW), NOW)
    assert [d.action.value for d in decisions] == ["restart-job"]
    await asyncio.sleep(CHANGE_AFTER_S)
    assert writer.deleted_at is None, "the follow-up deleted the pods before the job's version changed"
    changed_at = time.monotonic()
    state.apply(change("vcjobs", "ns/job", factories.job(created_at=NOW, version="1", resource_version="2")))
    await asyncio.wait_for(engine.idle(), 5)
    await api.close()
    assert writer.deleted_at is not None
    assert writer.deleted_at - changed_at < 0.5, f"deleted {writer.deleted_at - changed_at:.2f} s after the change"
    # the first poll and one a second after it; every 0.25 s would be 6 or more by now
    assert writer.version_reads <= 3, f"{writer.version_reads} apiserver reads of the job's version"
