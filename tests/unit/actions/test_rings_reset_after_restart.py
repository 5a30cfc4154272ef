"""The rings-config reset goes out only once the restart itself was accepted (issue 36, item 8).

MindCluster's rescheduler never writes ``rings-config-<job>``; the Ascend Operator fills it for Volcano Jobs and
AscendJobs and resets it itself when the pods go, writing only when the pod set changes
(``component/ascend-operator/pkg/controllers/v1/pod.go`` ``handleCompletedRankTable``, ``saveRankTableConfigmap``).
A reset of ours that lands while the restart does not would leave ``initializing`` under running pods for good.
The writer is a fake of the restart's writer port (agent.actions.recovery.RestartWriter) that logs each write's
start and end and can refuse the Command or the deletions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from agent.actions import ActionResult, Outcome, PodRef, restart_job
from agent.actions.recovery import RINGS_SKIPPED
from agent.core.cluster import FaultScheduling, JobKind, JobRef

JOB_VC = JobRef(JobKind.VOLCANO, "train", "job", "uid-job")
JOB_AC = JobRef(JobKind.ASCEND, "train", "job", "uid-job")
PODS = [PodRef("train", f"job-worker-{i}", f"uid-{i}", version="0") for i in range(2)]


class Writer:
    """Answers every write with `outcome` unless it is in `refuse` (then FAILED, 403); logs "<write> start/end"."""

    def __init__(self, refuse: frozenset[str] = frozenset(), *, dry_run: bool = False) -> None:
        self.refuse = refuse
        self.dry_run = dry_run
        self.log: list[str] = []

    async def _write(self, name: str) -> ActionResult:
        self.log.append(f"{name} start")
        await asyncio.sleep(0)
        self.log.append(f"{name} end")
        if name in self.refuse:
            return ActionResult(name, "x", Outcome.FAILED, "forbidden", status=403)
        return ActionResult(name, "x", Outcome.DRY_RUN if self.dry_run else Outcome.DONE)

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        return list(PODS)

    async def job_version(self, job: JobRef) -> str | None:
        return "0"

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        return await self._write("command")

    async def reset_rings_config(self, namespace: str, job_name: str, *, incident: str) -> ActionResult:
        return await self._write("rings")

    async def delete_pod(self, pod: PodRef, *, incident: str, grace_seconds: int | None) -> ActionResult:
        return await self._write("delete")

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        return await self._write("delete")

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        return []


async def _restart(writer: Writer, job: JobRef, volcano_restart: str = "command", only: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
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
    writer = Writer(refuse=frozenset({restart_write}))
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
    writer = Writer()
    plan = await _restart(writer, job, volcano_restart, only)
    assert plan.result.outcome is Outcome.DONE
    assert plan.rings.outcome is Outcome.DONE
    assert writer.log.index("rings start") > writer.log.index(f"{restart_write} end")
    assert writer.log.count("rings start") == 1


async def test_a_dry_run_goes_through_the_reset_too() -> None:
    """A dry run writes nothing but logs every write it would make, the reset included."""
    writer = Writer(dry_run=True)
    plan = await _restart(writer, JOB_VC)
    assert plan.result.outcome is Outcome.DRY_RUN
    assert plan.rings.outcome is Outcome.DRY_RUN
