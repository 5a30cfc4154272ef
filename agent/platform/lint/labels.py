"""The job labels' rules (shared/DOMAIN.md §2): fault-scheduling, fault-retry-times, pod-rescheduling,
subHealthyStrategy, ring-controller.atlas, and the grace-over-time label a job cannot set."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.core.cluster import FaultScheduling
from agent.core.detect.common import json_type
from agent.core.job_labels import FAULT_RETRY_TIMES_LABEL, FAULT_SCHEDULING_LABEL, POD_RESCHEDULING_LABEL
from agent.core.job_labels import SUB_HEALTHY_LABEL as SUB_HEALTHY_STRATEGY_LABEL
from agent.platform.builders import (
    GRACE_OVER_TIME_LABEL,
    RING_CONTROLLER_LABEL,
    SUB_HEALTHY_STRATEGIES,
)
from agent.platform.lint.common import (
    WARNING,
    Checker,
    int_label,
)


def check_labels(c: Checker, labels: Mapping[str, Any], *, gpu: bool = False) -> tuple[str | None, int | None]:
    """Label rules; returns (fault-scheduling, fault-retry-times) when valid. `gpu`: a GPU job (no NPU rules)."""
    for key, value in labels.items():
        if not isinstance(value, str):
            c.add(
                f"metadata.labels.{key}",
                "label-not-string",
                f'label values must be strings, got {json_type(value)} {value!r}; quote it: {key}: "{value}"',
            )
    scheduling = labels.get(FAULT_SCHEDULING_LABEL)
    known = [s.value for s in FaultScheduling]
    if isinstance(scheduling, str) and scheduling not in known:
        c.add(
            f"metadata.labels.{FAULT_SCHEDULING_LABEL}",
            "fault-scheduling-unknown",
            f"unknown fault-scheduling {scheduling!r}; use one of {', '.join(known)}",
        )
        scheduling = None
    retry_times = int_label(c, labels, FAULT_RETRY_TIMES_LABEL, 0, 100, "fault-retry-times-invalid")
    if GRACE_OVER_TIME_LABEL in labels:
        # MindCluster reads grace-over-time only from its scheduler plugin's arguments (scheduler-wide), never
        # from a job (component/ascend-for-volcano/plugin/factory.go getGraceDeleteTime); so does the
        # agent (policy.grace_over_time_s). The label is harmless but misleading: warn, do not fail the file.
        c.add(
            f"metadata.labels.{GRACE_OVER_TIME_LABEL}",
            "grace-over-time-label-ignored",
            "grace-over-time is not read from a job: it is a scheduler-wide setting (MindCluster: the Volcano "
            "plugin argument grace-over-time; this agent: policy.grace_over_time_s, env "
            "FAULT_AGENT_POLICY__GRACE_OVER_TIME_S, default 900 s, 2–3600); remove the label",
            WARNING,
        )
    rescheduling = labels.get(POD_RESCHEDULING_LABEL)
    if isinstance(rescheduling, str) and rescheduling not in ("on", "off"):
        c.add(
            f"metadata.labels.{POD_RESCHEDULING_LABEL}",
            "pod-rescheduling-invalid",
            f"pod-rescheduling must be 'on' or 'off', got {rescheduling!r}",
        )
    strategy = labels.get(SUB_HEALTHY_STRATEGY_LABEL)
    if isinstance(strategy, str) and strategy not in SUB_HEALTHY_STRATEGIES:
        c.add(
            f"metadata.labels.{SUB_HEALTHY_STRATEGY_LABEL}",
            "sub-healthy-strategy-invalid",
            f"subHealthyStrategy must be one of {', '.join(SUB_HEALTHY_STRATEGIES)}, got {strategy!r}",
        )
    if not gpu and (not isinstance(labels.get(RING_CONTROLLER_LABEL), str) or not labels.get(RING_CONTROLLER_LABEL)):
        c.add(
            "metadata.labels",
            "ring-controller-missing",
            f"the job has no {RING_CONTROLLER_LABEL} label; NPU jobs need it (e.g. ascend-910b)",
        )
    return (scheduling if isinstance(scheduling, str) else None), retry_times
