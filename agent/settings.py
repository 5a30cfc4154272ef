"""Agent settings: defaults < YAML file < environment (`FAULT_AGENT_`, nested with `__`).

Example: ``FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS=127.0.0.1:9092`` sets ``kafka.bootstrap_servers``.
The YAML file is given by ``--config`` or ``FAULT_AGENT_CONFIG``; ``config/agent.yaml`` documents every default.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as PydanticSettingsError

ENV_PREFIX = "FAULT_AGENT_"
CONFIG_ENV = "FAULT_AGENT_CONFIG"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# Kubernetes' object-name and label/taint-key rules (k8s.io/apimachinery/pkg/util/validation): a DNS-1123
# subdomain, and a qualified name (optional subdomain prefix, '/', a 1-63 character name)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def _object_name(value: str) -> str:
    """`value` if it is a valid Kubernetes object name (DNS-1123 subdomain, at most 253 characters)."""
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError("an object name is a DNS-1123 subdomain: lower-case letters, digits, '-' and '.'")
    return value


def _taint_key(value: str) -> str:
    """`value` if it is a valid taint key (a qualified name: `[prefix/]name`, as label keys)."""
    prefix, _, name = value.rpartition("/")
    if not _QUALIFIED_NAME.fullmatch(name) or (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix))):
        raise ValueError(
            "a taint key is [prefix/]name: a DNS-1123 subdomain prefix and a 1-63 character name of letters, "
            "digits, '-', '_' and '.'"
        )
    return value


_HOST_PORT = r"\s*(\[[0-9A-Fa-f:.]+\]|[^\s,:\[\]]+):\d{1,5}\s*"  # host:port, [IPv6]:port
_HOST_PORTS = re.compile(f"{_HOST_PORT}(,{_HOST_PORT})*")


class SettingsError(Exception):
    """The settings could not be loaded. `str()` is one message naming each bad setting."""


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KubeSettings(_Group):
    kubeconfig: str | None = Field(
        None,
        description="Path of a kubeconfig; unset means in-cluster service account, then $KUBECONFIG, "
        "then ~/.kube/config.",
    )
    context: str | None = Field(None, description="kubeconfig context; unset means the current context.")
    namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces whose pods, jobs, PodGroups and progress Leases are watched; empty means all "
        "namespaces. Set, the RBAC may be namespaced too (deploy-namespaced/, the chart with this set): the agent "
        "checks at start that it may list and watch every collection its settings name and does not start "
        "otherwise.",
    )
    job_label_selector: str = Field(
        "", description="Label selector applied to Volcano Jobs and AscendJobs; empty selects all."
    )
    device_info_namespace: str = Field(
        "kube-system", description="Namespace of the device plugin's mindx-dl-deviceinfo-<node> ConfigMaps."
    )
    node_info_namespace: str = Field(
        "mindx-dl", description="Namespace of NodeD's mindx-dl-nodeinfo-<node> ConfigMaps."
    )
    fault_config_namespace: str = Field(
        "kube-system", description="Namespace of the fault-level override ConfigMap mindx-dl-fault-config."
    )
    fault_source: Literal["auto", "per-node", "clusterd"] = Field(
        "auto",
        description="Where chip, NodeD, switch and public faults are read, one source only, as MindCluster's "
        "scheduler reads one (plugin argument useClusterInfoManager, true in every shipped manifest: "
        "component/ascend-for-volcano/common/k8s/cmmgr.go InitCmInformer). clusterd: ClusterD's cluster-info-* "
        "ConfigMaps (label mx-consumer-volcano=true) in node_info_namespace, its processed view (public faults "
        "merged, faults silenced per job by PodGroup annotations, retryable faults held back while a job recovers "
        "in place, unused PreSeparateNPU chips unhealthy, its own isolations); public-fault ConfigMaps are then "
        "not read (ClusterD merged them). per-node: the device plugin's mindx-dl-deviceinfo-*, NodeD's "
        "mindx-dl-nodeinfo-* and the public-fault ConfigMaps, for clusters without ClusterD. auto (default): "
        "clusterd when ClusterD's cluster-info-* ConfigMaps exist at start, else per-node; decided once at start "
        "and logged (fault source) with fault_agent_fault_source; the agent warns, and sets "
        "fault_agent_clusterd_unread, while ClusterD's ConfigMaps exist and are not read (restart it after "
        "installing ClusterD). Never both: acting on the raw view beside ClusterD's restarts jobs ClusterD is "
        "recovering in place.",
    )
    public_fault_enabled: bool = Field(
        True,
        description="Also watch MindCluster public-fault ConfigMaps (label mc-consumer-publicfault=true) that "
        "other monitors (CCAE, pingmesh, ...) write, with fault_source per-node (with clusterd, ClusterD merged "
        "them into its view); a cheap label-selected watch, on by default.",
    )
    podgroup_info_enabled: bool = Field(
        True,
        description="Watch Volcano PodGroups (scheduling.volcano.sh podgroups, get/list/watch) in the watched "
        "namespaces to read a job's fault-tolerance labels (fault-scheduling, fault-retry-times, pod-rescheduling, "
        "process-recover-enable, subHealthyStrategy: the PodGroup's merged with the pod templates') and a "
        "ProcessRecoverStrategy annotation where MindCluster reads them: the Ascend Operator labels the PodGroup "
        "process-recover-enable=on from recover-strategy, ClusterD sets it to pause, a platform may set the "
        "annotation at runtime. Off: the job's own labels and annotation count (for a ClusterRole without "
        "podgroups).",
    )
    dra: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Watch Dynamic Resource Allocation (resource.k8s.io/v1 resourceslices, cluster-wide, and "
        "resourceclaims in the watched namespaces; list/watch) so a chip fault naming a device (a GPU UUID or PCI "
        "address, an NPU's name) hits only the pods whose ResourceClaims hold that device (docs/dra.md). auto "
        "(default): on when the apiserver serves resource.k8s.io/v1 (Kubernetes 1.34+), decided once at start and "
        "logged; a cluster without it keeps per-node and annotation correlation. on: always (the agent does not "
        "start without the API's read grants). off: never (for a ClusterRole without resource.k8s.io reads).",
    )
    jobsets_enabled: bool = Field(
        False,
        description="Also watch JobSets (jobset.x-k8s.io/v1alpha2 jobsets, get/list/watch; Kubeflow Trainer v2's "
        "TrainJob runs as one) in the watched namespaces and act on those labelled fault-scheduling like the other "
        "jobs (docs/jobset.md): restarted by deleting their pods, which fails a child Job and makes JobSet restart "
        "the JobSet within its own spec.failurePolicy. Off by default: a cluster without the JobSet CRD would "
        "never finish its first list.",
    )
    progress_leases_enabled: bool = Field(
        True,
        description="Watch the training-progress heartbeat Leases (coordination.k8s.io leases labelled "
        "fault-agent.io/progress=lease, get/list/watch) in the watched namespaces, for hang detection of the jobs "
        "labelled fault-agent.io/progress: lease (docs/progress.md); a label-selected watch, cheap. Off: no hang "
        "detection (for a ClusterRole without leases).",
    )
    events_enabled: bool = Field(
        True,
        description="Write Kubernetes Events (events.k8s.io/v1, reportingController fault-agent.io/agent) on the "
        "jobs and nodes for each decision and action, so kubectl describe shows them; rate-limited and de-duplicated "
        "as client-go's recorder does. Never in dry-run or observe mode (they write nothing). Off: none (for a "
        "ClusterRole without events create/patch).",
    )
    public_fault_namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces watched for public-fault ConfigMaps; empty means all namespaces.",
    )
    npu_resource_names: list[str] = Field(
        default_factory=lambda: ["huawei.com/Ascend910", "huawei.com/npu"],
        description="Resource names of NPUs, tried in order: the pod annotation listing its chips and the "
        "node's allocatable count use them; newer products use huawei.com/npu.",
    )
    node_label_keys: list[str] = Field(
        default_factory=lambda: ["host-arch", "accelerator-type", "node.kubernetes.io/npu.chip.name"],
        description="Node labels kept in the cache (all others are dropped to keep it small).",
    )
    watch_timeout_s: int = Field(
        300,
        ge=10,
        le=3600,
        description="Server-side timeoutSeconds of one watch request; 300 s keeps streams short-lived "
        "so a broken load balancer path cannot hold one for long.",
    )
    inactivity_deadline_s: float = Field(
        90.0,
        ge=5,
        le=3600,
        description="Seconds without any event or bookmark after which a watch is considered silent and "
        "replaced; the apiserver sends bookmarks about every 60 s.",
    )
    list_page_size: int = Field(
        500, ge=10, le=10000, description="Objects per page of the initial list (limit/continue)."
    )
    request_timeout_s: float = Field(
        10.0,
        ge=1,
        le=300,
        description="Deadline of each request the agent sends while acting (Command, pod deletion, taint, "
        "annotation, the reads around them); one that takes longer is retried like a connection error.",
    )
    backoff_initial_s: float = Field(0.5, gt=0, le=60, description="First retry delay after a watch error.")
    backoff_max_s: float = Field(30.0, gt=0, le=600, description="Ceiling of the jittered exponential backoff.")

    @field_validator("npu_resource_names")
    @classmethod
    def _resource_names(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError(
                "at least one NPU resource name is needed: with none, no pod's chips are known and no chip fault "
                "reaches a job"
            )
        for name in value:
            prefix, _, base = name.partition("/")
            if not (
                prefix and len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix) and _QUALIFIED_NAME.fullmatch(base)
            ):
                raise ValueError(
                    f"{name!r} is no extended resource name: <DNS-1123 subdomain>/<1-63 letters, digits, '-', '_' "
                    "or '.'>, e.g. huawei.com/Ascend910"
                )
        return value

    @model_validator(mode="after")
    def _backoff_ordered(self) -> KubeSettings:
        if self.backoff_initial_s > self.backoff_max_s:
            raise ValueError(
                f"backoff_initial_s ({self.backoff_initial_s}) must not exceed backoff_max_s ({self.backoff_max_s})"
            )
        return self


class KafkaSettings(_Group):
    enabled: bool = Field(True, description="Publish events to Kafka; off means the outbox only.")
    bootstrap_servers: str = Field("127.0.0.1:9092", description="Comma-separated host:port list.")

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_ports(cls, value: str) -> str:
        if not _HOST_PORTS.fullmatch(value):
            raise ValueError("expected host:port[,host:port...], e.g. 127.0.0.1:9092 or kafka-0:9092,kafka-1:9092")
        return value

    client_id: str = Field("fault-agent", description="Kafka client.id, visible in broker logs and quotas.")
    faults_topic: str = Field("training.faults", description="Topic for fault detected/cleared events.")
    recoveries_topic: str = Field("training.recoveries", description="Topic for recovery and breaker events.")
    create_topics: bool = Field(
        False, description="Create missing topics at start; off in production where topics are managed."
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="Kafka security.protocol."
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="SASL mechanism when security_protocol is SASL_*."
    )
    sasl_username: str | None = Field(None, description="SASL user name.")
    sasl_password: str | None = Field(None, description="SASL password (prefer an env var from a Secret).")
    ssl_cafile: str | None = Field(
        None,
        description="PEM file of the CA certificates that signed the brokers' certificates (security_protocol SSL or "
        "SASL_SSL); unset: the system's CAs. The chart's kafkaTLS values mount it from a Secret and set it.",
    )
    ssl_certfile: str | None = Field(
        None,
        description="PEM file of the client certificate (and its chain) for brokers that require TLS client "
        "authentication; unset: none is sent.",
    )
    ssl_keyfile: str | None = Field(
        None,
        description="PEM file of the client certificate's private key, unencrypted; unset: the key is in ssl_certfile.",
    )
    ssl_check_hostname: bool = Field(
        True,
        description="Check that a broker's certificate names the host the agent connects to (the bootstrap "
        "address, then the advertised one). Turn off only for brokers whose certificates cannot carry their "
        "addresses; the certificate is still verified against the CA.",
    )
    linger_ms: int = Field(
        0,
        ge=0,
        le=1000,
        description="The aiokafka producer's batching delay, ms. 0: a batch goes out as soon as the broker "
        "connection is free, and events arriving while a request is in flight fill the next batch (batches are as "
        "large as the backlog); more only delays every event by that much.",
    )
    compression_type: Literal["gzip", "snappy", "lz4", "zstd"] | None = Field(
        "gzip", description="Producer compression; gzip needs no extra native library."
    )
    queue_size: int = Field(
        10000,
        ge=10,
        le=1_000_000,
        description="Events handed to the producer (or waiting for it) and not yet acknowledged; beyond it "
        "publishers wait up to 1 s for room, then the outbox replays.",
    )
    outbox_dir: str = Field(
        "/var/lib/fault-agent/outbox",
        description="Durable on-disk outbox (a PVC in deploy/). Every event is written and fsync'd here before the "
        "agent treats it as sent or acts on the step it describes, whatever Kafka does; group commit adds no delay "
        "of its own: an event is on disk within two write + fsync rounds (publish() p99 42 ms on the project's "
        "2-core machine at load average 16; fsync p99 15 ms at load 3).",
    )
    outbox_peers_dir: str = Field(
        "",
        description="A directory whose subdirectories are the outboxes of this agent's other processes (deploy/: "
        "one per pod on the shared volume, kafka.outbox_dir inside it). At start, each one no live process holds is "
        "taken over: its events are moved to this process's outbox, in order, and sent, and it is deleted; a running "
        "process looks again every kafka.outbox_adopt_interval_s, so the events a replica that died had accepted "
        "are sent by a live one within that interval (a process still stopping holds its outbox). The volume must "
        "honour flock across nodes (NFSv4, CephFS; not NFS mounted with nolock or local_lock). Empty: none.",
    )
    outbox_adopt_interval_s: float = Field(
        5.0,
        ge=0,
        le=3600,
        description="While running, how often the outboxes under kafka.outbox_peers_dir are looked at again: one no "
        "live process holds (a replica that died while this one runs) is taken over through this process's own "
        "commit path and sent. 5 s keeps a dead leader's events ahead of its successor's (whose term opens a "
        "Lease duration, 15 s, after the dead leader's last renewal). A dead replica's undelivered events reach "
        "Kafka within this + 10 s of Kafka being reachable after the death (the soak checks it). 0: only at start.",
    )
    flush_deadline_s: float = Field(
        10.0,
        gt=0,
        le=120,
        description="On shutdown, seconds to wait for deliveries; what is left stays in the outbox for the next start.",
    )
    outbox_max_bytes: int = Field(
        1024**3,
        ge=1024 * 1024,
        le=1024**4,
        description="Outbox size limit, bytes; beyond it new events are dropped (logged and counted). "
        "1 GiB holds about a million events.",
    )
    request_timeout_ms: int = Field(
        10000,
        ge=1000,
        le=300000,
        description="Producer request timeout; a batch not acknowledged in this time fails and is replayed "
        "from the outbox. 10 s instead of the client's 40 s so an outage is noticed sooner.",
    )
    spill_after_s: float = Field(
        5.0,
        gt=0,
        le=300,
        description="Events not acknowledged by Kafka within this many seconds are replayed from the outbox, with "
        "everything queued behind them (they are on disk already); 5 s is well above a healthy broker's acks=all "
        "latency.",
    )
    max_batch_bytes: int = Field(
        262144, ge=16384, le=16 * 1024 * 1024, description="Producer batch size per partition, bytes."
    )
    replay_batch: int = Field(
        2000, ge=1, le=100000, description="Outbox events sent per replay round before the outbox cursor moves."
    )
    topic_partitions: int = Field(6, ge=1, le=10000, description="Partitions of topics the agent creates.")
    topic_replication_factor: int = Field(
        3, ge=1, le=16, description="Replication factor of topics the agent creates (1 on a one-broker testbed)."
    )


class DetectSettings(_Group):
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


class PolicySettings(_Group):
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
        "pods under the old version and kill them in that same restart: docs/mindcluster-parity.md.",
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
        return _object_name(value)

    @field_validator("taint_key")
    @classmethod
    def _valid_taint_key(cls, value: str) -> str:
        return _taint_key(value)


class ServerSettings(_Group):
    bind_address: str = Field("0.0.0.0", description="Address of the /metrics, /healthz, /readyz server.")
    port: int = Field(8080, ge=0, le=65535, description="Port of the HTTP server; 0 picks a free one.")
    metrics_auth: Literal["none", "kubernetes"] = Field(
        "none",
        description="Who may read /metrics. none: anyone who reaches the port. kubernetes: a bearer token the "
        "apiserver authenticates (TokenReview) whose user may get the non-resource URL /metrics "
        "(SubjectAccessReview; ClusterRole fault-agent-metrics-reader), as controller-runtime's "
        "WithAuthenticationAndAuthorization; /healthz and /readyz stay open for the kubelet. deploy/ and the chart "
        "set kubernetes; none is the default for an agent run outside a cluster.",
    )
    loop_lag_limit_s: float = Field(
        5.0,
        gt=0,
        le=300,
        description="Event loop lag (seconds a 1 s heartbeat runs late) above which /healthz fails; 5 s is far "
        "above normal jitter yet well inside the liveness probe's window.",
    )


class LeaderSettings(_Group):
    enabled: bool = Field(True, description="Use a coordination.k8s.io Lease so only one replica acts.")
    namespace: str = Field(
        "fault-agent",
        description="Namespace of the Lease, the breaker ConfigMap and the job records (fault-agent-job-<job UID>: "
        "each job's incident, ledger and claim).",
    )
    name: str = Field("fault-agent-leader", description="Name of the Lease.")
    identity: str | None = Field(
        None, description="Holder identity; default the pod name (HOSTNAME) plus a random suffix per process."
    )
    lease_duration_s: float = Field(15.0, ge=2, le=600, description="Lease duration; client-go's default.")
    renew_deadline_s: float = Field(10.0, ge=1, le=600, description="Leader gives up if not renewed in this.")
    retry_period_s: float = Field(2.0, gt=0, le=60, description="Standby retry period.")

    @field_validator("name")
    @classmethod
    def _lease_name(cls, value: str) -> str:
        return _object_name(value)

    @field_validator("namespace")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not _DNS_LABEL.fullmatch(value):
            raise ValueError("a namespace name is a DNS label: 1-63 lower-case letters, digits and '-' inside")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> LeaderSettings:
        # client-go's rule: retry < renew deadline < lease duration, else two leaders can overlap.
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                f"need retry_period_s < renew_deadline_s < lease_duration_s, got {self.retry_period_s} / "
                f"{self.renew_deadline_s} / {self.lease_duration_s}"
            )
        return self


class LogSettings(_Group):
    level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    format: Literal["auto", "json", "console"] = Field(
        "auto", description="'auto' is key-value on a terminal and JSON otherwise (containers)."
    )


class RecordSettings(_Group):
    dir: str | None = Field(
        None,
        description="Folder the watches are recorded to (gzip JSON lines, agent.kube.record); None records nothing. "
        "`fault-agent run --record DIR` sets it.",
    )
    max_bytes: int = Field(
        1 << 30,
        ge=1 << 12,
        description="Total size of the recording (bytes, compressed) above which the oldest segments are deleted; "
        "1 GiB holds days of a 1,000-node cluster's watches.",
    )
    max_age_s: float = Field(
        7 * 86400.0,
        gt=0,
        description="Segments whose every line is older than this (seconds) are deleted; a week, so last week's "
        "history can be replayed.",
    )
    segment_bytes: int = Field(
        64 << 20,
        ge=1 << 12,
        description="Compressed size (bytes) at which a segment is closed and the next one started; 64 MiB keeps "
        "a file easy to copy into a bug report and retention fine-grained.",
    )
    flush_interval_s: float = Field(
        1.0,
        gt=0,
        le=60,
        description="Seconds between writes of the buffered lines (one gzip member each); a crash loses at most "
        "this much.",
    )
    buffer_max_bytes: int = Field(
        64 << 20,
        ge=1 << 16,
        description="Uncompressed bytes buffered between flushes beyond which lines are dropped (counted, logged "
        "once), so a slow disk never grows the agent's memory without bound.",
    )
    compress_level: int = Field(
        6, ge=1, le=9, description="gzip level of the segments; 6 is gzip's default balance of speed and size."
    )


class PrometheusSettings(_Group):
    url: str = Field(
        "",
        description="Base URL of the Prometheus whose HTTP API (GET /api/v1/query) gives the training progress of "
        "the jobs labelled fault-agent.io/progress: prometheus (docs/progress.md), e.g. "
        "http://prometheus-operated.monitoring:9090. Empty: no Prometheus source; such jobs are reported once "
        "(no-prometheus-url) and not followed.",
    )
    interval_s: float = Field(
        30.0,
        ge=1,
        le=3600,
        description="Seconds between two evaluations of every opted-in job's queries (one instant query per job "
        "and query). The hang timeout of such a job is never below three intervals. 30 s matches the heartbeat "
        "Lease's default interval: 1,000 jobs are ~33 queries a second.",
    )
    timeout_s: float = Field(
        5.0,
        gt=0,
        le=60,
        description="Seconds one query may take (sent to Prometheus as its own timeout too); a query past it counts "
        "as Prometheus unreachable for that round (no data, never a hang).",
    )
    concurrency: int = Field(8, ge=1, le=256, description="Queries in flight at once.")
    step_query: str = Field(
        "",
        description="PromQL template of a job's last completed training step when the job has no "
        "fault-agent.io/progress-query annotation (or job_queries is false); {namespace} and {job} are replaced by "
        "the job's namespace and name. It must give one number (a scalar or one series), e.g. "
        'max(training_step{namespace="{namespace}",job_name="{job}"}). Empty: jobs must carry the annotation.',
    )
    step_time_query: str = Field(
        "",
        description="PromQL template of a job's recent seconds per step (optional; derives its hang timeout as the "
        "Lease's step time does), used with step_query. Empty: no step time; the ceiling applies without a label.",
    )
    job_queries: bool = Field(
        True,
        description="Let a job's own annotations fault-agent.io/progress-query and "
        "fault-agent.io/progress-step-time-query choose its queries. The agent evaluates them with its own "
        "Prometheus credentials (read-only; only the number is used); false: only the settings' templates run.",
    )
    bearer_token_file: str | None = Field(
        None,
        description="File holding a bearer token sent to Prometheus (read at every query, so a rotated token is "
        "picked up), e.g. the pod's ServiceAccount token behind a kube-rbac-proxy. None: no Authorization header.",
    )
    ca_file: str | None = Field(
        None, description="PEM CA bundle that verifies an https Prometheus; None: the system's trust store."
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
            raise ValueError("prometheus.url is http(s)://host[:port][/path], without query or fragment")
        return value.rstrip("/")


class Settings(BaseSettings):
    """All agent settings. Build with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    cluster_name: str = Field("default", min_length=1, description="Cluster name used in event `source` and metrics.")
    kube: KubeSettings = Field(default_factory=KubeSettings)  # type: ignore[arg-type]
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)  # type: ignore[arg-type]
    detect: DetectSettings = Field(default_factory=DetectSettings)  # type: ignore[arg-type]
    policy: PolicySettings = Field(default_factory=PolicySettings)  # type: ignore[arg-type]
    server: ServerSettings = Field(default_factory=ServerSettings)  # type: ignore[arg-type]
    leader: LeaderSettings = Field(default_factory=LeaderSettings)  # type: ignore[arg-type]
    log: LogSettings = Field(default_factory=LogSettings)  # type: ignore[arg-type]
    record: RecordSettings = Field(default_factory=RecordSettings)  # type: ignore[arg-type]
    prometheus: PrometheusSettings = Field(default_factory=PrometheusSettings)  # type: ignore[arg-type]

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # init (the YAML file's content, passed by load_settings) is the lowest priority after defaults;
        # the environment wins over the file.
        return (env_settings, init_settings)


# FAULT_AGENT_* variables that are not settings: the config file's path and the testbed's own variables.
NOT_SETTINGS = frozenset({CONFIG_ENV, "FAULT_AGENT_TESTBED_DIR", "FAULT_AGENT_TESTBED_CACHE"})


def _names_a_setting(parts: list[str]) -> bool:
    """Whether the levels `parts` (upper case, as in an environment variable) name a group or a setting."""
    model: type[BaseModel] | None = Settings
    for part in parts:
        if model is None:  # levels below a single setting
            return False
        field = {name.upper(): f for name, f in model.model_fields.items()}.get(part)
        if field is None:
            return False
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
        elif get_origin(ann) is dict:
            return True  # a mapping setting: deeper levels are its keys
        else:
            model = None
    return True


def _unknown_environment() -> list[str]:
    """FAULT_AGENT_* variables that name no setting (a typo such as a single `_` between levels, a misspelled
    group or setting, or levels below a single setting)."""
    unknown = []
    for key in os.environ:
        if not key.startswith(ENV_PREFIX) or key in NOT_SETTINGS:
            continue
        if not _names_a_setting(key[len(ENV_PREFIX) :].split("__")):
            unknown.append(key)
    return sorted(unknown)


def _unknown_variable(key: str) -> str:
    """The problem line of a FAULT_AGENT_* variable that names no setting, with the nearest one when any."""
    dotted = ".".join(p.lower() for p in key[len(ENV_PREFIX) :].split("__"))
    if dotted in REMOVED_SETTINGS:
        return f"{key}: was replaced by {REMOVED_SETTINGS[dotted]}: the agent reads one fault source, never both"
    near = nearest_setting(dotted)
    hint = f"; did you mean {ENV_PREFIX + near.replace('.', '__').upper()} ({near})?" if near else ""
    return f"{key}: names no setting (levels are joined with '__'){hint}"


def _json_shape(ann: Any) -> str | None:
    """How a setting of type `ann` is written in the environment when it takes JSON there, else None."""
    if get_origin(ann) in (Union, types.UnionType):
        shapes = [_json_shape(a) for a in get_args(ann) if a is not type(None)]
        return next((shape for shape in shapes if shape is not None), None)
    if get_origin(ann) in (list, tuple, set, frozenset):
        return 'a JSON list, e.g. \'["a","b"]\''
    if get_origin(ann) is dict:
        return 'a JSON object, e.g. \'{"key":"value"}\''
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "a JSON object of its settings, or one variable per setting (levels joined with '__')"
    return None


def _unparsable_environment() -> dict[str, str]:
    """FAULT_AGENT_* variables of list, mapping or group settings whose value is not JSON, each with a problem
    line naming the variable and how to write it."""
    problems = {}
    for key, value in os.environ.items():
        if not key.startswith(ENV_PREFIX) or key in NOT_SETTINGS:
            continue
        model: type[BaseModel] = Settings
        parts = key[len(ENV_PREFIX) :].split("__")
        ann: Any = None
        for i, part in enumerate(parts):
            field = {name.upper(): f for name, f in model.model_fields.items()}.get(part)
            if field is None:
                ann = None  # names no setting: reported by _unknown_environment
                break
            ann = field.annotation
            if i < len(parts) - 1:
                if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
                    ann = None  # a mapping's key, or levels below a single setting
                    break
                model = ann
        shape = _json_shape(ann)
        if shape is None:
            continue
        try:
            json.loads(value)
        except ValueError:
            dotted = ".".join(p.lower() for p in parts)
            problem = f"{key}: setting {dotted!r} takes {shape}; got {value!r}, which is not JSON"
            if shape.startswith("a JSON list"):  # the likely intent: comma-separated items
                items = json.dumps([v.strip() for v in value.split(",") if v.strip()], separators=(",", ":"))
                problem += f" (write {key}='{items}')"
            problems[key] = problem
    return problems


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SettingsError(f"config file {path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise SettingsError(f"config file {path}: cannot read: {e.strerror or e}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SettingsError(f"config file {path}: not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path}: top level must be a mapping, got {type(data).__name__}")
    return data


def _all_setting_names() -> list[str]:
    """Every setting's dotted name (``policy.breaker_window_s``), groups first-level names included."""
    names: list[str] = []
    for name, info in Settings.model_fields.items():
        names.append(name)
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            names += [f"{name}.{sub}" for sub in ann.model_fields]
    return names


def nearest_setting(dotted: str) -> str | None:
    """The setting whose dotted name is closest to `dotted` (a typo in a file or a variable), or None when none is
    close. Compares within the same group first, then across all settings."""
    names = _all_setting_names()
    group, _, leaf = dotted.rpartition(".")
    if group:
        siblings = [n.rpartition(".")[2] for n in names if n.startswith(group + ".")]
        close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
        if close:
            return f"{group}.{close[0]}"
    close = difflib.get_close_matches(dotted, names, n=1, cutoff=0.6)
    return close[0] if close else None


REMOVED_SETTINGS: dict[str, str] = {
    "kube.cluster_info_enabled": "kube.fault_source: clusterd (ClusterD's cluster-info-* alone) or auto",
    "kube.device_info_enabled": "kube.fault_source: per-node (the device plugin's and NodeD's ConfigMaps) or auto",
    "kube.node_info_enabled": "kube.fault_source: per-node (the device plugin's and NodeD's ConfigMaps) or auto",
}
"""Settings that were replaced (issue 36, item 7) → what to set instead; a file or variable still setting one is
refused with this hint."""


def _describe(err: ValidationError, origin: str) -> str:
    lines = []
    for item in err.errors():
        name = ".".join(str(p) for p in item["loc"])
        if item["type"] == "extra_forbidden" and name in REMOVED_SETTINGS:
            lines.append(
                f"{name!r} was replaced by {REMOVED_SETTINGS[name]}: the agent reads one fault source, never both"
            )
            continue
        if item["type"] == "extra_forbidden":  # a typo: name the nearest setting, not a variable that does not exist
            near = nearest_setting(name)
            hint = f"; did you mean {near!r} [{ENV_PREFIX + near.replace('.', '__').upper()}]?" if near else ""
            lines.append(f"{name!r} names no setting{hint} (`fault-agent settings --defaults` lists them all)")
            continue
        env = ENV_PREFIX + "__".join(str(p) for p in item["loc"]).upper()
        value = item.get("input")
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        lines.append(f"setting {name!r} [{env}]: {item['msg']}{shown}")
    return f"invalid settings{origin}:\n  " + "\n  ".join(lines)


def load_settings(config_file: str | os.PathLike[str] | None = None) -> Settings:
    """Load settings from defaults, then the YAML file, then `FAULT_AGENT_*` environment variables.

    Args:
        config_file: YAML path; when None, ``$FAULT_AGENT_CONFIG`` if set, else no file.

    Raises:
        SettingsError: unreadable or malformed file, or a value out of range; the message names each
            bad setting with its dotted name and environment variable.
    """
    path_text = config_file if config_file is not None else os.environ.get(CONFIG_ENV)
    data: dict[str, Any] = _read_yaml(Path(path_text)) if path_text else {}
    origin = f" (file {path_text} and environment)" if path_text else " (environment)"
    unknown = [_unknown_variable(key) for key in _unknown_environment()]
    unparsable = _unparsable_environment()
    unknown += [unparsable[key] for key in sorted(unparsable)]
    # FAULT_AGENT_CONFIG names the file, it is not a setting; unknown and unparsable variables are left out of
    # the model, so that the other values are still checked and every problem is reported at once.
    hidden = {
        key: os.environ.pop(key) for key in [CONFIG_ENV, *_unknown_environment(), *unparsable] if key in os.environ
    }
    try:
        settings = Settings(**data)
    except ValidationError as e:
        # every problem at once: the unknown variables and each bad value
        problems = "\n  ".join([*unknown, _describe(e, origin).split(":\n  ", 1)[1]])
        raise SettingsError(f"invalid settings{origin}:\n  {problems}") from e
    except PydanticSettingsError as e:
        # e.g. a list or group given as plain text: the environment needs JSON for those.
        raise SettingsError(
            f"invalid settings{origin}: {e}; list settings take JSON in the environment, "
            'e.g. FAULT_AGENT_KUBE__NAMESPACES=\'["train","eval"]\''
        ) from e
    finally:
        os.environ.update(hidden)
    if unknown:
        raise SettingsError("invalid settings (environment):\n  " + "\n  ".join(unknown))
    return settings
