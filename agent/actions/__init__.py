"""The only cluster writers: restarts, pod deletions, rings-config reset, quarantine taints, job annotations."""

from agent.actions.recovery import (
    GraceFinished,
    RestartPlan,
    RestartWriter,
    finish_force,
    finish_grace,
    finish_grace_wait,
    restart_job,
)
from agent.actions.results import ActionResult, Outcome, combine
from agent.actions.writer import ClusterWriter, PodRef, error_detail

__all__ = [
    "ActionResult",
    "ClusterWriter",
    "GraceFinished",
    "Outcome",
    "PodRef",
    "RestartPlan",
    "RestartWriter",
    "combine",
    "error_detail",
    "finish_force",
    "finish_grace",
    "finish_grace_wait",
    "restart_job",
]
