"""Carrying out a restart decision with the writer: the order of writes for each job kind and mode.

The engine's restart is one apiserver round trip after the decision: every write below goes out at once,
together with the job's claim (agent.engine.sending explains why no order in which they land, or crash between
them, restarts a job twice or loses its incident).

1. Reset ``rings-config-<job>`` to ``{"status":"initializing"}`` so the new pods wait for a fresh rank table,
   only once the restart itself was accepted (the Command created, or a first pod deletion answered): a reset
   that lands when the restart does not would leave ``initializing`` under running pods, and the Ascend
   Operator, which fills the rank table for Volcano Jobs and AscendJobs and writes only when its pods change
   (``component/ascend-operator/pkg/controllers/v1/pod.go`` ``handleCompletedRankTable``,
   ``saveRankTableConfigmap``), would never write ``completed`` again (docs/mindcluster-parity.md, "The rank
   table"). The reset is one round trip after the restart's own writes, long before the new pods are placed
   and the operator writes the new table.
2. Volcano Job with ``policy.volcano_restart=command`` and a whole-job restart: one ``RestartJob`` Command,
   sent at once; step 1 when it is answered. The job's pods and ``status.version`` come from the caller's watch
   cache (given `version`; without it the version is read first, one more round trip). Volcano's controller deletes the
   pods honouring their grace period, so in ``force`` mode :func:`finish_force` deletes the listed pods with
   grace 0 and a UID precondition (404/409: already gone) once Volcano has taken the Command (the job's
   ``status.version`` moved on; deleting them before would make Volcano see evictions of the current version
   and restart the job a second time); in ``grace`` mode :func:`finish_grace` forces those still there after
   ``grace-over-time``.
3. Otherwise delete pods (the job's, or only the decision's pods for pod rescheduling), each with a UID
   precondition: ``force`` → grace 0 at once; ``grace`` → normal deletion now, and :func:`finish_grace`
   force-deletes the ones still there (same UID) after ``grace-over-time``. The pods the caller's cache knows
   are deleted at once, together with a list of the job's pods, and step 1 follows their answer; a listed pod
   the cache did not know yet is deleted when the list answers (a missed pod would not restart at all).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from agent.actions.results import ActionResult, Outcome, combine
from agent.actions.writer import PodRef
from agent.core.checkpoint_wait import WaitEnded
from agent.core.cluster import FaultScheduling, JobKind, JobRef
from agent.core.fence import NotLeader

_T = TypeVar("_T")


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
        rings: the rings-config reset result; ``rings-reset-skipped`` (ALREADY_DONE) when the restart was not
            accepted, so nothing was reset.
        pods: the pods deleted (UIDs are never counted as business failures); for a Command restart, the
            job's pods listed before the Command (force mode deletes them at once after it).
        needs_grace_follow_up: grace mode: call :func:`finish_grace` after grace-over-time (also after a
            Command: Volcano's own deletions honour the grace period and may never finish on a dead node).
        needs_force_follow_up: force mode with a Command: call :func:`finish_force` with `version`.
        version: the job's ``status.version`` before the Command, as given or read ("" when it had none).
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
    version: str | None = None,
    command_sent: Callable[[], None] | None = None,
) -> RestartPlan:
    """Restart `job` (or only the pods named in `only_pods`) as described in the module docstring.

    Args:
        mode: FORCE or GRACE (OFF is treated as FORCE: a caller only gets here with a restart decision).
        incident: the incident id for log lines and the Command's label.
        reason: the decision's reason, copied into the Command's message.
        only_pods: pod names for pod rescheduling; empty means the whole job.
        volcano_restart: "command" or "delete-pods": how a whole-job restart of a Volcano Job is made (the
            engine resolves ``policy.volcano_restart`` ``auto`` per job: agent.core.policy.volcano_restart_by_deletion).
        known_pods: the job's pods that are not terminating, from the caller's watch cache (None lists them
            first). For a Volcano Command restart a pod missing from a stale cache is still restarted by the
            Command (only the forced follow-up skips it); for pod deletions the job's pods are listed as well,
            concurrently, and those the cache missed are deleted when the list answers. A pod already gone is a
            404 on its UID-conditioned delete.
        version: the job's ``status.version`` the decision saw (the watch cache), for :func:`finish_force`;
            None reads it from the apiserver before the Command (one round trip more). A cached version may be
            stale: the caller proves it with the claim's resourceVersion precondition, or reads it again.
        command_sent: called once the RestartJob Command may have reached the apiserver: its create was taken
            (DONE, ALREADY_DONE, or a lost answer the writer counts as DONE) or cut short in flight (cancelled, an
            unexpected error). Not called when nothing was sent (the lease fence refused it: NotLeader) or the
            apiserver refused it (FAILED). Volcano deletes a Command once it ran it, so the caller must not create
            one of the same name again (agent.engine.inflight.RestartsInFlight.command_sent).

    Raises:
        KubeError: listing the job's pods or reading the job failed (the caller retries the incident later).
    """
    grace = mode is FaultScheduling.GRACE
    if job.kind is JobKind.VOLCANO and volcano_restart == "command" and not only_pods:
        if version is None or known_pods is None:  # no cache given: read what the follow-ups need first
            read_version, pods = await asyncio.gather(
                writer.job_version(job) if version is None else _given(version),
                writer.list_job_pods(job) if known_pods is None else _given(list(known_pods)),
            )
            version = read_version or ""
        else:
            pods = list(known_pods)
        # a task of its own, as the deletions below: writes the caller scheduled before (the claim) start first
        try:
            result = await asyncio.ensure_future(
                writer.restart_command(job, incident=incident, reason="FaultAgentRestart", message=reason)
            )
        except NotLeader:
            raise  # refused by the fence before it was sent (a later attempt's refusal returns a DONE result)
        except BaseException:
            if command_sent is not None:  # in flight when cut short: it may have landed
                command_sent()
            raise
        if command_sent is not None and result.outcome is not Outcome.FAILED:
            command_sent()
        rings = await _reset_rings_if_accepted(writer, job, incident, result)
        sent = result.outcome in (Outcome.DONE, Outcome.ALREADY_DONE)
        return RestartPlan(
            result, rings, tuple(pods), grace and bool(pods) and sent, not grace and bool(pods) and sent, version
        )
    wanted = set(only_pods)

    def chosen(pods: Sequence[PodRef]) -> list[PodRef]:
        return [p for p in pods if p.name in wanted] if only_pods else list(pods)

    grace_seconds = None if grace else 0

    async def delete(pods: Sequence[PodRef]) -> ActionResult:
        return await writer.delete_pods(pods, incident=incident, grace_seconds=grace_seconds, target=str(job))

    known = chosen(known_pods) if known_pods is not None else []
    first = asyncio.ensure_future(delete(known)) if known else None
    rings_write = asyncio.ensure_future(_reset_rings_after(writer, job, incident, first)) if first is not None else None
    # a task behind the deletions' (and the claim the caller scheduled before them): the deletions' requests leave
    # first, the list of the pods a stale cache missed after them (awaited directly, its request left first)
    listing = asyncio.ensure_future(writer.list_job_pods(job))
    try:
        listed = chosen(await listing)
    except BaseException:
        await asyncio.gather(*(f for f in (first, rings_write) if f is not None), return_exceptions=True)
        raise
    known_uids = {p.uid for p in known}
    missed = [p for p in listed if p.uid not in known_uids and not _made_after(p, known)]
    results = [await first] if first is not None else []
    if missed or not results:
        results.append(await delete(missed))
    result = results[0] if len(results) == 1 else combine("delete-pods", str(job), results)
    if rings_write is None:  # no pod was known before the list: the reset follows the listed pods' deletion
        rings = await _reset_rings_if_accepted(writer, job, incident, result)
    else:
        rings = await rings_write
    pods = sorted([*known, *missed], key=lambda p: p.name)
    return RestartPlan(result, rings, tuple(pods), grace and result.outcome is not Outcome.DRY_RUN and bool(pods))


def _made_after(pod: PodRef, known: Sequence[PodRef]) -> bool:
    """Whether `pod`, listed while the `known` pods were being deleted, is a replacement the job's controller
    made for them: its generation (PodRef.version) is newer than every known pod's. The Ascend Operator recreates a
    deleted pod at the next version within tens of milliseconds, before the list answers; deleting that pod too
    counted one restart twice against backoffLimit (seen against the real operator: docs/mindcluster-conformance.md,
    "With the agent", scenario b). Unknown versions never exclude a pod (a pod the cache missed is still stopped)."""
    if not pod.version.isdigit():
        return False
    versions = [int(p.version) for p in known if p.version.isdigit()]
    return bool(versions) and int(pod.version) > max(versions)


async def _given(value: _T) -> _T:
    return value


RINGS_SKIPPED = "rings-reset-skipped"
"""The action of the rings-config result when no reset was sent because the restart was not accepted."""


def restart_accepted(result: ActionResult) -> bool:
    """Whether the apiserver took the restart write `result` (created, deleted, or found already so), or it was
    a dry run (which writes nothing, the reset included)."""
    return result.outcome in (Outcome.DONE, Outcome.ALREADY_DONE, Outcome.DRY_RUN)


async def _reset_rings_if_accepted(
    writer: RestartWriter, job: JobRef, incident: str, restart: ActionResult
) -> ActionResult:
    """Reset `job`'s ``rings-config-<job>`` when `restart` was accepted, else send nothing (see the module
    docstring, step 1). Returns the reset's result, or an ALREADY_DONE :data:`RINGS_SKIPPED` result."""
    if restart_accepted(restart):
        return await writer.reset_rings_config(job.namespace, job.name, incident=incident)
    return ActionResult(
        RINGS_SKIPPED,
        f"ConfigMap/{job.namespace}/rings-config-{job.name}",
        Outcome.ALREADY_DONE,
        "not reset: the restart was not accepted, so the rank table still matches the running pods",
    )


async def _reset_rings_after(
    writer: RestartWriter, job: JobRef, incident: str, restart: Awaitable[ActionResult]
) -> ActionResult:
    """:func:`_reset_rings_if_accepted` once `restart` (the first deletions) answered; if it raised, nothing is
    reset (its caller raises the same exception)."""
    try:
        result = await restart
    except Exception:  # not handled here, only seen: the caller raises it from `restart` itself; the reset is skipped
        return await _reset_rings_if_accepted(writer, job, incident, ActionResult("", "", Outcome.FAILED))
    return await _reset_rings_if_accepted(writer, job, incident, result)


FOLLOW_UP_DELETES_IN_FLIGHT = 8
"""At most this many of a force follow-up's pod deletions are in flight at once (a big job's hundreds of pods
otherwise take the client's connection pool and the agent's API Priority and Fairness seats, and the next fault's
restart writes queue behind them: bench/RESULTS.md, the scale-apf rows)."""


async def finish_force(
    writer: RestartWriter,
    job: JobRef,
    pods: tuple[PodRef, ...],
    *,
    incident: str,
    version: str,
    wait_s: float = 10.0,
    poll_s: float = 0.25,
    read_version: Callable[[], Awaitable[str | None]] | None = None,
) -> ActionResult:
    """Force mode after a RestartJob Command: wait until the job's ``status.version`` differs from `version`
    (Volcano has taken the Command; at most `wait_s` seconds, then go on: a controller that does not answer must
    not keep a force-mode job's pods alive), then delete those of `pods` still there with grace 0 and a UID
    precondition, FOLLOW_UP_DELETES_IN_FLIGHT at a time. ALREADY_DONE when all are gone.

    The version is read every `poll_s` seconds with `read_version` (None when the job, with its UID, is gone),
    by default ``writer.job_version(job)`` (an apiserver GET). A caller whose `version` is what its watch cache
    held when the job's claim proved it current may pass a read of that cache instead: the cache only moves
    forward, so a version there that differs from `version` has changed on the apiserver too (a cache behind
    the apiserver makes the deletion later, never earlier).

    Raises:
        asyncio.CancelledError: when cancelled while waiting (always re-raised).
        KubeError: reading the job or a pod failed with something other than 404.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    read = read_version if read_version is not None else functools.partial(writer.job_version, job)
    while loop.time() < deadline:
        current = await read()
        if current is None or current != version:
            break
        await asyncio.sleep(max(0.0, min(poll_s, deadline - loop.time())))  # the deadline, not past it
    left = await writer.pods_remaining(pods)
    if not left:
        return ActionResult("force-after-command", str(job), Outcome.ALREADY_DONE, "all pods gone")
    if len(left) <= FOLLOW_UP_DELETES_IN_FLIGHT:
        return await writer.delete_pods(left, incident=incident, grace_seconds=0, target=str(job))
    results = []
    for i in range(0, len(left), FOLLOW_UP_DELETES_IN_FLIGHT):
        chunk = left[i : i + FOLLOW_UP_DELETES_IN_FLIGHT]
        results.append(await writer.delete_pods(chunk, incident=incident, grace_seconds=0, target=str(job)))
    return combine("delete-pods", str(job), results)


async def finish_grace(
    writer: RestartWriter,
    job: JobRef,
    pods: tuple[PodRef, ...],
    *,
    incident: str,
    grace_over_time_s: float,
    on_down_nodes: Callable[[tuple[PodRef, ...]], tuple[PodRef, ...]] | None = None,
    poll_s: float = 1.0,
) -> ActionResult:
    """:func:`finish_grace_wait` without a checkpoint check; only its action result."""
    waited = await finish_grace_wait(
        writer, job, pods, incident=incident, grace_over_time_s=grace_over_time_s, on_down_nodes=on_down_nodes,
        poll_s=poll_s,
    )  # fmt: skip
    return waited.result


@dataclass(frozen=True, slots=True)
class GraceFinished:
    """What :func:`finish_grace_wait` did: `result` (the force deletions), `ended` (why the wait ended:
    agent.core.checkpoint_wait.WaitEnded) and `waited_s` (seconds the wait lasted, the event loop's clock)."""

    result: ActionResult
    ended: WaitEnded
    waited_s: float


async def finish_grace_wait(
    writer: RestartWriter,
    job: JobRef,
    pods: tuple[PodRef, ...],
    *,
    incident: str,
    grace_over_time_s: float,
    on_down_nodes: Callable[[tuple[PodRef, ...]], tuple[PodRef, ...]] | None = None,
    checkpointed: Callable[[], bool] | None = None,
    poll_s: float = 1.0,
) -> GraceFinished:
    """After `grace_over_time_s` seconds, force-delete (grace 0, UID precondition) those of `pods` that still
    exist: the job has not restarted in time. ALREADY_DONE when all are gone.

    Meanwhile, every `poll_s` seconds, those of `pods` that `on_down_nodes` names (pods on a node that is gone,
    NotReady or unreachable: agent.core.cluster.node_is_down, read from the cache) are force-deleted at once: their
    kubelet does not answer, so they would never exit gracefully and the job would wait the whole
    grace-over-time (900 s by default) for nothing. And when `checkpointed` (also polled every `poll_s`) says the
    job reported a checkpoint newer than the fault (agent.core.checkpoint_wait.checkpoint_after_fault), the wait
    ends there: the job has saved, and the pods still there are forced at once. The wait is never longer than
    `grace_over_time_s`.

    ``ended``: ``checkpoint``; ``node-down`` (every pod was forced as on a down node); ``exited`` (the deadline
    came and no pod was left, none forced: the pods went on their own within the time; the wait itself does not
    watch for that and ran its full time); else ``timeout``.

    Raises:
        asyncio.CancelledError: when cancelled while waiting (always re-raised).
        KubeError: reading a pod failed with something other than 404.
    """
    loop = asyncio.get_running_loop()
    began = loop.time()
    deadline = began + grace_over_time_s
    forced: list[PodRef] = []
    results: list[ActionResult] = []
    polls = on_down_nodes is not None or checkpointed is not None
    ended = WaitEnded.TIMEOUT
    while (wait := deadline - loop.time()) > 0:
        await asyncio.sleep(min(wait, poll_s) if polls else wait)
        if on_down_nodes is not None:
            down = [p for p in on_down_nodes(pods) if p not in forced]
            for p in down:
                results.append(await writer.delete_pod(p, incident=incident, grace_seconds=0))
                forced.append(p)
            if len(forced) == len(pods):
                ended = WaitEnded.NODE_DOWN
                break
        if checkpointed is not None and checkpointed():
            ended = WaitEnded.CHECKPOINT
            break
    waited_s = max(0.0, loop.time() - began)
    left = await writer.pods_remaining(tuple(p for p in pods if p not in forced))
    if not left and not results:
        if ended is WaitEnded.TIMEOUT:
            ended = WaitEnded.EXITED
        done = ActionResult("force-after-grace", str(job), Outcome.ALREADY_DONE, "all pods exited in time")
        return GraceFinished(done, ended, waited_s)
    results += [await writer.delete_pod(p, incident=incident, grace_seconds=0) for p in left]
    return GraceFinished(combine("force-after-grace", str(job), results), ended, waited_s)
