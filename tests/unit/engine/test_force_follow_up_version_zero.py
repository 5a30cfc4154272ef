"""The force follow-up after a RestartJob Command on a Volcano Job never restarted before: Volcano omits
``status.version`` while it is 0 (``volcano.sh/apis`` v1.14.0 ``batch/v1alpha1`` ``JobStatus.Version``, ``json:
"version,omitempty"``), so the job's version reads "" while its pods carry ``volcano.sh/job-version: "0"``. That is
the same version, not one the pods are older than: the old pods must wait until Volcano took the Command (its
``killJob`` writes version 1), as for any other version.

The defect: "0" != "" was taken for "the pods' version is gone", and the follow-up deleted both pods with grace 0
at once, ~50 ms after the Command, while Volcano's ``killJob`` for it was still running. Every pod event of the
kill then reached Volcano's job controller before it saw its own deletion of the PodGroup; its syncs in Restarting
found the PodGroup Pending (the scheduler had flipped it once the pods went) and kept the stale
``status.terminating: 2``, and with no later event the job stayed Restarting with no pods and no PodGroup
(tests/e2e/test_gpu_nvsentinel.py, 3 of ~6 CI runs). Runs on a virtual-time loop, the engine's clock on its time."""

from __future__ import annotations

import asyncio
from typing import Any

from support import factories
from support.factories import T0, change
from support.fakes import FakeWriter, Scripted, script

from agent.core.cluster import JobKind, JobRef
from agent.engine.recovery import RecoveryEngine
from agent.replay.vloop import VirtualClock, VirtualLoop, run_virtual
from agent.settings import Settings
from agent.sources.state import ClusterState

SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"volcano_restart": "command"}})
TAKEN_AFTER_S = 2.0
"""When (loop seconds after the decision) Volcano takes the Command in this world: its job reads version 1."""


def _volcano_takes_it_later() -> tuple[FakeWriter, Scripted]:
    """Volcano takes the Command TAKEN_AFTER_S seconds after the decision: until then every read of the job
    answers no status.version (""; a job at version 0), then "1". The old pods are still there until the follow-up
    deletes them. Returns the writer and its deletions' calls."""
    writer = FakeWriter()
    start = asyncio.get_running_loop().time()

    def version(*_: Any, **__: Any) -> str:
        return "" if asyncio.get_running_loop().time() - start < TAKEN_AFTER_S else "1"

    script(writer, "job_version", does=version)
    script(writer, "pods_remaining", does=list)
    return writer, script(writer, "delete_pods")


def _state() -> ClusterState:
    """Job ns/job never restarted (no status.version: "") and its two pods, created under version 0."""
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node(at=T0)))
    state.apply(change("vcjobs", "ns/job", factories.job(created_at=T0, version="")))
    link = JobRef(JobKind.VOLCANO, "ns", "job", "", "0")
    for i in range(2):
        made = factories.pod(f"job-{i}", uid=f"uid-pod-{i}", chips=(f"Ascend910-{i}",), rank=i, job=link)
        state.apply(change("pods", f"ns/job-{i}", made))
    return state


def test_the_pods_of_a_job_at_version_zero_wait_until_volcano_took_the_command() -> None:
    async def main() -> tuple[list[str], float, list[float]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualLoop)
        writer, deletions = _volcano_takes_it_later()
        engine = RecoveryEngine(SETTINGS, _state(), writer, clock=VirtualClock(loop, T0))
        sent_at = loop.time()
        decisions = await engine.handle_fault(factories.fault(at=T0), T0)
        await engine.idle()
        return [d.action.value for d in decisions], sent_at, deletions.called_at

    actions, sent_at, deleted_at = run_virtual(main())
    assert actions == ["restart-job"]
    assert len(deleted_at) == 1, f"the old pods were deleted {len(deleted_at)} times"
    waited = deleted_at[0] - sent_at
    assert TAKEN_AFTER_S <= waited < TAKEN_AFTER_S + 1.0, (
        f"the old pods went {waited:.2f} s after the Command (loop time); Volcano took it after {TAKEN_AFTER_S} s"
    )
