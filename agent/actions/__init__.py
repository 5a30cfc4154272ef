"""The only cluster writers: restarts, pod deletions, rings-config reset, quarantine taints, job annotations."""

from agent.actions.recovery import RestartPlan, RestartWriter, finish_force, finish_grace, restart_job
from agent.actions.results import ActionResult, Outcome, combine
from agent.actions.writer import ClusterWriter, PodRef, error_detail

__all__ = [
    "ActionResult",
    "ClusterWriter",
    "Outcome",
    "PodRef",
    "RestartPlan",
    "RestartWriter",
    "combine",
    "error_detail",
    "finish_force",
    "finish_grace",
    "restart_job",
]
