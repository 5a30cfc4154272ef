"""Every metric family of the agent, defined in one place on an injected registry (:class:`AgentMetrics`), and
the small typed methods the rest of the agent reports through. Label values come from
:mod:`agent.sinks.metrics.labels`; see :mod:`agent.sinks.metrics` for the naming conventions.
"""

from __future__ import annotations

import enum
import platform
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from agent.core.faults import FaultLevel
from agent.core.goodput import CAUSES as LOST_TRAINING_CAUSES
from agent.core.observe import ACTED_BY_AGENT, ACTED_BY_OBSERVED
from agent.sinks.metrics.exposure import agent_version, label_value, listed, with_constant_labels
from agent.sinks.metrics.labels import (
    ACTION_RESULTS,
    AGENT_MODES,
    DECISION_BUCKETS_S,
    DETECTION_LAG_BUCKETS_S,
    FAILURE_REASONS,
    FAULT_KINDS,
    FAULT_SOURCE_VALUES,
    FAULT_SOURCES,
    FAULT_STAGES,
    GRACE_WAIT_ENDS,
    GRACE_WAITS,
    JOB_KINDS,
    KAFKA_ERROR_REASONS,
    LAG_SOURCES,
    OBSERVED_RECOVERY_ACTIONS,
    PUBLISH_RESULTS,
    QUEUES,
    RECOVERY_ACTIONS,
    RECOVERY_BUCKETS_S,
    STAGE_BUCKETS_S,
    TASK_NAMES,
    WATCH_EVENT_TYPES,
    WATCH_RESOURCES,
    WATCH_RESTART_REASONS,
)


class AgentMetrics:
    """All metrics of one agent process, registered on `registry` at construction.

    Args:
        registry: where the metrics are registered (without the ``cluster`` label). Tests pass a fresh
            ``CollectorRegistry()`` each, so two instances never collide.
        cluster: the cluster name (``Settings.cluster_name``): the build-info metric's ``cluster`` label, and
            the constant ``cluster`` label of every series of :attr:`exposed`.
        version: the agent's version; default the installed package's version.
        topics: the Kafka topics events go to (``kafka.faults_topic``, ``kafka.recoveries_topic``); their
            publish counters are created at zero with the other known label sets.

    Raises:
        ValueError: a metric of the same name is already registered on `registry`.

    Label values accept strings or enums (``FaultKind.CHIP`` → ``"chip"``, ``FaultLevel.SEPARATE`` →
    ``"SeparateNPU"``).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        cluster: str = "default",
        version: str | None = None,
        topics: tuple[str, ...] = ("training.faults", "training.recoveries"),
    ) -> None:
        self.registry = registry
        self.exposed = with_constant_labels(registry, {"cluster": cluster})
        """What ``/metrics`` serves: every series of `registry` with ``cluster=<cluster>``."""
        r = registry
        self.build_info = Info(
            "fault_agent_build",
            "Agent build: version, Python version and the cluster name it watches (value is always 1).",
            registry=r,
        )
        self.build_info.info(
            {"version": version or agent_version(), "python": platform.python_version(), "cluster": cluster}
        )
        self.faults_total = Counter(
            "fault_agent_faults_total",
            "Faults detected, by kind (chip, network, node, business, disruption), level and source "
            "(device-plugin, noded, clusterd, publicfault, node, pod, progress).",
            ["kind", "level", "source"],
            registry=r,
        )
        self.faults_cleared_total = Counter(
            "fault_agent_faults_cleared_total",
            "Faults the cluster stopped reporting (chip healthy, NodeD ConfigMap deleted, node Ready), by kind.",
            ["kind"],
            registry=r,
        )
        self.recovery_seconds = Histogram(
            "fault_agent_recovery_seconds",
            "Time from a fault's signal to its incident's end, seconds, by job kind (vcjob, acjob, jobset), "
            "fault kind, action taken, outcome (recovered, failed, abandoned) and who restarted the job (acted_by: "
            "agent, or observed: a restart someone else made, watched in policy.mode=observe).",
            ["job_kind", "fault_kind", "action", "outcome", "acted_by"],
            buckets=RECOVERY_BUCKETS_S,
            registry=r,
        )
        self.time_to_first_step_seconds = Histogram(
            "fault_agent_time_to_first_step_seconds",
            "Time from the agent's restart of a job that reports its training progress (docs/progress.md) to the "
            "first training step the agent saw after it, seconds, by job kind (vcjob, acjob, jobset).",
            ["job_kind"],
            buckets=RECOVERY_BUCKETS_S,
            registry=r,
        )
        self.stragglers_total = Counter(
            "fault_agent_stragglers_total",
            "Straggling episodes found (a pod rank slower than detect.straggler_step_time_multiple x its job's "
            "median for detect.straggler_windows heartbeat windows; docs/progress.md), by job kind (vcjob, acjob, "
            "jobset).",
            ["job_kind"],
            registry=r,
        )
        self.stragglers_gauge = Gauge(
            "fault_agent_stragglers_current",
            "Pod ranks straggling now (episodes found and not ended), by job kind (vcjob, acjob, jobset).",
            ["job_kind"],
            registry=r,
        )
        self.lost_training_seconds_total = Counter(
            "fault_agent_lost_training_seconds",
            "Training time lost by the incidents of jobs that report their progress (docs/progress.md), seconds, by "
            "cause (detection, restart, rescheduling, initialisation, recomputation); counted at each incident's "
            "first step after the restart. Five series.",
            ["cause"],
            registry=r,
        )
        self.work_lost_steps_total = Counter(
            "fault_agent_work_lost_steps",
            "Training steps done since the last checkpoint the heartbeat reported before a restart, computed again "
            "after it (the incidents of jobs that report a checkpoint step).",
            registry=r,
        )
        self.training_time_seconds = Gauge(
            "fault_agent_training_time_seconds",
            "Summed over the jobs whose heartbeat the agent follows, since each job's first step the agent saw: "
            "wall time (time=wall) and productive time (time=productive: wall minus the incidents' lost time), "
            "seconds. Set by the leader every second (0 on a standby); no per-job series.",
            ["time"],
            registry=r,
        )
        self.effective_training_ratio = Gauge(
            "fault_agent_effective_training_ratio",
            "Productive / wall training time over the jobs whose heartbeat the agent follows (1 with no lost "
            "time; 0 on a standby or with no job stepping yet).",
            registry=r,
        )
        self.grace_wait_seconds = Histogram(
            "fault_agent_grace_wait_seconds",
            "How long a graceful wait before forcing a job lasted, seconds, by wait (grace-over-time: grace mode's "
            "force after the grace deletion; grace-exit: graceExit's wait for the training processes) and why it "
            "ended (checkpoint: the job's heartbeat reported a checkpoint newer than the fault; exited; node-down; "
            "timeout). docs/progress.md.",
            ["wait", "ended"],
            buckets=RECOVERY_BUCKETS_S,
            registry=r,
        )
        self.detection_lag_seconds = Histogram(
            "fault_agent_detection_lag_seconds",
            "Lag between a signal's own timestamp and when the agent saw it, seconds, by source.",
            ["source"],
            buckets=DETECTION_LAG_BUCKETS_S,
            registry=r,
        )
        self.decision_seconds = Histogram(
            "fault_agent_decision_seconds",
            "Time the agent took from seeing a fault to its first decision (correlate + policy), seconds; a fault "
            "decided again (deferred by the rate limit, re-evaluated by a new leader) is not counted again.",
            buckets=DECISION_BUCKETS_S,
            registry=r,
        )
        self.fault_stage_seconds = Histogram(
            "fault_agent_fault_stage_seconds",
            "Time from the agent reading a fault to each stage of the restart it opened, seconds, by stage "
            f"({listed(FAULT_STAGES)}): where a restart's time goes (agent.engine.stages).",
            ["stage"],
            buckets=STAGE_BUCKETS_S,
            registry=r,
        )
        self.actions_total = Counter(
            "fault_agent_actions_total",
            f"Actions on the cluster, by action ({listed(ACTION_RESULTS)}, ...) and result "
            f"({listed(r for results in ACTION_RESULTS.values() for r in results)}, ...).",
            ["action", "result"],
            registry=r,
        )
        self.recovery_failures_total = Counter(
            "fault_agent_recovery_failures_total",
            "Incidents that ended as failed, by job kind and reason (budget-exhausted, timeout, action-error, "
            "breaker-open, job-gone, job-failed, leadership-lost): the data.reason of each recovery.failed event.",
            ["job_kind", "reason"],
            registry=r,
        )
        self.incidents_open_gauge = Gauge(
            "fault_agent_incidents_open",
            "Incidents not yet recovered or failed.",
            registry=r,
        )
        self.incidents_held_gauge = Gauge(
            "fault_agent_incidents_held",
            "Open incidents held by the open restart circuit breaker (state held-by-breaker: the policy would "
            "restart the job, nothing is restarted until a person resets the breaker); part of "
            "fault_agent_incidents_open.",
            registry=r,
        )
        self.retry_budget_exhausted_total = Counter(
            "fault_agent_retry_budget_exhausted_total",
            "Jobs whose retry budget (fault-retry-times, maxRetry, backoffLimit) ran out, by job kind.",
            ["job_kind"],
            registry=r,
        )
        self.watch_events_total = Counter(
            "fault_agent_watch_events_total",
            f"Watch events received, by resource ({listed(WATCH_RESOURCES)}) and type ({listed(WATCH_EVENT_TYPES)}).",
            ["resource", "type"],
            registry=r,
        )
        self.watch_last_event = Gauge(
            "fault_agent_watch_last_event_timestamp_seconds",
            "Unix time of the last watch event or bookmark per resource; a stale value means a silent watch.",
            ["resource"],
            registry=r,
        )
        # (resource, type) → the two series watch_event sets: labels() costs more than the update (issue 39)
        self._watch_series: dict[tuple[str, str], tuple[Counter, Gauge]] = {}
        self.watch_restarts_total = Counter(
            "fault_agent_watch_restarts_total",
            f"Watch streams restarted, by resource and reason ({listed(WATCH_RESTART_REASONS)}).",
            ["resource", "reason"],
            registry=r,
        )
        self.relists_total = Counter(
            "fault_agent_relists_total",
            "Full lists of a resource (initial list and re-lists after 410 Gone), by resource.",
            ["resource"],
            registry=r,
        )
        self.cache_synced_gauge = Gauge(
            "fault_agent_cache_synced",
            "1 once a resource's cache finished its first list, else 0.",
            ["resource"],
            registry=r,
        )
        self.queue_depth_gauge = Gauge(
            "fault_agent_queue_depth",
            f"Items waiting in an internal queue, by queue ({listed(QUEUES)}).",
            ["queue"],
            registry=r,
        )
        self.events_published_total = Counter(
            "fault_agent_events_published_total",
            "CloudEvents handed to Kafka, by topic and result (ok, error, outbox, invalid, dropped).",
            ["topic", "result"],
            registry=r,
        )
        self.kafka_errors_total = Counter(
            "fault_agent_kafka_errors_total",
            f"Kafka failures by reason ({listed(KAFKA_ERROR_REASONS)}): why events went to the outbox.",
            ["reason"],
            registry=r,
        )
        self.outbox_events_gauge = Gauge(
            "fault_agent_outbox_events",
            "Events waiting in the on-disk outbox for Kafka.",
            registry=r,
        )
        self.outbox_bytes_gauge = Gauge(
            "fault_agent_outbox_bytes",
            "Size of the on-disk outbox, bytes.",
            registry=r,
        )
        self.breaker_open_gauge = Gauge(
            "fault_agent_breaker_open",
            "1 while the restart circuit breaker is open (no restarts until a person resets it), else 0.",
            registry=r,
        )
        self.mindcluster_plugin_active = Gauge(
            "fault_agent_mindcluster_plugin_active",
            "1 while MindCluster's Volcano plugin evidently runs beside the agent (volcano-system/vcjob-fault-npu-cm "
            "carries the plugin's fault-node key), by the agent's policy.mode; agent_mode=\"act\" at 1 means two "
            "reschedulers act on the same faults.",
            ["agent_mode"],
            registry=r,
        )
        self.fault_source_gauge = Gauge(
            "fault_agent_fault_source",
            "1 for the fault source the agent reads (kube.fault_source, auto resolved at start: clusterd = ClusterD's "
            "cluster-info-* alone, per-node = the device plugin's, NodeD's and public-fault ConfigMaps), 0 for the "
            "other (both 0 until the start-up check answered).",
            ["source"],
            registry=r,
        )
        self.clusterd_unread_gauge = Gauge(
            "fault_agent_clusterd_unread",
            "1 while ClusterD's cluster-info-* ConfigMaps exist and the agent reads the per-node ConfigMaps instead "
            "(it acts on faults ClusterD silenced or holds back), else 0; checked at start and once a minute.",
            registry=r,
        )
        self.admission_policy_in_force_gauge = Gauge(
            "fault_agent_admission_policy_in_force",
            "1 while the agent's admission policy denies the agent's own probe write (a dry-run create it must deny, "
            "agent.sources.admission_check), 0 while it does not or the check has not answered yet; only in act mode "
            "with policy.admission_check refuse or warn, by that setting (absent otherwise).",
            ["check"],
            registry=r,
        )
        self.leader_gauge = Gauge(
            "fault_agent_leader",
            "1 while this replica holds the leader Lease (acts and publishes), else 0.",
            registry=r,
        )
        self.input_rejected_total = Counter(
            "fault_agent_input_rejected_total",
            "Watched objects that could not be read and were skipped, by source kind and reason slug.",
            ["source", "reason"],
            registry=r,
        )
        self.task_failures_total = Counter(
            "fault_agent_task_failures_total",
            "Agent tasks that ended with an unexpected error, by task name.",
            ["task"],
            registry=r,
        )
        self.breaker_open(False)
        self.leader(False)
        self.incidents_open(0)
        self.outbox_events(0)
        self._create_known_series(topics)

    def _create_known_series(self, topics: tuple[str, ...]) -> None:
        """Create every known label set at zero (see JOB_KINDS and the other tables above)."""
        for source, kinds in FAULT_SOURCES.items():
            for kind in kinds:
                for level in FaultLevel:
                    self.faults_total.labels(kind=kind, level=level.wire_name, source=source)
        for kind in FAULT_KINDS:
            self.faults_cleared_total.labels(kind=kind)
        for job_kind in JOB_KINDS:
            self.retry_budget_exhausted_total.labels(job_kind=job_kind)
            self.time_to_first_step_seconds.labels(job_kind=job_kind)
            self.stragglers_total.labels(job_kind=job_kind)
            self.stragglers_gauge.labels(job_kind=job_kind)
            for reason in FAILURE_REASONS:
                self.recovery_failures_total.labels(job_kind=job_kind, reason=reason)
            for fault_kind in FAULT_KINDS:
                for acted_by, actions in (
                    (ACTED_BY_AGENT, RECOVERY_ACTIONS),
                    (ACTED_BY_OBSERVED, OBSERVED_RECOVERY_ACTIONS),
                ):
                    for action, outcomes in actions.items():
                        for outcome in outcomes:
                            self.recovery_seconds.labels(
                                job_kind=job_kind, fault_kind=fault_kind, action=action, outcome=outcome,
                                acted_by=acted_by,
                            )  # fmt: skip
        for cause in LOST_TRAINING_CAUSES:
            self.lost_training_seconds_total.labels(cause=cause)
        self.training_time(0.0, 0.0)
        for wait in GRACE_WAITS:
            for ended in GRACE_WAIT_ENDS:
                self.grace_wait_seconds.labels(wait=wait, ended=ended)
        for action, results in ACTION_RESULTS.items():
            for result in results:
                self.actions_total.labels(action=action, result=result)
        for stage in FAULT_STAGES:
            self.fault_stage_seconds.labels(stage=stage)
        for source in LAG_SOURCES:
            self.detection_lag_seconds.labels(source=source)
        for resource in WATCH_RESOURCES:
            self.relists_total.labels(resource=resource)
            for type_ in WATCH_EVENT_TYPES:
                self.watch_events_total.labels(resource=resource, type=type_)
            for reason in WATCH_RESTART_REASONS:
                self.watch_restarts_total.labels(resource=resource, reason=reason)
        for topic in topics:
            for result in PUBLISH_RESULTS:
                self.events_published_total.labels(topic=topic, result=result)
        for reason in KAFKA_ERROR_REASONS:
            self.kafka_errors_total.labels(reason=reason)
        for mode in AGENT_MODES:
            self.mindcluster_plugin_active.labels(agent_mode=mode)
        for task in TASK_NAMES:
            self.task_failures_total.labels(task=task)
        for source in FAULT_SOURCE_VALUES:
            self.fault_source_gauge.labels(source=source)

    # --- inputs -----------------------------------------------------------------------------------------

    def input_rejected(self, source: str, reason: str) -> None:
        """Count one skipped object. `source`: its kind (``ConfigMap``, ``Pod``); `reason`: a stable slug."""
        self.input_rejected_total.labels(source=source, reason=reason).inc()

    def watch_event(self, resource: str, type: str) -> None:
        """Count one watch event (``ADDED``/``MODIFIED``/``DELETED``/``BOOKMARK``) and stamp the time."""
        series = self._watch_series.get((resource, type))
        if series is None:
            series = (
                self.watch_events_total.labels(resource=resource, type=type),
                self.watch_last_event.labels(resource=resource),
            )
            self._watch_series[(resource, type)] = series
        series[0].inc()
        series[1].set_to_current_time()

    def watch_restart(self, resource: str, reason: str = "error") -> None:
        """Count one restarted watch stream; `reason` one of timeout, gone, inactivity, error."""
        self.watch_restarts_total.labels(resource=resource, reason=reason).inc()

    def relist(self, resource: str) -> None:
        """Count one full list of `resource` (initial or after 410 Gone)."""
        self.relists_total.labels(resource=resource).inc()

    def cache_synced(self, resource: str, synced: bool = True) -> None:
        """Mark `resource`'s cache as (not) synced after its first list."""
        self.cache_synced_gauge.labels(resource=resource).set(1 if synced else 0)

    def queue_depth(self, queue: str, n: int) -> None:
        """Set the number of items waiting in `queue` (≥ 0)."""
        self.queue_depth_gauge.labels(queue=queue).set(n)

    # --- detection and decision -------------------------------------------------------------------------

    def fault(self, kind: str | enum.Enum, level: str | enum.Enum, source: str) -> None:
        """Count one new fault. `level` may be a FaultLevel (exported by its vendor name, e.g. SeparateNPU)."""
        self.faults_total.labels(kind=label_value(kind), level=label_value(level), source=source).inc()

    def fault_cleared(self, kind: str | enum.Enum) -> None:
        """Count one fault the cluster no longer reports."""
        self.faults_cleared_total.labels(kind=label_value(kind)).inc()

    def detection_lag(self, seconds: float, source: str = "unknown") -> None:
        """Observe signal time → seen, in seconds. Negative values (clock skew) are recorded as 0."""
        self.detection_lag_seconds.labels(source=source).observe(max(0.0, seconds))

    def decision(self, seconds: float) -> None:
        """Observe the time from seeing a fault to its first decision, in seconds."""
        self.decision_seconds.observe(max(0.0, seconds))

    def fault_stage(self, stage: str, seconds: float) -> None:
        """Observe the time from reading a fault to `stage` of its restart (agent.engine.stages), in seconds."""
        self.fault_stage_seconds.labels(stage=stage).observe(max(0.0, seconds))

    # --- actions and incidents --------------------------------------------------------------------------

    def action(self, action: str | enum.Enum, result: str | enum.Enum) -> None:
        """Count one action on the cluster with its result (done, already_done, failed, dry_run, throttled)."""
        self.actions_total.labels(action=label_value(action), result=label_value(result)).inc()

    def recovery(
        self,
        job_kind: str,
        fault_kind: str | enum.Enum,
        action: str | enum.Enum,
        outcome: str,
        seconds: float,
        acted_by: str = ACTED_BY_AGENT,
    ) -> None:
        """Observe one finished incident: seconds from the fault's signal to recovered/failed; `acted_by`
        ``observed`` for a restart someone else made (agent.core.observe)."""
        self.recovery_seconds.labels(
            job_kind=job_kind,
            fault_kind=label_value(fault_kind),
            action=label_value(action),
            outcome=outcome,
            acted_by=acted_by,
        ).observe(max(0.0, seconds))

    def mindcluster_plugin(self, active: bool, mode: str) -> None:
        """Set fault_agent_mindcluster_plugin_active{agent_mode=`mode`} (1: MindCluster's Volcano plugin evidently
        runs beside the agent, agent.core.observe.plugin_evidence); the other mode's series is 0."""
        for m in AGENT_MODES:
            self.mindcluster_plugin_active.labels(agent_mode=m).set(1 if active and m == mode else 0)

    def fault_source(self, source: str) -> None:
        """Set fault_agent_fault_source: 1 for `source` (``clusterd`` or ``per-node``), 0 for the other."""
        for s in FAULT_SOURCE_VALUES:
            self.fault_source_gauge.labels(source=s).set(1 if s == source else 0)

    def clusterd_unread(self, unread: bool) -> None:
        """Set fault_agent_clusterd_unread (1: ClusterD's ConfigMaps exist and are not read)."""
        self.clusterd_unread_gauge.set(1 if unread else 0)

    def incidents_open(self, n: int, held: int = 0) -> None:
        """Set the number of open incidents (≥ 0) and of those held by the circuit breaker (0 ≤ held ≤ n)."""
        self.incidents_open_gauge.set(n)
        self.incidents_held_gauge.set(held)

    def time_to_first_step(self, job_kind: str, seconds: float) -> None:
        """Observe the seconds from a restart to the job's first training step after it."""
        self.time_to_first_step_seconds.labels(job_kind=job_kind).observe(max(0.0, seconds))

    def straggler_found(self, job_kind: str) -> None:
        """Count one straggling episode found (agent.core.straggler)."""
        self.stragglers_total.labels(job_kind=job_kind).inc()

    def stragglers_now(self, job_kind: str, n: int) -> None:
        """Set the pod ranks of `job_kind` jobs straggling now."""
        self.stragglers_gauge.labels(job_kind=job_kind).set(n)

    def lost_training(self, lost_by_cause: Mapping[str, float], work_lost_steps: int | None) -> None:
        """Count one incident's lost training seconds by cause (agent.core.goodput.CAUSES; others are ignored) and
        its steps of work lost (None: unknown)."""
        for cause, seconds in lost_by_cause.items():
            if cause in LOST_TRAINING_CAUSES and seconds > 0:
                self.lost_training_seconds_total.labels(cause=cause).inc(seconds)
        if work_lost_steps:
            self.work_lost_steps_total.inc(work_lost_steps)

    def training_time(self, wall_s: float, productive_s: float) -> None:
        """Set the summed wall and productive training seconds and their ratio (0 when wall is 0)."""
        self.training_time_seconds.labels(time="wall").set(wall_s)
        self.training_time_seconds.labels(time="productive").set(productive_s)
        self.effective_training_ratio.set(productive_s / wall_s if wall_s > 0 else 0.0)

    def grace_wait(self, wait: str, ended: str, seconds: float) -> None:
        """Observe one graceful wait of `seconds`: `wait` one of :data:`GRACE_WAITS`, `ended` one of
        :data:`GRACE_WAIT_ENDS` (agent.core.checkpoint_wait)."""
        self.grace_wait_seconds.labels(wait=wait, ended=ended).observe(max(0.0, seconds))

    def budget_exhausted(self, job_kind: str) -> None:
        """Count one job whose retry budget ran out."""
        self.retry_budget_exhausted_total.labels(job_kind=job_kind).inc()

    def recovery_failed(self, job_kind: str, reason: str | enum.Enum) -> None:
        """Count one incident that ended as failed; `reason` is the recovery.failed event's ``data.reason``
        (an agent.sinks.events.FailureReason or its value)."""
        self.recovery_failures_total.labels(job_kind=job_kind, reason=label_value(reason)).inc()

    def admission_policy_in_force(self, in_force: bool, check: str) -> None:
        """Set fault_agent_admission_policy_in_force{check} (agent.sources.admission_check; `check`: the
        ``policy.admission_check`` setting, ``refuse`` or ``warn``)."""
        self.admission_policy_in_force_gauge.labels(check=check).set(1 if in_force else 0)

    def breaker_open(self, is_open: bool) -> None:
        """Set the circuit breaker state."""
        self.breaker_open_gauge.set(1 if is_open else 0)

    def leader(self, is_leader: bool) -> None:
        """Set whether this replica is the leader."""
        self.leader_gauge.set(1 if is_leader else 0)

    def task_failed(self, task: str) -> None:
        """Count one agent task that ended with an unexpected error (`task`: its fixed name)."""
        self.task_failures_total.labels(task=task).inc()

    # --- events -----------------------------------------------------------------------------------------

    def event_published(self, topic: str, result: str, n: int = 1) -> None:
        """Count `n` events handed to Kafka; `result` ok, error, outbox (spilled to disk), invalid or dropped."""
        self.events_published_total.labels(topic=topic, result=result).inc(n)

    def kafka_error(self, reason: str) -> None:
        """Count one Kafka failure by its reason slug (agent.sinks.kafka.ErrorReason)."""
        self.kafka_errors_total.labels(reason=reason).inc()

    def outbox_events(self, n: int) -> None:
        """Set the number of events waiting in the outbox."""
        self.outbox_events_gauge.set(n)

    def outbox_bytes(self, n: int) -> None:
        """Set the outbox size in bytes."""
        self.outbox_bytes_gauge.set(n)
