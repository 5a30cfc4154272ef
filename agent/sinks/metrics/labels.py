"""The tables of the agent's metrics: the histogram buckets (seconds) and every label value known at start, from
which :class:`~agent.sinks.metrics.families.AgentMetrics` creates each series at zero. Each table names the
vocabulary it mirrors (agent.core, agent.sources.catalog, agent.sinks.kafka); tests/unit/sinks/test_metrics.py
holds them equal.
"""

from __future__ import annotations

from agent.core.checkpoint_wait import GraceWait, WaitEnded
from agent.sources.catalog import CATALOG

#: Recovery time buckets, seconds: 1 s to 2 h. The vendor's anchors (≈70 s and ≈210 s restarts) and the
#: recovery deadline (30 min by default) each fall between two close buckets.
RECOVERY_BUCKETS_S: tuple[float, ...] = (
    1,
    2,
    5,
    10,
    15,
    20,
    30,
    45,
    60,
    90,
    120,
    180,
    240,
    300,
    450,
    600,
    900,
    1200,
    1800,
    2700,
    3600,
    5400,
    7200,
)

#: Detection lag buckets, seconds: signal time → seen. Device plugin checks every 5 s; Kubernetes' own
#: node-failure detection takes 40 s and more.
DETECTION_LAG_BUCKETS_S: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)

#: Decision time buckets, seconds: from a fault to a decision inside the agent (pure code, normally < 10 ms).
DECISION_BUCKETS_S: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

#: Stage time buckets, seconds: from a fault read to a stage of its restart (agent.engine.stages); one apiserver
#: write takes 5-50 ms on a busy control plane.
STAGE_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5,
)  # fmt: skip

FAULT_STAGES: tuple[str, ...] = ("decided", "durable", "sent", "answered")
"""``stage`` of fault_agent_fault_stage_seconds, in the order a restart passes them (agent.engine.stages)."""

# --- the label values known at start ----------------------------------------------------------------------
# Every label set below is created at zero when AgentMetrics is built. A counter or histogram series that
# first appears at 1 has no earlier sample, so Prometheus' increase()/rate() over it is 0: without these, the
# first retry-budget exhaustion, the first slow recovery and the first action of each kind would never reach
# an alert or a dashboard total. Open-ended values (input rejection slugs) are not listed.

JOB_KINDS: tuple[str, ...] = ("vcjob", "acjob", "jobset")
"""``job_kind`` values (agent.core.cluster.JobKind)."""

FAULT_KINDS: tuple[str, ...] = ("chip", "network", "node", "business", "disruption")
"""``kind``/``fault_kind`` values (agent.core.faults.FaultKind)."""

FAULT_SOURCES: dict[str, tuple[str, ...]] = {s.detector: s.fault_kinds for s in CATALOG if s.fault_kinds}
"""``source`` of fault_agent_faults_total (a detector, agent.sources.catalog ``Source.detector``) → the fault kinds it
reports."""

RECOVERY_ACTIONS: dict[str, tuple[str, ...]] = {
    "restart-job": ("recovered", "failed", "abandoned"),
    "restart-pods": ("recovered", "failed", "abandoned"),
    "resubmit": ("recovered", "failed", "abandoned"),
    "hand-off": ("recovered", "failed", "abandoned"),
    "mark-pods": ("recovered", "failed", "abandoned"),
    "abort": ("failed",),
}
"""``action`` of fault_agent_recovery_seconds (the incident's agent.core.policy.Action) → its possible outcomes."""

OBSERVED_RECOVERY_ACTIONS: dict[str, tuple[str, ...]] = {
    "restart-job": ("recovered", "failed", "abandoned"),
    "restart-pods": ("recovered", "failed", "abandoned"),
}
"""``action`` of fault_agent_recovery_seconds{acted_by="observed"} (a restart someone else made, agent.core.observe)
→ its possible outcomes; ``acted_by="agent"`` has :data:`RECOVERY_ACTIONS`."""

AGENT_MODES: tuple[str, ...] = ("act", "observe")
"""``agent_mode`` of fault_agent_mindcluster_plugin_active (settings ``policy.mode``)."""

FAILURE_REASONS: tuple[str, ...] = (
    "budget-exhausted",
    "timeout",
    "action-error",
    "breaker-open",
    "job-gone",
    "job-failed",
    "leadership-lost",
)
"""``reason`` of fault_agent_recovery_failures_total (agent.sinks.events.FailureReason)."""

GRACE_WAITS: tuple[str, ...] = tuple(w.value for w in GraceWait)
"""``wait`` of fault_agent_grace_wait_seconds (agent.core.checkpoint_wait.GraceWait)."""
GRACE_WAIT_ENDS: tuple[str, ...] = tuple(e.value for e in WaitEnded)
"""``ended`` of fault_agent_grace_wait_seconds (agent.core.checkpoint_wait.WaitEnded): 2 × 4 series in all."""

ACTION_RESULTS: dict[str, tuple[str, ...]] = {
    "restart-job": ("done", "already_done", "failed", "dry_run", "throttled", "breaker_open", "policy_not_in_force"),
    "restart-pods": ("done", "already_done", "failed", "dry_run", "throttled", "breaker_open", "policy_not_in_force"),
    "resubmit": ("done", "already_done", "failed", "dry_run", "throttled", "breaker_open", "policy_not_in_force"),
    "force-delete-pods": ("done", "already_done", "failed", "dry_run", "policy_not_in_force"),
    "hand-off": ("done", "already_done", "failed", "dry_run"),
    "mark-pods": ("done", "already_done", "failed", "dry_run", "breaker_open"),
    "force-after-command": ("done", "already_done", "failed", "dry_run"),
    "force-after-grace": ("done", "already_done", "failed", "dry_run"),
    "taint": ("done", "already_done", "failed", "dry_run", "deferred"),
    "untaint": ("done", "already_done", "failed", "dry_run"),
}
"""``action`` of fault_agent_actions_total → its results (agent.actions.results.Outcome plus the refusals; a taint
``deferred``: left to NVSentinel, which holds the node, settings policy.defer_to_nvsentinel)."""

WATCH_RESOURCES: tuple[str, ...] = tuple(s.name for s in CATALOG if not s.agent_owned)
"""``resource`` of the watch metrics: the sources of agent.sources.catalog but the agent's own."""

LAG_SOURCES: tuple[str, ...] = tuple(s.name for s in CATALOG if s.signal_time is not None)
"""``source`` of fault_agent_detection_lag_seconds: the watched sources that carry a signal time."""

KAFKA_TASK_NAMES: tuple[str, ...] = ("kafka-sender", "kafka-commit", "kafka-replay", "kafka-acker", "kafka-adopt")
"""The Kafka publisher's supervised loops (agent.sinks.kafka's ``_supervised`` names)."""

ENGINE_TASK_NAMES: tuple[str, ...] = ("recovery", "tick")
"""The engine's loops whose last-resort guard counts a failure and goes on (agent.engine.loops: one fault's
recovery, one tick)."""

TASK_NAMES: tuple[str, ...] = KAFKA_TASK_NAMES + ENGINE_TASK_NAMES
"""``task`` of fault_agent_task_failures_total: the Kafka publisher's supervised loops and the engine's loops.
Created at zero so that the first failure of each reaches FaultAgentTaskFailing's increase()."""

FAULT_SOURCE_VALUES: tuple[str, ...] = ("clusterd", "per-node")
"""``source`` of fault_agent_fault_source (agent.core.fault_source.FaultSource)."""

WATCH_EVENT_TYPES: tuple[str, ...] = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")
WATCH_RESTART_REASONS: tuple[str, ...] = ("timeout", "gone", "inactivity", "error")
PUBLISH_RESULTS: tuple[str, ...] = ("ok", "error", "outbox", "invalid", "dropped")
QUEUES: tuple[str, ...] = ("faults",)
"""``queue`` of fault_agent_queue_depth (agent.engine.detecting.FAULT_QUEUE)."""
KAFKA_ERROR_REASONS: tuple[str, ...] = (
    "config",
    "unreachable",
    "auth",
    "topic-missing",
    "topic-create",
    "delivery",
    "stalled",
    "queue-full",
    "outbox",
    "invalid",
)
"""``reason`` of fault_agent_kafka_errors_total (agent.sinks.kafka.ErrorReason)."""
