"""Follow-ups: what comes after a restart was sent, in tasks of their own.

Force mode after a RestartJob Command: the old pods go at once (grace 0) once Volcano took the Command (the job's
version moved on) and its kill deleted the job's PodGroup. Grace mode: the old pods still there after
``policy.grace_over_time_s`` are force-deleted (sooner on a down node, or once the job's heartbeat reports a
checkpoint newer than the fault). A new leader starts again the follow-ups of a restart its predecessor sent
(:meth:`FollowUps.resume`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import replace

import structlog

from agent.actions import Outcome, PodRef, RestartPlan, error_detail, finish_force, finish_grace_wait
from agent.core.checkpoint_wait import GraceWait
from agent.core.cluster import FaultScheduling, JobKind, JobRecord, node_is_down
from agent.core.incidents import Incident
from agent.core.policy import Action, volcano_deletion_outdated, volcano_restart_by_deletion
from agent.engine.checkpoints import CheckpointWaits
from agent.engine.context import EngineContext
from agent.engine.views import job_ref
from agent.kube.errors import KubeError

log = structlog.get_logger(__name__)

CACHE_POLL_S = 0.25
"""How often the force follow-up looks at the watch cache for Volcano's new job version, seconds (a dict read; a
timer per restart in flight, so hundreds of restarts at once stay cheap)."""
READ_EVERY = 4
"""The force follow-up also reads the job from the apiserver on its first poll and every READ_EVERY-th (1 s)."""
RESTARTS = (Action.RESTART_JOB.value, Action.RESTART_PODS.value)
"""The incident actions whose restart may need a follow-up."""


class FollowUps:
    """Starts the follow-ups of restarts (see the module docstring).

    Args:
        ctx: the engine's shared parts (writer, watch cache, tasks, clock, metrics).
        checkpoints: the checkpoint-aware graceful waits (a grace follow-up ends sooner after a checkpoint).
    """

    def __init__(self, ctx: EngineContext, checkpoints: CheckpointWaits) -> None:
        self.ctx = ctx
        self.checkpoints = checkpoints

    def start(self, job: JobRecord, plan: RestartPlan, restarting: Incident, podgroup_uid: str | None = None) -> None:
        """The follow-ups `plan` (a restart just sent for `restarting`, the incident now ``restarting``) needs.
        `podgroup_uid`: the job's PodGroup in the watch cache just before a RestartJob Command was sent (None: none
        cached, or no Command), which Volcano's kill for it deletes last (:meth:`_once_podgroup_gone`)."""
        ctx = self.ctx
        if plan.needs_grace_follow_up:
            follow_up = self._grace(job, plan.pods, restarting, ctx.settings.policy.grace_over_time_s)
            ctx.tasks(follow_up, f"grace:{restarting.id}")
        if plan.needs_force_follow_up:
            follow_up = self._force(job, plan.pods, plan.version, restarting.id, podgroup_uid)
            ctx.tasks(follow_up, f"grace:{restarting.id}:force")

    def resume(self, job: JobRecord, incident: Incident) -> None:
        """Start again the follow-ups of `incident`'s restart, which a previous leader sent (the incident is
        ``restarting``, read back from the job's record): that leader's follow-up tasks ended with it, and
        nothing else removes the old pods it was to force (Volcano's deletion honours their grace period, which
        never ends on a dead node; a stuck-terminating fault only joins the open incident). The pods are those of
        the job still in the watch cache whose UIDs the ledger records as stopped by the agent. Force mode after a
        RestartJob Command: deleted with grace 0 once the job's version moved on from the incident's generation
        (pod deletions in force mode were grace 0 already: nothing to follow up). Grace mode: force-deleted once
        ``policy.grace_over_time_s`` has passed since the restart (at once when it has). Nothing in dry-run."""
        ctx = self.ctx
        if ctx.writer.dry_run or incident.action not in RESTARTS:
            return
        stopped = set(ctx.store.ledger(job.uid).agent_pod_uids)
        records = [p for p in ctx.state.pods_of_job(job.kind, job.namespace, job.name) if p.uid in stopped]
        pods = tuple(sorted((PodRef(p.namespace, p.name, p.uid) for p in records), key=lambda p: p.name))
        if not pods:
            return
        log.info("resuming the follow-up of a previous leader's restart", incident=incident.id, pods=len(pods))
        if incident.mode == FaultScheduling.GRACE.value:
            since = (ctx.clock.now() - (incident.restart_at or ctx.clock.now())).total_seconds()
            wait_s = max(0.0, ctx.settings.policy.grace_over_time_s - since)
            ctx.tasks(self._grace(job, pods, incident, wait_s), f"grace:{incident.id}")
            return
        # a job restarted by deletion got a Command when all its pods were older than the job at the decision (its
        # generation; agent.engine.sending Sending._by_command): the stopped pods say so. Taken for one when the job
        # was not Running then (a deletion), the force follow-up only finds its grace-0 deletions' pods gone.
        versions = [p.job.version if p.job is not None else "" for p in records]
        at_decision = replace(job, phase="Running", version=incident.generation)
        command = (
            job.kind is JobKind.VOLCANO
            and incident.action == Action.RESTART_JOB.value
            and (
                not volcano_restart_by_deletion(job, ctx.settings.policy.volcano_restart)
                or volcano_deletion_outdated(at_decision, versions)
            )
        )
        if command:
            ctx.tasks(self._force(job, pods, incident.generation, incident.id), f"grace:{incident.id}:force")

    async def _force(
        self, job: JobRecord, pods: tuple[PodRef, ...], version: str, incident_id: str, podgroup_uid: str | None = None
    ) -> None:
        """Force mode after a RestartJob Command: the old `pods` go at once (grace 0) once Volcano took it (the
        job's version is no longer `version`, the one before the Command; "" reads it first) and, when
        `podgroup_uid` names the job's PodGroup as the watch cache held it before the Command was sent, once that
        PodGroup is gone from the cache too (:meth:`_once_podgroup_gone`; finish_force's 10 s bound still applies).

        With "" the version read may already be the one after the Command (Volcano took it before the read): the
        pods go at once when each carries the job version it was created under (volcano.sh/job-version) and none is
        the version read. A read with no version is version 0 (:func:`_volcano_version`): the pods of a job never
        restarted before carry "0" and wait for Volcano like any others. Deleting a pod of an older version than the
        job's never restarts it again: Volcano turns the request into a sync (``volcano.sh/volcano`` v1.14.1
        ``pkg/controllers/job/job_controller_util.go`` ``applyPolicies``: a request whose JobVersion is below
        ``status.version``). Pods without a version wait for the version read to change, as before.

        So do the pods of a job restarted by a Command because all of them were older than the job's proven
        `version` (agent.engine.sending ``Sending._by_command``, agent.core.policy.volcano_deletion_outdated): they
        go at once instead of after Volcano's queue (a run with 3 such restarts in 120: the first pod terminating
        p99 4.9 s); Volcano re-syncs for them and its ``RestartJob`` for the Command counts the restart all the
        same, killing what the sync made."""
        try:
            read_version: Callable[[], Awaitable[str | None]] | None = None  # the apiserver's (a GET every 0.25 s)
            older = bool(version) and _all_older(pods, version)
            if older:  # the Command for pods older than the job (below): they go before Volcano takes it
                read_version = _moved_on
            elif version:  # the GET sent with the restart proved it current: follow the watch cache, read seldom
                read_version = self._version_reader(job, version)
            else:  # the cached version was not proven (or the job had none): read it
                version = await self.ctx.writer.job_version(job_ref(job)) or ""
                if pods and all(p.version and p.version != _volcano_version(version) for p in pods):  # it is gone
                    read_version = _moved_on
            if podgroup_uid is not None and not older:
                base = read_version or functools.partial(self.ctx.writer.job_version, job_ref(job))
                read_version = self._once_podgroup_gone(job, podgroup_uid, version, base)
            result = await finish_force(
                self.ctx.writer, job_ref(job), pods, incident=incident_id, version=version,
                read_version=read_version, poll_s=CACHE_POLL_S,
            )  # fmt: skip
        except KubeError as e:  # a failed read: Volcano's deletion still applies
            log.warning("force follow-up failed", incident=incident_id, error=error_detail(e))
            return
        except Exception:  # last resort of the follow-up task: a bug must not end the agent's task group
            log.exception("force follow-up failed", incident=incident_id)
            self.ctx.metrics.action("force-after-command", Outcome.FAILED.value)
            return
        self.ctx.metrics.action("force-after-command", result.outcome.value)
        log.info("force follow-up", incident=incident_id, outcome=result.outcome.value, detail=result.detail)

    def _once_podgroup_gone(
        self, job: JobRecord, podgroup_uid: str, version: str, read: Callable[[], Awaitable[str | None]]
    ) -> Callable[[], Awaitable[str | None]]:
        """`read` (the force follow-up's version read) that keeps answering `version` (not taken yet) while the
        job's PodGroup with UID `podgroup_uid` is still in the watch cache after the version moved on.

        Why: Volcano's ``killJob`` for the Command deletes the pods, writes the job's status (the new version), and
        only then deletes the job's PodGroup (``volcano.sh/volcano`` v1.14.1
        ``pkg/controllers/job/job_controller_actions.go`` ``killPods``). Pods that vanish at once in between (a
        grace-0 deletion removes a pod from the apiserver without waiting for its kubelet) send the controller their
        events before it has seen its own deletion of the PodGroup; its syncs then find the PodGroup Pending and keep
        the kill's ``status.terminating``, and as its PodGroup informer has no delete handler no later event moves
        the job on: Restarting with no pods and no PodGroup for good (the GPU e2e flake, 2026-12-06, which the
        testbed's instant pod ends triggered). Waiting until the watch shows the PodGroup deleted (tens of ms after
        the version) leaves the controller's syncs to a job without a PodGroup, which it recreates."""

        async def read_after_group() -> str | None:
            current = await read()
            if current == version:
                return current
            group = self.ctx.state.podgroup_of(job)
            if group is not None and group.uid == podgroup_uid:
                return version  # taken: the kill has not deleted the PodGroup yet (or the watch has not shown it)
            return current

        return read_after_group

    def _version_reader(self, job: JobRecord, version: str) -> Callable[[], Awaitable[str | None]]:
        """What the force follow-up polls (every CACHE_POLL_S) for the job's version after the Command, when
        `version` is the cached one the GET sent with the restart proved current: the watch cache's (None when the
        job, with this UID, is gone from it), and the apiserver's on the first poll and every READ_EVERY-th after it
        while the cache still shows `version` (a watch that lags, or a fake world in which nothing updates the
        cache).
        The cache only moves forward, so its version differing from `version` means the job's changed."""
        polls = 0

        async def read() -> str | None:
            nonlocal polls
            rec = self.ctx.state.job(job.kind, job.namespace, job.name)
            cached = rec.version if rec is not None and rec.uid == job.uid else None
            if cached != version:
                return cached
            polls += 1
            if polls % READ_EVERY == 1:
                return await self.ctx.writer.job_version(job_ref(job))
            return cached

        return read

    def _on_down_nodes(self, pods: tuple[PodRef, ...]) -> tuple[PodRef, ...]:
        """Those of `pods` still in the cache whose node is down (agent.core.cluster.node_is_down): they cannot exit
        gracefully, so the grace follow-up forces them at once (issue 36, 6)."""
        state = self.ctx.state
        out = []
        for p in pods:
            rec = state.pods.get(f"{p.namespace}/{p.name}")
            if rec is not None and rec.uid == p.uid and rec.node and node_is_down(state.nodes.get(rec.node)):
                out.append(p)
        return tuple(out)

    async def _grace(self, job: JobRecord, pods: tuple[PodRef, ...], incident: Incident, wait_s: float) -> None:
        """Grace mode: after `wait_s` seconds (grace-over-time, or what is left of it), force-delete those of the
        job's `pods` that are still there; sooner when the job's heartbeat reports a checkpoint newer than the fault
        (agent.engine.checkpoints)."""
        incident_id = incident.id
        checkpointed = self.checkpoints.check(job, incident)
        try:
            finished = await finish_grace_wait(
                self.ctx.writer, job_ref(job), pods, incident=incident_id, grace_over_time_s=wait_s,
                on_down_nodes=self._on_down_nodes, checkpointed=checkpointed,
                poll_s=CACHE_POLL_S if checkpointed is not None else 1.0,  # a checkpoint: looked for in the cache
            )  # fmt: skip
        except KubeError as e:  # a failed read of a pod: the deadline still applies
            log.warning("grace follow-up failed", incident=incident_id, error=error_detail(e))
            return
        except Exception:  # last resort of the follow-up task: a bug must not end the agent's task group
            log.exception("grace follow-up failed", incident=incident_id)
            self.ctx.metrics.action("force-after-grace", Outcome.FAILED.value)
            return
        result = finished.result
        self.checkpoints.ended(job, incident_id, GraceWait.GRACE_OVER_TIME, finished.ended, finished.waited_s)
        self.ctx.metrics.action("force-after-grace", result.outcome.value)
        log.info("grace follow-up", incident=incident_id, outcome=result.outcome.value, detail=result.detail)


async def _moved_on() -> str | None:
    """The version read of a force follow-up that need not wait for Volcano: None (finish_force waits no more)."""
    return None


def _volcano_version(read: str) -> str:
    """The Volcano job version `read` (``status.version`` as text, "" when absent) as its pods'
    ``volcano.sh/job-version`` annotation spells it: "" is "0", since Volcano omits the field while it is 0
    (``volcano.sh/apis`` v1.14.0 ``pkg/apis/batch/v1alpha1/job.go`` ``JobStatus.Version``,
    ``json:"version,omitempty"``) and creates a new job's pods with "0" (``volcano.sh/volcano`` v1.14.1
    ``pkg/controllers/job/job_controller_util.go`` ``createJobPod``). Taking "" for a version of its own made the
    force follow-up delete a never-restarted job's pods with grace 0 before Volcano's ``killJob`` for the Command
    had run, which could leave the job Restarting with no pods (tests/unit/engine/test_force_follow_up_version_zero.py).
    """
    return read or "0"


def _all_older(pods: tuple[PodRef, ...], version: str) -> bool:
    """Whether every one of `pods` carries a ``volcano.sh/job-version`` below the job's `version` (numbers as text;
    False when any is not a number, or for no pods)."""
    if not pods or not version.isdigit():
        return False
    return all(p.version.isdigit() and int(p.version) < int(version) for p in pods)
