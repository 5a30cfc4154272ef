"""A Volcano Job restarted by deleting its pods (``policy.volcano_restart: auto``, the default, or ``delete-pods``)
whose pods all carry a ``volcano.sh/job-version`` below its ``status.version`` gets a RestartJob Command instead:
Volcano would take each deletion as an outdated request and only sync, an uncounted restart (issue 39; agent.engine
.sending ``Sending._by_command``, agent.core.policy.volcano_deletion_outdated).

Why this test exists: in bench_e2e runs (2026-12-05, 30 jobs, 120 faults) about one restart in 100-500 went
uncounted by Volcano: the job's pods had survived the previous restart under the old version, the agent deleted them,
Volcano re-created them without moving ``status.retryCount``/``status.version``, and the agent, which waits for the
job's restart counter, never saw the restart.
"""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import T0 as NOW
from support.factories import one_job_state
from support.fakes import ListSink, RecordingWriter

from agent.core.clock import FixedClock
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sources.state import ClusterState


def _state(job_version: str, pod_versions: tuple[str, str], *, phase: str = "Running") -> ClusterState:
    """:func:`one_job_state` with the job at `job_version` in `phase` (its policies restart it on a deleted pod)
    and its two pods carrying `pod_versions` (``volcano.sh/job-version``)."""
    return one_job_state(version=job_version, phase=phase, restarts_on_eviction=True, pod_versions=pod_versions)


@pytest.mark.parametrize("setting", ["auto", "delete-pods"])
@pytest.mark.parametrize(
    ("job_version", "pod_versions", "phase", "want"),
    [
        ("3", ("3", "3"), "Running", [("delete", ["job-0", "job-1"])]),  # the common path: at once, as before
        ("3", ("2", "3"), "Running", [("delete", ["job-0", "job-1"])]),  # job-1's deletion is counted
        ("3", ("2", "2"), "Running", [("command", [])]),  # every deletion outdated: a Command, counted
        ("3", ("2", "2"), "Restarting", [("delete", ["job-0", "job-1"])]),  # a restart under way: as before
    ],
)
async def test_a_job_whose_pods_are_all_older_than_it_is_restarted_by_command(
    setting: str, job_version: str, pod_versions: tuple[str, str], phase: str, want: list[tuple[str, list[str]]]
) -> None:
    api = k8s.ApiClient()
    try:
        writer = RecordingWriter(api)
        settings = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"volcano_restart": setting}})
        state = _state(job_version, pod_versions, phase=phase)
        engine = RecoveryEngine(settings, state, writer, events=ListSink(), clock=FixedClock(NOW))
        await engine.handle_fault(factories.fault(), NOW)
        await engine.idle()
        assert writer.writes == want
    finally:
        await api.close()


async def test_the_command_instead_of_outdated_deletions_is_one_restart_for_the_fault() -> None:
    """The fault seen again (a second signal of it, the tick) joins the incident: one Command, no deletion."""
    api = k8s.ApiClient()
    try:
        writer = RecordingWriter(api)
        settings = Settings.model_validate({"kafka": {"enabled": False}})  # the default: auto
        engine = RecoveryEngine(settings, _state("3", ("2", "2")), writer, events=ListSink(), clock=FixedClock(NOW))
        await engine.handle_fault(factories.fault(), NOW)
        await engine.idle()
        await engine.handle_fault(factories.fault(), NOW)
        await engine.tick(NOW)
        await engine.idle()
        assert writer.writes == [("command", [])]
    finally:
        await api.close()
