"""Recovery policy: what to do about one fault for one job. Pure: no I/O, no clock reads (time is passed in).

The rules follow MindCluster's fault levels and job labels (shared/DOMAIN.md §2–§3) and the lessons in
DESIGN.md (evictions never eat the retry budget, the agent's own restarts are not new failures):

- job not opted in (``fault-scheduling`` off/absent) → record and publish only;
- job already finished → nothing; job ``Failed`` after a hardware fault → resubmit while the configured
  limit allows (off by default);
- parameter-plane network fault → nothing (the job's own failure, if any, is what restarts it);
- chip / node level ``NotHandleFault`` → nothing; ``SubHealthFault`` → the job's ``subHealthyStrategy``
  (``ignore`` by default, ``graceExit``, ``forceExit``, ``hotSwitch``: nothing until ClusterD asks for a pod's
  deletion with ``needVolcanoOpe: delete``, then that pod as forceExit) when every fault of the job is
  sub-health, else the normal path; ``PreSeparate*`` → leave the running job alone (the
  node is marked, see :func:`quarantine_for`); ``RestartRequest`` … ``ManuallySeparateNPU`` → restart the job,
  or only the hit pods with ``pod-rescheduling=on`` or ``process-recover-enable=on`` unless a master pod is
  among them (:func:`is_master_pod`);
- a job with the ``ProcessRecoverStrategy`` annotation is recovered by an external platform: the agent deletes
  nothing (HAND_OFF) and only records and publishes the fault and the recovery;
- disruption (eviction, preemption, drain) → restart without consuming any budget;
- business failure → restart while the ``fault-retry-times`` budget lasts, then abort; a pod the agent itself
  stopped is never a new failure;
- both controllers count **every** restart (business, hardware, pod-level or disruption, whoever asked): a
  Volcano Job fails at the restart that brings ``status.retryCount`` to ``spec.maxRetry`` (it survives
  ``maxRetry - 1`` restarts), an AscendJob at the restart that brings its pods' ``version`` above its backoff
  limit (``spec.runPolicy.backoffLimit``, else the ``fault-retry-times`` label; ≤ 0 or unset is unlimited: the
  breaker and the rate limit still bound the restarts). No decision promises a restart past that (see
  :func:`restart_budget`); used up → abort.

Modules: ``decision`` (the answer's shape: :class:`Action`, :class:`Decision`), ``budget`` (the retry ledger and the
controllers' restart limits), ``reasons`` (the words of a decision's reason), ``rules`` (:func:`decide`: the rules
by fault kind and level), ``escalation`` (a pod-level restart that becomes a whole-job restart). This package's
names are the public face.
"""

from agent.core.policy.budget import (
    MAX_AGENT_PODS_KEPT,
    RetryLedger,
    controller_ended_job,
    controller_name,
    restart_budget,
)
from agent.core.policy.decision import (
    UNLIMITED_RESTARTS,
    Action,
    Decision,
    volcano_deletion_outdated,
    volcano_restart_by_deletion,
)
from agent.core.policy.escalation import (
    escalation_decision,
    pending_escalation,
)
from agent.core.policy.reasons import (
    restart_limit_text,
    restart_policy_note,
    restarts_text,
)
from agent.core.policy.rules import (
    FLAPPING_REASON,
    POD_STATUS_ANNOTATION,
    POD_STATUS_UNHEALTHY,
    REPLICA_TYPE_WORKER,
    STUCK_TERMINATING_REASON,
    decide,
    end_of_budget_pods,
    is_flapping,
    is_master_pod,
    is_sub_health_only,
    pod_status_value,
)

__all__ = [
    "FLAPPING_REASON",
    "MAX_AGENT_PODS_KEPT",
    "POD_STATUS_ANNOTATION",
    "POD_STATUS_UNHEALTHY",
    "REPLICA_TYPE_WORKER",
    "STUCK_TERMINATING_REASON",
    "UNLIMITED_RESTARTS",
    "Action",
    "Decision",
    "RetryLedger",
    "controller_ended_job",
    "controller_name",
    "decide",
    "end_of_budget_pods",
    "escalation_decision",
    "is_flapping",
    "is_master_pod",
    "is_sub_health_only",
    "pending_escalation",
    "pod_status_value",
    "restart_budget",
    "restart_limit_text",
    "restart_policy_note",
    "restarts_text",
    "volcano_deletion_outdated",
    "volcano_restart_by_deletion",
]
