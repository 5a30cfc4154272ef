"""Carrying out a restart decision with the writer: the order of writes for each job kind and mode.

1. Reset ``rings-config-<job>`` to ``{"status":"initializing"}`` so the new pods wait for a fresh rank table.
2. Volcano Job with ``policy.volcano_restart=command`` and a whole-job restart: the job's pods (the caller's
   cache, or a list) and ``status.version`` are read while step 1 runs, then one ``RestartJob`` Command is sent
   (two apiserver round trips from decision to Command). Volcano's controller deletes the pods honouring their
   grace period, so in ``force`` mode :func:`finish_force` deletes the listed pods with grace 0 and a UID
   precondition (404/409: already gone) once Volcano has taken the Command (the job's ``status.version`` moved
   on; deleting them before would make Volcano see evictions of the current version and restart the job a
   second time); in ``grace`` mode :func:`finish_grace` forces those still there after ``grace-over-time``.
3. Otherwise delete pods (the job's, or only the decision's pods for pod rescheduling), each with a UID
   precondition: ``force`` → grace 0 at once; ``grace`` → normal deletion now, and :func:`finish_grace`
   force-deletes the ones still there (same UID) after ``grace-over-time``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from agent.actions.results import ActionResult, Outcome, combine
from agent.actions.writer import PodRef
from agent.core.cluster import FaultScheduling, JobKind, JobRef


class RestartWriter(Protocol):
    """The writes and reads a restart needs (:class:`agent.actions.writer.ClusterWriter` implements them)."""

    @property
    def dry_run(self) -> bool: ...
    async def list_job_pods(self, job: JobRef) -> list[PodRef]: ...
    async def job_version(self, job: JobRef) -> str | None: ...
    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult: ...
    async def reset_rings_config(self, namespace: str, job_name: str, *, incident: str) -> ActionResult: ...
    async def delete_pod(self, pod: PodRef, *, incident: str, grace_seconds: int | None) -> ActionResult: ...
    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult: ...
    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]: ...


@dataclass(frozen=True, slots=True)
class RestartPlan:
    """What :func:`restart_job` did.

    Attributes:
        result: the combined result of the writes (rings reset failures are reported in `rings`, not here:
            a job without rings-config is still restarted).
        rings: the rings-config reset result.
        pods: the pods deleted (UIDs are never counted as business failures); for a Command restart, the
            job's pods listed before the Command (force mode deletes them at once after it).
        needs_grace_follow_up: grace mode: call :func:`finish_grace` after grace-over-time (also after a
            Command: Volcano's own deletions honour the grace period and may never finish on a dead node).
        needs_force_follow_up: force mode with a Command: call :func:`finish_force` with `version`.
        version: the job's ``status.version`` read before the Command ("" when it had none).
    """

    result: ActionResult
    rings: ActionResult
    pods: tuple[PodRef, ...]
    needs_grace_follow_up: bool
    needs_force_follow_up: bool = False
    version: str = ""


async def restart_job(
    writer: RestartWriter,
    job: JobRef,
    *,
    mode: FaultScheduling,
    incident: str,
    reason: str,
    only_pods: tuple[str, ...] = (),
    volcano_restart: str = "command",
    known_pods: Sequence[PodRef] | None = None,
) -> RestartPlan:
    """Restart `job` (or only the pods named in `only_pods`) as described in the module docstring.

    Args:
        mode: FORCE or GRACE (OFF is treated as FORCE: a caller only gets here with a restart decision).
        incident: the incident id for log lines and the Command's label.
        reason: the decision's reason, copied into the Command's message.
        only_pods: pod names for pod rescheduling; empty means the whole job.
        volcano_restart: "command" or "delete-pods" (``policy.volcano_restart``).
        known_pods: for a Volcano Command restart, the job's pods that are not terminating, from the caller's
            watch cache (None lists them). A pod missing from a stale cache is still restarted by Volcano's
            Command (only the forced follow-up skips it); one already gone is a 404 on its UID-conditioned
            delete. Pod deletions without a Command always list: there a missed pod would not restart at all.

    Raises:
        ApiException: listing the job's pods or reading the job failed (the caller retries the incident later).
    """

    async def cached_or_listed() -> list[PodRef]:
        return list(known_pods) if known_pods is not None else await writer.list_job_pods(job)

    grace = mode is FaultScheduling.GRACE
    if job.kind is JobKind.VOLCANO and volcano_restart == "command" and not only_pods:
        # Volcano's controller deletes the pods honouring their grace period. The pods of this generation and the
        # job's version are read before the Command: force mode deletes those pods at once once Volcano took it
        # (fault-scheduling=force), grace mode forces those still there after grace-over-time.
        rings, version, pods = await asyncio.gather(
            writer.reset_rings_config(job.namespace, job.name, incident=incident),
            writer.job_version(job),
            cached_or_listed(),
        )
        version = version or ""
        result = await writer.restart_command(job, incident=incident, reason="FaultAgentRestart", message=reason)
        sent = result.outcome in (Outcome.DONE, Outcome.ALREADY_DONE)
        return RestartPlan(
            result, rings, tuple(pods), grace and bool(pods) and sent, not grace and bool(pods) and sent, version
        )
    rings, pods = await asyncio.gather(
        writer.reset_rings_config(job.namespace, job.name, incident=incident), writer.list_job_pods(job)
    )
    if only_pods:
        pods = [p for p in pods if p.name in set(only_pods)]
    result = await writer.delete_pods(pods, incident=incident, grace_seconds=None if grace else 0, target=str(job))
    return RestartPlan(result, rings, tuple(pods), grace and result.outcome is not Outcome.DRY_RUN and bool(pods))


async def finish_force(
    writer: RestartWriter,
    job: JobRef,
    pods: tuple[PodRef, ...],
    *,
    incident: str,
    version: str,
    wait_s: float = 10.0,
    poll_s: float = 0.25,
) -> ActionResult:
    """Force mode after a RestartJob Command: wait until the job's ``status.version`` differs from `version`
    (Volcano has taken the Command; at most `wait_s` seconds, then go on: a controller that does not answer must
    not keep a force-mode job's pods alive), then delete those of `pods` still there with grace 0 and a UID
    precondition. ALREADY_DONE when all are gone.

    Raises:
        asyncio.CancelledError: when cancelled while waiting (always re-raised).
        ApiException: reading the job or a pod failed with something other than 404.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while loop.time() < deadline:
        current = await writer.job_version(job)
        if current is None or current != version:
            break
        await asyncio.sleep(poll_s)
    left = await writer.pods_remaining(pods)
    if not left:
        return ActionResult("force-after-command", str(job), Outcome.ALREADY_DONE, "all pods gone")
    return await writer.delete_pods(left, incident=incident, grace_seconds=0, target=str(job))


async def finish_grace(
    writer: RestartWriter, job: JobRef, pods: tuple[PodRef, ...], *, incident: str, grace_over_time_s: float
) -> ActionResult:
    """After `grace_over_time_s` seconds, force-delete (grace 0, UID precondition) those of `pods` that still
    exist: the job has not restarted in time. ALREADY_DONE when all are gone.

    Raises:
        asyncio.CancelledError: when cancelled while waiting (always re-raised).
        ApiException: reading a pod failed with something other than 404.
    """
    await asyncio.sleep(grace_over_time_s)
    left = await writer.pods_remaining(pods)
    if not left:
        return ActionResult("force-after-grace", str(job), Outcome.ALREADY_DONE, "all pods exited in time")
    results = [await writer.delete_pod(p, incident=incident, grace_seconds=0) for p in left]
    return combine("force-after-grace", str(job), results)
