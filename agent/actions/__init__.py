"""The only cluster writers: restarts, pod deletions, rings-config reset, quarantine taints, job annotations."""

from agent.actions.recovery import RestartPlan, RestartWriter, finish_force, finish_grace, restart_job
from agent.actions.results import ActionResult, Outcome, combine
from agent.actions.writer import ClusterWriter, PodRef

__all__ = [
    "ActionResult",
    "ClusterWriter",
    "Outcome",
    "PodRef",
    "RestartPlan",
    "RestartWriter",
    "combine",
    "finish_force",
    "finish_grace",
    "restart_job",
]
