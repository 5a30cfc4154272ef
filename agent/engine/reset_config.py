"""reset-config-<job>, the ConfigMap a MindCluster job's training processes read (TaskD): written as
MindCluster's plugin writes it, through the writer port.

MindCluster: ``component/ascend-for-volcano/plugin/job.go`` ``updateResetConfigMap``/``updateResetCm`` (the
pod-level update once the pods are back), ``internal/rescheduling/reschedule.go``
``updateResetConfigMapWithGraceExit`` (``GracefulExit`` around a graceExit restart). The data's shape and rules
are pure, in :mod:`agent.core.resetconfig`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable

import structlog

from agent.actions import ActionResult, Outcome, error_detail
from agent.core.checkpoint_wait import GraceWait, WaitEnded
from agent.core.cluster import JobRecord, PodRecord
from agent.core.fence import NotLeader
from agent.core.incidents import Incident
from agent.core.resetconfig import CHANGE_GRACE_EXIT_ON, ResetConfigUpdate
from agent.engine.checkpoints import CheckpointWaits
from agent.engine.context import EngineContext
from agent.kube.errors import KubeError

log = structlog.get_logger(__name__)


class ResetConfigWriting:
    """Writes of one job's ``reset-config-<job>``: one update (:meth:`write`) and the graceExit wait
    (:meth:`grace_exit`). Nothing here stops a restart: every failure is a logged, counted result."""

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx

    async def write(
        self, job: JobRecord, incident_id: str, change: str, *, pod_level: bool = False, since_s: int = 0
    ) -> ActionResult:
        """Hand one :class:`~agent.core.resetconfig.ResetConfigUpdate` of `job`'s ``reset-config-<job>`` to the
        writer port (`pod_level`, `since_s`: its fields) and count it
        (``fault_agent_actions_total{action="reset-config-<change>"}``). A missing ConfigMap (the job was submitted
        without one) is logged as a warning naming it and counted with result ``missing``; unreadable data with
        ``unreadable``; neither stops the restart."""
        ctx = self.ctx
        update = ResetConfigUpdate(
            job.namespace, job.name, change, pod_level=pod_level, now_s=int(ctx.clock.now().timestamp()),
            since_s=since_s,
        )  # fmt: skip
        try:
            result = await ctx.writer.update_reset_config(update, incident=incident_id)
        except NotLeader:
            raise
        except KubeError as e:  # a failed request the writer did not turn into a result: never stop the restart
            detail = error_detail(e)[:300]
            result = ActionResult(f"reset-config-{change}", update.name, Outcome.FAILED, detail, True, 0)
        counted = result.outcome.value
        if result.outcome is Outcome.FAILED:
            counted = "missing" if result.status == 404 else "unreadable" if result.status is None else counted
            if counted == "missing":
                log.warning(
                    "job has no reset-config ConfigMap: its training processes are not told; create it with the "
                    "job (fault-agent submit does, fault-agent lint flags its absence)",
                    incident=incident_id, job=f"{job.namespace}/{job.name}", configmap=update.name, change=change,
                )  # fmt: skip
            else:
                log.warning("reset-config not written", incident=incident_id, configmap=update.name,
                            change=change, detail=result.detail)  # fmt: skip
        ctx.metrics.action(f"reset-config-{change}", counted)
        return result

    async def grace_exit(
        self, job: JobRecord, incident_id: str, checkpoints: CheckpointWaits | None = None,
        incident: Incident | None = None,
    ) -> None:  # fmt: skip
        """``GracefulExit`` 1, then wait up to ``policy.grace_exit_wait_s`` (polling the pod cache every
        0.25 s) until no pod of the job shows running training processes (each is gone, Succeeded/Failed, or not
        Ready: :func:`_processes_running`): they saved their checkpoint and exited; or, for a job whose heartbeat
        `checkpoints` follows (`incident` given), until it reports a checkpoint newer than the fault
        (agent.core.checkpoint_wait): the save is done, the grace deletion stops what is left.
        Counted as ``grace-exit-wait`` ``exited`` / ``checkpoint`` / ``timeout`` / ``skipped`` (the flag could not
        be set: nobody would exit, so the deletion is not delayed); the first three also as
        ``fault_agent_grace_wait_seconds{wait="grace-exit"}``."""
        ctx = self.ctx
        result = await self.write(job, incident_id, CHANGE_GRACE_EXIT_ON)
        wait_s = ctx.settings.policy.grace_exit_wait_s
        if result.outcome not in (Outcome.DONE, Outcome.ALREADY_DONE) or wait_s <= 0:
            ctx.metrics.action("grace-exit-wait", "skipped")
            return
        checkpointed = checkpoints.check(job, incident) if checkpoints is not None and incident is not None else None
        began = ctx.clock.monotonic()
        uids = {p.uid for p in ctx.state.pods_of_job(job.kind, job.namespace, job.name)}
        poll_s = 0.25
        ended = WaitEnded.TIMEOUT
        for _ in range(max(1, math.ceil(wait_s / poll_s))):
            if not _processes_running(ctx.state.pods_of_job(job.kind, job.namespace, job.name), uids):
                log.info("graceful exit: the job's processes exited", incident=incident_id)
                ended = WaitEnded.EXITED
                break
            if checkpointed is not None and checkpointed():
                log.info("graceful exit: the job reported a checkpoint newer than the fault", incident=incident_id)
                ended = WaitEnded.CHECKPOINT
                break
            await asyncio.sleep(poll_s)
        else:
            log.warning(
                "graceful exit: the job's processes did not exit in time; grace deletion now",
                incident=incident_id, job=f"{job.namespace}/{job.name}", wait_s=wait_s,
            )  # fmt: skip
        ctx.metrics.action("grace-exit-wait", ended.value)
        if checkpoints is not None:
            checkpoints.ended(job, incident_id, GraceWait.GRACE_EXIT, ended, ctx.clock.monotonic() - began)


def _processes_running(pods: Iterable[PodRecord], uids: set[str]) -> bool:
    """Whether any of the pods with these UIDs may still run its training processes: still there, neither
    Succeeded nor Failed, and Ready. A pod whose processes exited but whose container stays (TaskD's manager kills
    the workers on ``GracefulExit`` 1 and keeps running: component/taskd .../ms_mgr/msrun_plugin.py
    ``_handle_grace_exit``) shows it by turning not Ready (the job's readiness probe on the training process)."""
    return any(pod.uid in uids and pod.phase not in ("Succeeded", "Failed") and pod.ready for pod in pods)
