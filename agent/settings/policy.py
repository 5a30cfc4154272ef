"""``policy.*``: what the agent may do about a fault (restart modes, grace, budgets, breaker, taints)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from agent.settings.common import (
    Group,
    valid_object_name,
    valid_taint_key,
)


class PolicySettings(Group):
    """Acting on faults: act or observe, how jobs are restarted, graces, deadlines, rate limit, breaker, taints."""

    mode: Literal["act", "observe"] = Field(
        "act",
        description="act: detect, decide and restart jobs. observe: for a cluster where another rescheduler acts "
        "(MindCluster's Volcano plugin, Volcano's own job policies): detect, correlate and publish the faults, "
        "record the recovery time of the restarts someone else makes (recovery.* events and "
        "fault_agent_recovery_seconds with acted_by=observed), and write nothing to the cluster.",
    )
    dry_run: bool = Field(
        False,
        description="Shadow mode (with mode=act): decide, log and publish what the agent would do, but write "
        "nothing to the cluster.",
    )
    volcano_restart: Literal["command", "delete-pods", "auto"] = Field(
        "auto",
        description="How a whole-job restart of a Volcano Job is made. auto (default): delete its pods, as "
        "MindCluster's plugin does, when its lifecycle policies answer a deleted pod of every task with "
        "RestartJob (the integration guide's PodEvicted -> RestartJob), else a RestartJob Command; delete-pods: "
        "always delete the pods (a job without that policy only gets them re-created); command: always a "
        "Command. Deletion stops the first old pod at the agent's own write, where a Command waits in Volcano's "
        "controller queue first (p50 ~0.1 s against ~1.9 s under load with Volcano's default controller "
        "settings: bench/RESULTS.md). Volcano counts a restart by deletion once in status.retryCount (its "
        "spec.maxRetry budget), as a Command's; when its controller lags, it may first re-create the deleted "
        "pods under the old version and kill them in that same restart: docs/mindcluster-parity.md. A Running job "
        "whose pods all carry a volcano.sh/job-version below its status.version (pods that escaped such a kill) "
        "gets a Command in auto and delete-pods: Volcano would only re-sync their deletion, uncounted.",
    )
    grace_over_time_s: float = Field(
        900.0,
        ge=2,
        le=3600,
        description="Seconds a grace-mode job may take to exit before its pods are force-deleted; "
        "900 matches the vendor default.",
    )
    grace_exit_wait_s: float = Field(
        60.0,
        ge=0,
        le=3600,
        description="subHealthyStrategy=graceExit: seconds to wait, after setting GracefulExit 1 in the job's "
        "reset-config, for its pods' training processes to exit (save their dying-gasp checkpoint; a pod counts "
        "once it is gone, Succeeded/Failed or not Ready) before the grace deletion; 0 deletes at once as "
        "MindCluster does.",
    )
    hot_switch_wait_s: float = Field(
        1200.0,
        ge=10,
        le=86400,
        description="subHealthyStrategy=hotSwitch: seconds after a sub-health fault within which ClusterD is "
        "expected to have switched the pod to a backup pod and annotated it needVolcanoOpe=delete (the agent "
        "deletes nothing before that, as MindCluster). Past it, with the fault still on the job and no such "
        'annotation, the agent logs, counts (fault_agent_actions_total{action="hot-switch-wait",result='
        '"timeout"}) and publishes a job.misconfigured event, and leaves the job running as with ignore '
        "(ClusterD's own fallback); a later annotation is still honoured. 1200 = ClusterD's own bounds (1 min for "
        "the backup pod to run, 15 min for the pause report; "
        "component/clusterd/pkg/application/recover/hot_switch_controller.go, controller.go) plus a margin.",
    )
    recovery_deadline_s: float = Field(
        1800.0, ge=10, le=86400, description="An incident not recovered within this is failed."
    )
    pending_escalation_s: float = Field(
        12.0,
        ge=1,
        le=3600,
        description="Seconds the replacement pods of a pod-level restart (pod-rescheduling: on) may stay unbound "
        "before the agent restarts the whole job instead, once per incident. MindCluster's plugin escalates after "
        "12 scheduling sessions (PendingTimes); 12 s is 12 sessions at Volcano's default --schedule-period of 1 s: "
        "set it to 12 × your scheduler's period.",
    )
    restart_rate_per_min: float = Field(
        10.0, gt=0, le=10000, description="Cluster-wide restart token bucket refill rate."
    )
    restart_burst: int = Field(5, ge=1, le=10000, description="Token bucket size.")
    breaker_node_share: float = Field(
        0.2, gt=0, le=1, description="Share of watched nodes turning faulty within the window that trips the breaker."
    )
    breaker_window_s: float = Field(
        300.0,
        ge=10,
        le=86400,
        description="Breaker window; default 5 min. A fault counts at its own signal time when the agent's first lists "
        "read it (a standing fault), else at the later of that and when the agent read it.",
    )
    breaker_min_faulty_nodes: int = Field(
        2,
        ge=1,
        le=100000,
        description="Distinct faulty nodes needed at least before the breaker may trip, so one bad node in a "
        "small cluster does not stop the agent.",
    )
    breaker_configmap: str = Field(
        "fault-agent-breaker",
        description="ConfigMap (in leader.namespace) holding the breaker state; `fault-agent breaker reset` "
        "writes state=closed there and the agent follows it.",
    )
    resubmit_limit: int = Field(
        0,
        ge=0,
        le=100,
        description="Resubmissions of a job that failed on hardware (deleted and created again from its spec); "
        "0 = off. The only use of the ClusterRole's create/delete on jobs and ascendjobs.",
    )
    bookkeeping: bool = Field(
        True,
        description="Write MindCluster's bookkeeping as its Volcano plugin does: volcano-system/vcjob-fault-npu-cm "
        "key remain-retry-times, an entry for every job whose fault-scheduling is not off as soon as it is seen "
        "(the Ascend Operator fails a job with fault-retry-times > 0 at its first failed pod without one) and "
        "after each restart, and mindx-dl/job-reschedule-reason key recent-reschedule-records after each "
        "restart. Off: neither is written.",
    )
    admission_check: Literal["refuse", "warn", "off"] = Field(
        "refuse",
        description="Fail closed (mode act, not dry-run): at start and every admission_check_interval_s the agent "
        "sends, as itself, a server-side dry-run create its admission policy must deny (ConfigMap "
        "fault-agent-admission-probe in leader.namespace; deploy/admission-policy.yaml). refuse: while that write "
        "is not denied by the policy (policy or binding missing, a binding or matchCondition naming another "
        "identity, or the check not answered yet), decide but restart, delete or resubmit nothing (decision "
        "'refused: admission policy not in force', fault_agent_admission_policy_in_force 0, an error log line, "
        "alert FaultAgentAdmissionPolicyNotInForce); the held-back faults are decided again once it is in force. "
        "warn: the same log line, metric and alert, but act anyway (an agent run as a person, e.g. on a test "
        "cluster). off: no check.",
    )
    admission_check_interval_s: float = Field(
        60.0,
        ge=1,
        le=3600,
        description="Seconds between two admission checks: how long a removed policy or binding goes unnoticed at "
        "most, for one dry-run request per interval per replica (deploy/README.md, 'Fail closed').",
    )
    taint_key: str = Field(
        "fault-agent.io/fault",
        description="Taint key the agent sets to quarantine nodes (NoSchedule); an annotation with the same key "
        "on the node (written by earlier versions for flapping chips) keeps the node quarantined until its time.",
    )
    sub_health_taint: bool = Field(
        True,
        description="Quarantine a node with a card (chip SubHealthFault) or switch (NodeStatus SubHealthy) "
        "sub-health fault with the taint <taint_key>=SubHealthFault:NoSchedule while the fault lasts, so a job "
        "restarted for it (subHealthyStrategy graceExit, forceExit) is not placed straight back there: MindCluster's "
        "scheduler refuses such nodes to every job whose subHealthyStrategy is not ignore "
        "(component/ascend-for-volcano/internal/rescheduling/reschedule.go checkNodeCurNodeIsFault). A job that may "
        "use them (ignore) tolerates the taint by its value (key <taint_key>, operator Equal, value "
        "SubHealthFault, effect NoSchedule). Off: sub-health never taints.",
    )
    defer_to_nvsentinel: bool = Field(
        True,
        description="Leave a node NVSentinel holds to NVSentinel: while the node carries its marks (label "
        "dgxc.nvidia.com/nvsentinel-state, a cordon-by=NVSentinel label, or the annotation "
        "quarantineHealthEventIsCordoned=True) the agent adds no quarantine taint of its own there and lifts one it "
        "set before NVSentinel took the node (NVSentinel's cordon keeps new pods off; the taint comes back should "
        "NVSentinel let the node go while the fault lasts); it still restarts the jobs hit, which NVSentinel never "
        "does. Off: the agent taints as on any node.",
    )

    @field_validator("breaker_configmap")
    @classmethod
    def _breaker_name(cls, value: str) -> str:
        return valid_object_name(value)

    @field_validator("taint_key")
    @classmethod
    def _valid_taint_key(cls, value: str) -> str:
        return valid_taint_key(value)
