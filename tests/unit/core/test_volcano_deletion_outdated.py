"""When deleting a Volcano Job's pods would not restart it in Volcano's count: every pod carries a
``volcano.sh/job-version`` below the Running job's ``status.version``, so each deleted pod's request is "outdated"
and only syncs (``volcano.sh/volcano`` v1.14.1 ``pkg/controllers/job/job_controller_util.go`` ``applyPolicies``)."""

from __future__ import annotations

import pytest
from support import factories

from agent.core.cluster import JobKind
from agent.core.policy import volcano_deletion_outdated


@pytest.mark.parametrize(
    ("phase", "job_version", "pod_versions", "want"),
    [
        # the common path: the pods were created under the job's version, their deletion is a counted RestartJob
        ("Running", "3", ["3", "3"], False),
        # pods that survived a restart under the old version: every deletion is outdated, a sync (issue 39)
        ("Running", "3", ["2", "2"], True),
        ("Running", "3", ["1", "2"], True),
        # one pod of the job's version is enough: its request restarts the job, counted
        ("Running", "3", ["2", "3"], False),
        # a pod newer than the cached job (the pods' watch ahead of the job's): current
        ("Running", "3", ["4", "4"], False),
        # versions compare as numbers, not as text
        ("Running", "10", ["9", "9"], True),
        ("Running", "9", ["10"], False),
        # unknown versions never turn a restart into a Command: the job's, or every pod's
        ("Running", "", ["2"], False),
        ("Running", "3", ["", ""], False),
        ("Running", "3", [], False),
        # a pod without a version gives Volcano no request; the others decide
        ("Running", "3", ["", "2"], True),
        # a restart under way (Volcano's own, or the agent's joined incident): deleting old pods only syncs, as before
        ("Restarting", "3", ["2", "2"], False),
        ("Pending", "3", ["2", "2"], False),
    ],
)
def test_volcano_deletion_outdated(phase: str, job_version: str, pod_versions: list[str], want: bool) -> None:
    job = factories.job(phase=phase, version=job_version)
    assert volcano_deletion_outdated(job, pod_versions) is want


def test_an_ascend_job_is_never_outdated_by_its_pods_versions() -> None:
    """An AscendJob's version is its pods' own counter (every deleted pod of the current version counts), and it
    has no Command to fall back to."""
    job = factories.job(kind=JobKind.ASCEND, version="3")
    assert volcano_deletion_outdated(job, ["2", "2"]) is False
