"""``kube.*``: the Kubernetes client, the watched namespaces and sources, list+watch retries."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from agent.settings.common import (
    DNS_SUBDOMAIN,
    QUALIFIED_NAME,
    Group,
)


class KubeSettings(Group):
    """The Kubernetes API: how to reach it, what to watch (namespaces, objects, fault sources), watch pacing."""

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
                prefix and len(prefix) <= 253 and DNS_SUBDOMAIN.fullmatch(prefix) and QUALIFIED_NAME.fullmatch(base)
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
