"""``detect.*``: the detectors' thresholds (flaps, hangs, stragglers, node conditions, GPU checks)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from agent.settings.common import (
    Group,
)


class DetectSettings(Group):
    """Turning signals into faults: node readiness and conditions, flapping chips, training hangs and stragglers."""

    node_not_ready_grace_s: float = Field(
        5.0,
        ge=0,
        le=600,
        description="Seconds a node may be NotReady/Unknown before it is a node fault; Kubernetes itself "
        "waits 40 s + 300 s, far too long for a training job.",
    )
    node_health_recheck_s: float = Field(
        50.0,
        ge=0,
        le=600,
        description="After the agent's node watch lost the apiserver and came back: seconds a node that is not "
        "Ready waits for a heartbeat of its own (a newer Ready lastHeartbeatTime) before it is "
        "believed down; readiness written during the outage is not trusted and its grace counts from the "
        "watch's return. 50 s is kube-controller-manager's node-monitor-grace-period.",
    )
    problem_condition_types: list[str] = Field(
        default_factory=lambda: [
            "KernelDeadlock",
            "ReadonlyFilesystem",
            "NPUProblem",
            "GPUProblem",
            "SysLogsXIDError",
            "SysLogsSXIDError",
            "SysLogsGPUFallenOff",
            "GpuInforomWatch",
            "GpuMemWatch",
            "GpuPcieWatch",
            "GpuNvlinkWatch",
            "GpuNvLinkWatch",
            "GpuDriverWatch",
            "GpuThermalWatch",
            "GpuPowerWatch",
            "GpuNvSwitchFatalWatch",
        ],
        description="Node conditions that mean a node fault when True: node-problem-detector's, and the GPU "
        "conditions of node-problem-detector plugins (GPUProblem) and of NVSentinel (one per health check: "
        "SysLogsXIDError, Gpu*Watch, ...; docs/nvsentinel.md). A GPU condition's level comes from its XID or "
        "NVSentinel's recommended action (agent.core.detect.gpu), any other's is SeparateNPU.",
    )
    check_code_mismatch: Literal["use", "ignore"] = Field(
        "use",
        description="What to do with a ConfigMap whose CheckCode does not match: 'use' the data and flag "
        "the fault, or 'ignore' the update.",
    )
    flap_threshold: int = Field(
        3,
        ge=0,
        le=100,
        description="The agent's catch-all flapping rule, beside MindCluster's per-code rules "
        "(faultCustomization.json): a chip with this many faults of any codes at RestartRequest or above within "
        "flap_window_s is isolated (ManuallySeparateNPU); 0 turns the catch-all off (MindCluster has none).",
    )
    flap_window_s: float = Field(
        86400.0, ge=60, le=30 * 86400, description="Window of the catch-all flapping rule; vendor default 24 h."
    )
    isolation_release_s: float = Field(
        86400.0,
        ge=60,
        le=365 * 86400,
        description="A chip the agent isolated for flapping under a rule without a ReleaseTimeWindow is released "
        "after it has been healthy this long. MindCluster keeps such a chip out until an operator clears it from "
        "the device ConfigMap's ManuallySeparateNPU key (which the agent also reads); the agent writes no device "
        "ConfigMap, so its own isolation ends after this. 24 h matches the vendor's frequency windows.",
    )
    isolated_chips_taint: int = Field(
        4,
        ge=0,
        le=64,
        description="Isolated (flapping) chips on one node that quarantine the whole node (NoSchedule taint); "
        "fewer isolate only their chips, as MindCluster does, unless the node can no longer hold a pod of a job "
        "they hit (then it is quarantined at once: the agent has no per-chip lever). 4 = half of an 8-NPU "
        "server: past that the node cannot host a half-node job anyway and the cause is likelier the board than "
        "the chips. 0: never.",
    )

    @field_validator("flap_threshold")
    @classmethod
    def _flap_threshold(cls, value: int) -> int:
        if value == 1:
            raise ValueError("flap_threshold 1 would isolate every chip at its first fault; use 0 (off) or >= 2")
        return value

    stuck_terminating_s: float = Field(
        30.0, ge=1, le=3600, description="A terminating pod on a NotReady node older than this is stuck."
    )
    public_fault_default_level: Literal[
        "NotHandleFault",
        "SubHealthFault",
        "RestartRequest",
        "RestartBusiness",
        "FreeRestartNPU",
        "RestartNPU",
        "PreSeparateNPU",
        "SeparateNPU",
        "ManuallySeparateNPU",
    ] = Field(
        "SubHealthFault",
        description="Level of a public fault whose code has no level in the level table or the "
        "mindx-dl-fault-config overrides. Public-fault codes are user-defined by third-party monitors, so "
        "their severity is unknown: by default such a fault never restarts or isolates a job on its own; "
        "list the code in mindx-dl-fault-config to make it act.",
    )
    hang_timeout_floor_s: float = Field(
        180.0,
        ge=5,
        le=86400,
        description="Least hang timeout derived from a job's step time (a job without the "
        "fault-agent.io/hang-timeout-s label): seconds without a new training step before the job counts as hung. "
        "3 minutes stays clear of a slow step, an evaluation pass or a data-loader stall.",
    )
    hang_timeout_ceiling_s: float = Field(
        1800.0,
        ge=5,
        le=604800,
        description="Greatest derived hang timeout, and the timeout of a job whose heartbeat gives no step time: "
        "1800 s is HCCL's default collective timeout (HCCL_EXEC_TIMEOUT), after which the job would fail by itself.",
    )
    hang_step_time_multiple: float = Field(
        10.0,
        ge=1,
        le=1000,
        description="A derived hang timeout is this many step times (then clamped to the floor and the ceiling): "
        "10 steps without progress is far outside a healthy job's step-time jitter.",
    )
    hang_checkpoint_max_s: float = Field(
        3600.0,
        ge=5,
        le=604800,
        description="Least hang timeout while the heartbeat says a checkpoint is being written "
        "(fault-agent.io/checkpointing: true): writing a large checkpoint can take many minutes, and a checkpoint "
        "write that never ends is still caught after this.",
    )
    straggler_step_time_multiple: float = Field(
        1.5,
        gt=1,
        le=100,
        description="A pod rank of a job labelled fault-agent.io/straggler (docs/progress.md) is slow in a heartbeat "
        "window when its step time is above this many times the window's median (the lower median) over the job's "
        "ranks: 1.5 is far outside the few percent by which healthy ranks of one job differ.",
    )
    straggler_windows: int = Field(
        3,
        ge=1,
        le=1000,
        description="Consecutive heartbeat windows (writes whose step moved) a rank must be slow in to be a "
        "straggler, and fast again in for its episode to end: one slow window (a data-loader hiccup, a "
        "checkpoint on one rank) is not a straggler.",
    )
    straggler_min_ranks: int = Field(
        2,
        ge=2,
        le=20000,
        description="Fewest pod ranks a window must report to be judged: with fewer there is no median to compare "
        "with. 2 suits the guide's two-pod jobs (the lower median is the faster pod).",
    )
    straggler_avoid_hold_s: float = Field(
        3600.0,
        ge=0,
        le=604800,
        description="How long the node of a straggler of a job labelled fault-agent.io/straggler: avoid stays "
        "marked sub-healthy (policy.sub_health_taint) after its episode ended by anything but its recovery (the job "
        "restarted, went, or its heartbeat went), so the restart that replaced the slow pod does not land on the "
        "node again. Seconds.",
    )

    @model_validator(mode="after")
    def _hang_bounds(self) -> DetectSettings:
        if self.hang_timeout_floor_s > self.hang_timeout_ceiling_s:
            raise ValueError("detect.hang_timeout_floor_s must not exceed detect.hang_timeout_ceiling_s")
        return self
