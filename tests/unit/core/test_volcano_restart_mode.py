"""Which Volcano Jobs a pod deletion restarts whole (their lifecycle policies, as Volcano's job controller applies
them: ``volcano.sh/volcano`` v1.14.1 ``pkg/controllers/job/job_controller_util.go`` ``applyPolicies``), and the
restart each ``policy.volcano_restart`` setting makes for a job."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import T0 as NOW
from support.factories import one_job_state
from support.fakes import ListSink, RecordingWriter

from agent.core.clock import FixedClock
from agent.core.cluster import JobKind, JobRecord
from agent.core.policy import volcano_restart_by_deletion
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sources.jobs import JobConverter, restarts_on_eviction


def _task(name: str, policies: list[Any] | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {"name": name, "replicas": 1, "template": {"spec": {"containers": []}}}
    if policies is not None:
        task["policies"] = policies
    return task


EVICTED_RESTARTS = {"event": "PodEvicted", "action": "RestartJob"}


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        # the integration guide's job: one job-level policy
        ({"policies": [EVICTED_RESTARTS], "tasks": [_task("default-test")]}, True),
        ({"policies": [{"events": ["PodFailed", "PodEvicted"], "action": "RestartJob"}], "tasks": [_task("t")]}, True),
        ({"policies": [{"event": "*", "action": "RestartJob"}], "tasks": [_task("t")]}, True),
        # the first policy naming the event decides
        (
            {
                "policies": [{"event": "PodEvicted", "action": "AbortJob"}, EVICTED_RESTARTS],
                "tasks": [_task("t")],
            },
            False,
        ),
        ({"policies": [{"event": "PodFailed", "action": "RestartJob"}], "tasks": [_task("t")]}, False),
        # an exit-code policy never answers an eviction
        ({"policies": [{"exitCode": 1, "action": "RestartJob"}], "tasks": [_task("t")]}, False),
        # no policy: Volcano only syncs (re-creates the pod)
        ({"tasks": [_task("t")]}, False),
        # a task's own policy comes first; a task without one falls back to the job's
        (
            {
                "policies": [EVICTED_RESTARTS],
                "tasks": [_task("a"), _task("b", [{"event": "PodEvicted", "action": "RestartTask"}])],
            },
            False,
        ),
        (
            {"policies": [EVICTED_RESTARTS], "tasks": [_task("a", [{"event": "PodFailed", "action": "RestartTask"}])]},
            True,
        ),
        ({"tasks": [_task("a", [EVICTED_RESTARTS]), _task("b", [EVICTED_RESTARTS])]}, True),
        ({"tasks": [_task("a", [EVICTED_RESTARTS]), _task("b")]}, False),
        # shapes the CRD would not admit never read as a restart
        ({"policies": EVICTED_RESTARTS, "tasks": [_task("t")]}, False),
        ({"policies": [EVICTED_RESTARTS], "tasks": []}, False),
        ({"policies": [EVICTED_RESTARTS]}, False),
        ({"policies": [EVICTED_RESTARTS], "tasks": "t"}, False),
        ({"policies": [EVICTED_RESTARTS], "tasks": [_task("a", [{"event": "PodEvicted", "action": 3}])]}, False),
        ({"policies": [{"event": "PodEvicted", "action": None}], "tasks": [_task("t")]}, False),
        ({"policies": ["PodEvicted"], "tasks": [_task("t")]}, False),
        ({"policies": [{"events": "PodEvicted", "action": "RestartJob"}], "tasks": [_task("t")]}, False),
    ],
)
def test_restarts_on_eviction(spec: dict[str, Any], want: bool) -> None:
    assert restarts_on_eviction(spec) is want


def test_the_converter_reads_the_policies_of_a_volcano_job_only() -> None:
    job = factories.seed_vcjob_body()  # the seed fixture: PodEvicted -> RestartJob at the job level
    rec = JobConverter(JobKind.VOLCANO)(job)
    assert isinstance(rec, JobRecord)
    assert rec.restarts_on_eviction
    job["spec"]["policies"] = [{"event": "PodFailed", "action": "RestartJob"}]
    rec = JobConverter(JobKind.VOLCANO)(job)
    assert isinstance(rec, JobRecord)
    assert not rec.restarts_on_eviction


@pytest.mark.parametrize(
    ("setting", "kind", "on_eviction", "want"),
    [
        ("command", JobKind.VOLCANO, True, False),
        ("delete-pods", JobKind.VOLCANO, False, True),
        ("auto", JobKind.VOLCANO, True, True),
        ("auto", JobKind.VOLCANO, False, False),
        ("command", JobKind.ASCEND, False, True),  # an AscendJob has no Command
    ],
)
def test_volcano_restart_by_deletion(setting: str, kind: JobKind, on_eviction: bool, want: bool) -> None:
    record = replace(factories.job(kind=kind), restarts_on_eviction=on_eviction)
    assert volcano_restart_by_deletion(record, setting) is want


@pytest.mark.parametrize(("on_eviction", "want"), [(True, "delete"), (False, "command")])
async def test_auto_deletes_the_pods_of_a_job_its_policies_restart_and_sends_others_a_command(
    on_eviction: bool, want: str
) -> None:
    api = k8s.ApiClient()
    try:
        state = one_job_state(restarts_on_eviction=on_eviction)
        writer = RecordingWriter(api)
        settings = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"volcano_restart": "auto"}})
        engine = RecoveryEngine(settings, state, writer, events=ListSink(), clock=FixedClock(NOW))
        await engine.handle_fault(factories.fault(), NOW)
        await engine.idle()
        assert [kind for kind, _ in writer.writes] == [want]
    finally:
        await api.close()


def test_the_default_deletes_the_pods_of_a_job_its_policies_restart_and_sends_others_a_command() -> None:
    """The default is ``auto`` (issue 39): the guide's job (``PodEvicted → RestartJob``) is restarted by deleting
    its pods, its first pod stopping at the agent's own write; a job without that policy still gets a Command."""
    default = Settings.model_validate({"kafka": {"enabled": False}}).policy.volcano_restart
    assert default == "auto"
    guide = replace(factories.job(kind=JobKind.VOLCANO), restarts_on_eviction=True)
    assert volcano_restart_by_deletion(guide, default) is True
    assert volcano_restart_by_deletion(replace(guide, restarts_on_eviction=False), default) is False
