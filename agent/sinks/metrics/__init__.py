"""Prometheus metrics of the agent: every metric is defined here, in one place, on an injected registry.

Other modules receive an :class:`AgentMetrics` and call its small typed methods; they never touch
``prometheus_client`` themselves. The pure core (detect, correlate, policy) must not import this module.

Conventions: names ``fault_agent_*``, the unit in the name (``_seconds``, ``_total``, ``_bytes``), and only
labels with a small, bounded set of values (kinds, levels, results, resource names) — never a pod, job or node
name, which would make one time series per object.

``/metrics`` serves :attr:`AgentMetrics.exposed`: the same series, each with a constant ``cluster`` label (the
``cluster_name`` setting), so alerts and dashboards can tell clusters apart on a Prometheus shared by many; one
constant value per process adds no series.

The package by topic: :mod:`~agent.sinks.metrics.families` (:class:`AgentMetrics`: every family and the methods
that report to it), :mod:`~agent.sinks.metrics.labels` (buckets and the label values known at start) and
:mod:`~agent.sinks.metrics.exposure` (the constant labels of ``/metrics``, label values). Callers import the public
names from here.
"""

from agent.sinks.metrics.exposure import ConstantLabels, agent_version, with_constant_labels
from agent.sinks.metrics.families import AgentMetrics
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
    TASK_NAMES,
    WATCH_EVENT_TYPES,
    WATCH_RESOURCES,
    WATCH_RESTART_REASONS,
)

__all__ = [
    "ACTION_RESULTS",
    "AGENT_MODES",
    "DECISION_BUCKETS_S",
    "DETECTION_LAG_BUCKETS_S",
    "FAILURE_REASONS",
    "FAULT_KINDS",
    "FAULT_SOURCES",
    "FAULT_SOURCE_VALUES",
    "FAULT_STAGES",
    "GRACE_WAITS",
    "GRACE_WAIT_ENDS",
    "JOB_KINDS",
    "KAFKA_ERROR_REASONS",
    "LAG_SOURCES",
    "OBSERVED_RECOVERY_ACTIONS",
    "PUBLISH_RESULTS",
    "QUEUES",
    "RECOVERY_ACTIONS",
    "RECOVERY_BUCKETS_S",
    "TASK_NAMES",
    "WATCH_EVENT_TYPES",
    "WATCH_RESOURCES",
    "WATCH_RESTART_REASONS",
    "AgentMetrics",
    "ConstantLabels",
    "agent_version",
    "with_constant_labels",
]
