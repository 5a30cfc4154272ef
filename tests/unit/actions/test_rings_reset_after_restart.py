"""The rings-config reset goes out only once the restart itself was accepted (issue 36, item 8).

MindCluster's rescheduler never writes ``rings-config-<job>``; the Ascend Operator fills it for Volcano Jobs and
AscendJobs and resets it itself when the pods go, writing only when the pod set changes
(``component/ascend-operator/pkg/controllers/v1/pod.go`` ``handleCompletedRankTable``, ``saveRankTableConfigmap``).
A reset of ours that lands while the restart does not would leave ``initializing`` under running pods for good.
The writer is tests/support/fakes.py's RestartFake: it logs each write's start and end and can refuse the Command
or the deletions.
"""

from __future__ import annotations

import pytest
from support.fakes import RestartFake

from agent.actions import Outcome, PodRef, restart_job
from agent.actions.recovery import RINGS_SKIPPED
from agent.core.cluster import FaultScheduling, JobKind, JobRef

JOB_VC = JobRef(JobKind.VOLCANO, "train", "job", "uid-job")
JOB_AC = JobRef(JobKind.ASCEND, "train", "job", "uid-job")
PODS = [PodRef("train", f"job-worker-{i}", f"uid-{i}", version="0") for i in range(2)]


async def _restart(writer: RestartFake, job: JobRef, volcano_restart: str = "command", only: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    return await restart_job(
        writer, job, mode=FaultScheduling.FORCE, incident="inc", reason="chip fault",
        volcano_restart=volcano_restart, known_pods=PODS, version="0", only_pods=only,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("job", "volcano_restart", "only", "restart_write"),
    [
        pytest.param(JOB_VC, "command", (), "command", id="volcano-command"),
        pytest.param(JOB_VC, "delete-pods", (), "delete", id="volcano-delete-pods"),
        pytest.param(JOB_AC, "command", (), "delete", id="ascendjob"),
        pytest.param(JOB_VC, "command", ("job-worker-1",), "delete", id="pod-level"),
    ],
)
async def test_a_refused_restart_leaves_the_rank_table_alone(
    job: JobRef, volcano_restart: str, only: tuple[str, ...], restart_write: str
) -> None:
    """The Command or the deletions refused (403): no reset is sent, and the plan says why."""
    writer = RestartFake(listed=PODS, refuse=frozenset({restart_write}), left=())
    plan = await _restart(writer, job, volcano_restart, only)
    assert plan.result.outcome is Outcome.FAILED
    assert "rings start" not in writer.log
    assert plan.rings.action == RINGS_SKIPPED
    assert plan.rings.outcome is Outcome.ALREADY_DONE


@pytest.mark.parametrize(
    ("job", "volcano_restart", "only", "restart_write"),
    [
        pytest.param(JOB_VC, "command", (), "command", id="volcano-command"),
        pytest.param(JOB_VC, "delete-pods", (), "delete", id="volcano-delete-pods"),
        pytest.param(JOB_AC, "command", (), "delete", id="ascendjob"),
        pytest.param(JOB_VC, "command", ("job-worker-1",), "delete", id="pod-level"),
    ],
)
async def test_an_accepted_restart_resets_the_rank_table_after_its_answer(
    job: JobRef, volcano_restart: str, only: tuple[str, ...], restart_write: str
) -> None:
    writer = RestartFake(listed=PODS, left=())
    plan = await _restart(writer, job, volcano_restart, only)
    assert plan.result.outcome is Outcome.DONE
    assert plan.rings.outcome is Outcome.DONE
    assert writer.log.index("rings start") > writer.log.index(f"{restart_write} end")
    assert writer.log.count("rings start") == 1


async def test_a_dry_run_goes_through_the_reset_too() -> None:
    """A dry run writes nothing but logs every write it would make, the reset included."""
    writer = RestartFake(listed=PODS, left=(), dry_run=True)
    plan = await _restart(writer, JOB_VC)
    assert plan.result.outcome is Outcome.DRY_RUN
    assert plan.rings.outcome is Outcome.DRY_RUN
