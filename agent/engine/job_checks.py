"""The tick's checks of the watched jobs themselves, apart from any incident: a ``fault-retry-times`` label the
agent cannot use (reported once), and the ``subHealthyStrategy: hotSwitch`` waits (bounded by
``policy.hot_switch_wait_s``).
"""

from __future__ import annotations

import functools
from datetime import datetime

import structlog

from agent.core.cluster import JobRecord
from agent.core.correlate import correlate
from agent.core.detect.pods import OPE_TYPE_DELETE
from agent.core.faults import FaultKind, FaultLevel
from agent.core.incidents import describe_fault
from agent.engine.context import EngineContext
from agent.engine.deciding import Deciding
from agent.engine.views import StateJobs, job_object, pods_for
from agent.sinks import events as ev
from agent.sources.jobs import FAULT_RETRY_TIMES_LABEL, SUB_HEALTHY_LABEL, fault_retry_times_problem

log = structlog.get_logger(__name__)


class JobChecks:
    """The tick's checks of the watched jobs' labels and hot-switch waits.

    Args:
        ctx: the engine's shared parts (the watch cache, metrics, events).
        deciding: holds the hot-switch waits it started (agent.engine.deciding.HotSwitchWait).
    """

    def __init__(self, ctx: EngineContext, deciding: Deciding) -> None:
        self.ctx = ctx
        self.deciding = deciding
        # (job UID, label, value) of unusable job labels: logged and counted once, published once per term
        self.labels_reported: set[tuple[str, str, str]] = set()
        self.labels_published: set[tuple[str, str, str]] = set()
        # (source, key) of the jobs whose label is unusable now: read again every tick until published
        self.bad_labels: set[tuple[str, str]] = set()

    def new_term(self) -> None:
        """A new leadership term publishes the label problems again."""
        self.labels_published.clear()

    async def report_job_labels(self, now: datetime, leading: bool) -> None:
        """Report each watched job's unusable ``fault-retry-times`` value once (agent.sources.jobs keeps such a job
        with a business budget of 0): a log line and fault_agent_input_rejected_total{reason=bad-fault-retry-times}
        on every replica, a ``job.misconfigured`` event from the leader (again by a new leader: same event id).

        Reads only the jobs that changed since the last tick (ClusterState.take_checked_jobs) and those whose
        label is unusable: no work in proportion to the cluster's jobs."""
        ctx = self.ctx
        if len(self.labels_reported) > 10000:  # job churn must not grow these without bound
            self.labels_reported.clear()
            self.labels_published.clear()
        keys = ctx.state.take_checked_jobs()
        keys.update(self.bad_labels)
        for source, key in sorted(keys):
            job: JobRecord | None = ctx.state.store(source).get(key)
            value = job.label(FAULT_RETRY_TIMES_LABEL) if job is not None else None
            problem = fault_retry_times_problem(value)
            if job is None or value is None or problem is None:
                self.bad_labels.discard((source, key))
                continue
            self.bad_labels.add((source, key))
            mark = (job.uid, FAULT_RETRY_TIMES_LABEL, value)
            if mark not in self.labels_reported:
                self.labels_reported.add(mark)
                log.warning("job label unusable; the job is still watched", job=f"{job.namespace}/{job.name}",
                            label=FAULT_RETRY_TIMES_LABEL, value=value[:40], problem=problem)  # fmt: skip
                ctx.metrics.input_rejected(job.kind.api_kind, "bad-fault-retry-times")
            if leading and mark not in self.labels_published:
                self.labels_published.add(mark)
                build = functools.partial(
                    ev.job_misconfigured, job_object(job), cluster=ctx.settings.cluster_name, at=now,
                    label=FAULT_RETRY_TIMES_LABEL, value=value, problem=problem,
                )  # fmt: skip
                await ctx.publish(build)

    async def check_hot_switch_waits(self, now: datetime) -> None:
        """Bound each ``subHealthyStrategy: hotSwitch`` wait (agent.engine.deciding.HotSwitchWait): it ends when a
        pod of the job carries ClusterD's ``needVolcanoOpe: delete`` (``switched``: that pod's own fault deletes
        it), when no sub-health fault hits the job any more (``cleared``), or, past ``policy.hot_switch_wait_s``,
        as ``timeout``: a warning, and a ``job.misconfigured`` event for the label ``subHealthyStrategy`` saying
        that the job is left running as with ``ignore`` (what ClusterD itself falls back to when a hot switch
        cannot be made: component/clusterd/pkg/application/recover/hot_switch_controller.go
        ``cleanStateWhenFailed``). Each end is counted in ``fault_agent_actions_total{action="hot-switch-wait"}``;
        a job gone or replaced ends its wait silently. Leader only (the caller checks)."""
        ctx = self.ctx
        waits = self.deciding.hot_switch_waits
        for uid, wait in list(waits.items()):
            job = ctx.state.job(wait.job.kind, wait.job.namespace, wait.job.name)
            where = f"{wait.job.namespace}/{wait.job.name}"
            if job is None or job.uid != uid:
                del waits[uid]
                continue
            pods = ctx.state.pods_of_job(job.kind, job.namespace, job.name)
            if any(p.need_volcano_ope == OPE_TYPE_DELETE for p in pods):
                outcome = "switched"
            elif not self._sub_health_on_job(job):
                outcome = "cleared"
            elif (now - wait.since).total_seconds() >= ctx.settings.policy.hot_switch_wait_s:
                outcome = "timeout"
            else:
                continue
            del waits[uid]
            ctx.metrics.action("hot-switch-wait", outcome)
            if outcome != "timeout":
                log.info("hot switch wait ended", job=where, outcome=outcome)
                continue
            waited = (now - wait.since).total_seconds()
            problem = (
                f"no hot switch {waited:.0f} s after the sub-health fault ({describe_fault(wait.fault)}): no pod "
                "of the job was annotated needVolcanoOpe=delete by ClusterD (is ClusterD running, with a backup "
                "node?); the job is left running as with subHealthyStrategy=ignore, ClusterD's own fallback; a "
                "later annotation is still honoured"
            )
            log.warning("hot switch did not happen", job=where, problem=problem)
            build = functools.partial(
                ev.job_misconfigured, job_object(job), cluster=ctx.settings.cluster_name, at=now,
                label=SUB_HEALTHY_LABEL, value=job.sub_healthy_strategy, problem=problem,
            )  # fmt: skip
            await ctx.publish(build)

    def _sub_health_on_job(self, job: JobRecord) -> bool:
        """Whether an active sub-health chip or node fault hits `job` (True when the engine has no active set)."""
        ctx = self.ctx
        if ctx.active_faults is None:
            return True
        jobs = StateJobs(ctx.state)
        for fault in ctx.active_faults():
            if fault.level is not FaultLevel.SUB_HEALTH or fault.kind not in (FaultKind.CHIP, FaultKind.NODE):
                continue
            if any(
                h.job.uid == job.uid
                for h in correlate(fault, pods_for(ctx.state, fault), jobs, ctx.state.device_allocations).hits
            ):
                return True
        return False
