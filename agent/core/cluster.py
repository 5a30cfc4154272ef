"""Slim records of watched objects: only the fields the agent decides on, never whole objects.

Sources (`agent/sources/`) build these from raw watch JSON; the pure core (detect, correlate, policy) reads
them. All are immutable `__slots__` dataclasses so a cached pod costs a few hundred bytes, and strings that
repeat across objects (node names, namespaces, phases, label values) are interned by the sources.
Field meanings follow the Kubernetes API (core/v1 Pod and Node), Volcano `batch.volcano.sh/v1alpha1` Job and
MindCluster's `mindxdl.gitee.com/v1` AscendJob (see shared/DOMAIN.md §1.4 and §2).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime


class JobKind(enum.StrEnum):
    """The training-job APIs the agent acts on."""

    VOLCANO = "vcjob"  # batch.volcano.sh/v1alpha1 Job
    ASCEND = "acjob"  # mindxdl.gitee.com/v1 AscendJob
    JOBSET = "jobset"  # jobset.x-k8s.io/v1alpha2 JobSet (Kubeflow Trainer v2's TrainJob runs as one)

    @property
    def api_kind(self) -> str:
        """The Kubernetes kind of the job: ``Job`` (Volcano), ``AscendJob`` or ``JobSet``."""
        return _JOB_APIS[self][3]

    @classmethod
    def from_api_kind(cls, kind: str) -> JobKind:
        """The job kind of a Kubernetes kind name as a job record stores it: ``Job`` (Volcano), ``JobSet``, anything
        else (``AscendJob``, or "" from a record that does not say) AscendJob, as records were read before JobSets.
        Never raises."""
        return _FROM_API_KIND.get(kind, JobKind.ASCEND)

    @property
    def api_group(self) -> str:
        """The job's API group: ``batch.volcano.sh`` (Volcano's Job CRD), ``mindxdl.gitee.com`` (the Ascend
        Operator's AscendJob CRD, MindCluster ``component/ascend-operator/pkg/api/v1/groupversion_info.go``) or
        ``jobset.x-k8s.io`` (sigs.k8s.io/jobset ``api/jobset/v1alpha2``)."""
        return _JOB_APIS[self][0]

    @property
    def api_version(self) -> str:
        """The job's API version: ``v1alpha1`` (Volcano), ``v1`` (AscendJob) or ``v1alpha2`` (JobSet)."""
        return _JOB_APIS[self][1]

    @property
    def plural(self) -> str:
        """The job's resource plural: ``jobs`` (Volcano), ``ascendjobs`` or ``jobsets``."""
        return _JOB_APIS[self][2]


_JOB_APIS: dict[JobKind, tuple[str, str, str, str]] = {
    JobKind.VOLCANO: ("batch.volcano.sh", "v1alpha1", "jobs", "Job"),
    JobKind.ASCEND: ("mindxdl.gitee.com", "v1", "ascendjobs", "AscendJob"),
    JobKind.JOBSET: ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
}
"""(group, version, plural, kind) of each job kind's API."""
_FROM_API_KIND = {kind: k for k, (_, _, _, kind) in _JOB_APIS.items()}


class FaultScheduling(enum.StrEnum):
    """Value of the job's `fault-scheduling` label."""

    FORCE = "force"  # delete the job's pods at once (grace 0, UID precondition)
    GRACE = "grace"  # normal deletion, force after grace-over-time
    OFF = "off"  # absent or "off": record and publish only
    EXTERNAL_FORCE = "external-force"  # delete nothing: mark each fault pod for an outside component
    EXTERNAL_GRACE = "external-grace"  # the same (MindCluster treats the two alike)

    @property
    def external(self) -> bool:
        """``external-force`` or ``external-grace``: the agent deletes nothing and marks each fault pod with
        ``huawei.com/pod-status: Unhealthy-<fault type>`` for an outside component to act on (MindCluster
        ``internal/rescheduling/job.go`` ``restartSingleFaultJob``, ``addPodStatusAnnotation``; values in
        ``internal/rescheduling/type.go`` ``JobExternalForceReschedulingPrefix``,
        ``JobExternalGraceReschedulingPrefix``)."""
        return self in (FaultScheduling.EXTERNAL_FORCE, FaultScheduling.EXTERNAL_GRACE)

    @property
    def opted_in(self) -> bool:
        """Any value but ``off``: the agent acts on the job's faults (deleting, or marking for ``external-*``)."""
        return self is not FaultScheduling.OFF


@dataclass(frozen=True, slots=True)
class ContainerTermination:
    """A container's last terminated state: `state.terminated` or `lastState.terminated`."""

    container: str
    exit_code: int
    reason: str  # e.g. "Error", "OOMKilled", "Completed"
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class JobRef:
    """A reference to a training job: how a pod belongs to one (from Volcano/AscendJob labels or the controller
    ownerReference), and the job a write acts on. :class:`JobRecord` is the job itself, as watched.

    Attributes:
        uid: the job's UID (a pod's link has it when an ownerReference names it; a write is conditioned on it).
        version: volcano.sh/job-version annotation or AscendJob `version` label, on a pod's link; else "".
    """

    kind: JobKind
    namespace: str
    name: str
    uid: str = ""
    version: str = ""

    def __str__(self) -> str:
        return f"{self.kind.api_kind}/{self.namespace}/{self.name}"

    @property
    def key(self) -> JobKey:
        """(kind, namespace, name): what the job is found by in the state cache."""
        return (self.kind, self.namespace, self.name)


UNLIMITED_BACKOFF = -1
"""An AscendJob's backoff limit when neither ``spec.runPolicy.backoffLimit`` nor the ``fault-retry-times`` label
sets one: unlimited (Ascend Operator ``unsetBackoffLimits``, component/ascend-operator/pkg/controllers/v1/consts.go)."""

JobKey = tuple[JobKind, str, str]
"""(kind, namespace, name) of a training job: the key of the state cache's job index."""


@dataclass(frozen=True, slots=True)
class PodRecord:
    """One pod, slimmed.

    Attributes:
        chips: chip names from the `huawei.com/Ascend910`-style allocation annotation, e.g. ("Ascend910-0",).
        rank: `hccl/rankIndex` annotation as int, or None.
        terminations: the containers' terminated states (current or last), if any.
        deletion_timestamp: set while the pod is terminating.
        disruption: reason of a True `DisruptionTarget` condition or `status.reason == "Evicted"`, else "".
        restart_policy: `spec.restartPolicy` (Always, OnFailure, Never; "" when not read). With anything but
            Never the kubelet restarts a failed container inside the Running pod by itself.
        replica_type: the ``training.kubeflow.org/replica-type`` label (``master``, ``worker``, …; "" when absent).
            MindCluster's master rule reads it (:func:`agent.core.policy.is_master_pod`).
        fault_type: ClusterD's ``fault-type`` label (``Separate``, ``SubHealth``, ``software``; "" when absent),
            read as a fault by agent.core.detect.pods.
        need_volcano_ope: the ``needVolcanoOpe`` annotation ("" when absent): ``delete`` is ClusterD's request,
            during a hot switch of a ``subHealthyStrategy: hotSwitch`` job, that the scheduler delete this pod
            (MindCluster ``component/ascend-common/api/consts.go`` ``NeedVolcanoOpeKey``, ``OpeTypeDelete``; written by
            ``component/clusterd/pkg/application/recover/hot_switch_controller.go`` ``notifyDeleteOldPod``,
            ``notifyStopJob``).
    """

    namespace: str
    name: str
    uid: str
    resource_version: str
    node: str  # spec.nodeName, "" while unscheduled
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    ready: bool  # the Ready condition is True
    job: JobRef | None
    chips: tuple[str, ...]
    rank: int | None
    terminations: tuple[ContainerTermination, ...]
    deletion_timestamp: datetime | None
    disruption: str
    status_reason: str  # status.reason, e.g. "Evicted", "Preempting"
    created_at: datetime | None
    restart_policy: str = ""
    replica_type: str = ""
    fault_type: str = ""
    need_volcano_ope: str = ""
    input_hash: int = field(default=0, compare=False, repr=False)
    """A hash of every part of the raw pod the converter read (agent.sources.pods.pod_input_hash), 0 when not
    known: a later write of the pod with the same hash converts to the same record, so the watch skips it."""


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """A node condition: type (Ready, KernelDeadlock, …), status ("True"/"False"/"Unknown"); last_heartbeat is
    its lastHeartbeatTime (the kubelet's, kept as is when the node lifecycle controller marks Ready Unknown);
    message its message, kept only while a condition other than Ready is True (at most 1024 characters, the
    length NVSentinel's connector caps it at), "" otherwise."""

    type: str
    status: str
    reason: str
    last_transition: datetime | None
    last_heartbeat: datetime | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule, PreferNoSchedule, NoExecute


NODE_SN_ANNOTATION = "product-serial-number"
"""The node annotation holding its serial number, which public faults may name instead of the node
(MindCluster ``api.NodeSNAnnotation``, component/ascend-common/api/consts.go)."""


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One node, slimmed: conditions, taints, the labels the agent uses, NPU allocatable."""

    name: str
    uid: str
    resource_version: str
    conditions: tuple[NodeCondition, ...]
    taints: tuple[Taint, ...]
    labels: tuple[tuple[str, str], ...]  # only host-arch, accelerator-type, and other configured keys
    unschedulable: bool
    npu_allocatable: int | None  # e.g. huawei.com/Ascend910 allocatable count
    annotations: tuple[tuple[str, str], ...] = ()  # only the configured keys (the quarantine hold, the node SN)
    npu_capacity: int | None = None  # the same resource's capacity: every chip, healthy or not
    npu_resource: str = ""  # which resource that is, e.g. "huawei.com/Ascend910" ("" when the node has none)

    def annotation(self, key: str) -> str | None:
        """The value of annotation `key` when the record kept it, else None."""
        for k, v in self.annotations:
            if k == key:
                return v
        return None

    def condition(self, type_: str) -> NodeCondition | None:
        """The condition of that type, or None."""
        for c in self.conditions:
            if c.type == type_:
                return c
        return None


@dataclass(frozen=True, slots=True)
class ConfigMapRecord:
    """A watched ConfigMap (device plugin, NodeD, fault config, ClusterD, rings-config): its data as-is.

    The detectors parse `data`; keeping the raw strings lets them fast-path unchanged content.
    """

    namespace: str
    name: str
    uid: str
    resource_version: str
    labels: tuple[tuple[str, str], ...]
    data: dict[str, str]


@dataclass(frozen=True, slots=True)
class PodGroupRecord:
    """A watched Volcano PodGroup (``scheduling.volcano.sh/v1beta1``): only what names its job and the
    ``ProcessRecoverStrategy`` annotation MindCluster's rescheduler reads from it
    (``component/ascend-for-volcano/internal/rescheduling/job.go`` ``isDealFaultByExternal``).

    Attributes:
        owner_kind: the job kind of its controller ownerReference (None when it has none or another kind).
        owner_name: that owner's name ("" when none).
        owner_uid: that owner's UID ("" when none).
        process_recover_strategy: the ``ProcessRecoverStrategy`` annotation's value, None when absent.
        labels: its labels that MindCluster's scheduler reads as the job's fault-tolerance settings
            (agent.core.job_labels.SETTING_LABELS), sorted.
    """

    namespace: str
    name: str
    uid: str
    resource_version: str
    owner_kind: JobKind | None
    owner_name: str
    owner_uid: str
    process_recover_strategy: str | None
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A Volcano Job or AscendJob, slimmed to its fault-tolerance settings and status.

    The fault-tolerance settings and `labels` are read as MindCluster's scheduler reads them: from the job's
    PodGroup's labels merged with its pods' (agent.core.job_labels.job_view; the state applies it whenever the job
    or its PodGroup changes).

    Attributes:
        fault_scheduling: the `fault-scheduling` label (OFF when absent or unknown).
        fault_retry_times: the `fault-retry-times` label (business-failure retries), None when absent.
        pod_rescheduling: the `pod-rescheduling: on` label.
        max_retry: Volcano `spec.maxRetry` (default 3) or the AscendJob's backoff limit: `spec.runPolicy.backoffLimit`,
            else the `fault-retry-times` label, else :data:`UNLIMITED_BACKOFF` (-1) as the Ascend Operator reads it;
            the operator treats any limit ≤ 0 as unlimited (:func:`agent.core.policy.restart_budget`).
        phase: Volcano `status.state.phase`, or for AscendJob the phase its True conditions give by the operator's
            rules (agent.sources.jobs.ascend_phase: Failed, Succeeded, Restarting, Running, Created, first wins).
        version: Volcano `status.version`; for an AscendJob the Ascend Operator's restart counter, which it keeps
            on the job's pods only (their `version` label): the highest among the job's current pods, else the
            last one seen (agent.sources.state fills it in); as text, "" when unknown.
        retry_count: Volcano `status.retryCount`; for an AscendJob the same counter as `version`, as a number
            (restarts the operator counted against its backoff limit: every deleted pod of the current version
            bumps it, whoever deleted it).
        annotations: only the agent's own annotations (incident state, retry ledger, lineage).
        process_recover: the `process-recover-enable: on` label (ClusterD/TaskD recover the processes: only the
            faulty pods are deleted, never the whole job unless the master is hit).
        process_recover_strategy: the job's ``ProcessRecoverStrategy`` annotation (None when absent), or its
            PodGroup's when the job has none (agent.engine.views.StateJobs fills it in from the state): when
            present an external platform recovers the job and the agent deletes nothing.
        process_recover_strategy_from: where `process_recover_strategy` was read: ``job`` or ``PodGroup``.
        restarts_on_eviction: a Volcano Job whose controller answers a deleted pod of any of its tasks with a
            whole-job ``RestartJob`` (its lifecycle policies; agent.sources.jobs.restarts_on_eviction): deleting
            its pods restarts it as a RestartJob Command would. False for an AscendJob.
        recover_policy_path: the job's ``huawei.com/recover_policy_path`` (``pod``: rescheduling never goes beyond
            the fault pods, see :attr:`pod_only`), "" when absent (agent.sources.jobs.recover_policy_path).
        recover_policy_path_from: where it was read, for the reasons (e.g. ``the pod template's annotation``).
        job_labels: the job object's own labels among those kept (`labels` before the merge below).
        template_labels: the fault-tolerance labels of each of the job's pod templates (its pods carry them).
        operator_process_recover: an AscendJob whose PodGroup the Ascend Operator labels `process-recover-enable=on`
            (it has the `recover-strategy` annotation and at least one label).
        settings_from: where `labels` and the settings above were read (agent.core.job_labels.job_view): ``job``
            (its own labels standing in for its PodGroup's) or ``PodGroup <name>``, merged with the templates'.
        max_retry_from: where `max_retry` was read, for the reasons a person reads: ``spec.maxRetry``,
            ``Volcano's default maxRetry``, ``spec.runPolicy.backoffLimit``, ``the fault-retry-times label (no
            spec.runPolicy.backoffLimit)``, or "" (an AscendJob with neither: unlimited).
    """

    kind: JobKind
    namespace: str
    name: str
    uid: str
    resource_version: str
    generation: int
    labels: tuple[tuple[str, str], ...]
    fault_scheduling: FaultScheduling
    fault_retry_times: int | None
    pod_rescheduling: bool
    sub_healthy_strategy: str
    max_retry: int
    min_available: int | None
    phase: str
    version: str
    retry_count: int
    annotations: tuple[tuple[str, str], ...]
    created_at: datetime | None
    process_recover: bool = False
    process_recover_strategy: str | None = None
    process_recover_strategy_from: str = "job"
    restarts_on_eviction: bool = False
    max_retry_from: str = ""
    recover_policy_path: str = ""
    recover_policy_path_from: str = ""

    @property
    def pod_only(self) -> bool:
        """Rescheduling of this job is limited to its fault pods (``huawei.com/recover_policy_path: pod``): only the
        pods on faulty hardware (or the failed pod) are deleted, never the whole job, not even for rank 0, and a
        pod-level restart is never escalated (MindCluster ``internal/rescheduling/job.go`` ``setReScheduleLimit``,
        ``allowUpgradePodRescheduling``, ``isNormalTaskCanBeDelete``; ``reschedule.go``
        ``singlePodReschedulingUpgrade``)."""
        return self.recover_policy_path == "pod"

    job_labels: tuple[tuple[str, str], ...] = ()
    template_labels: tuple[tuple[tuple[str, str], ...], ...] = ()
    operator_process_recover: bool = False
    settings_from: str = "job"

    def label(self, key: str) -> str | None:
        """A label's value, or None."""
        for k, v in self.labels:
            if k == key:
                return v
        return None

    def annotation(self, key: str) -> str | None:
        """One of the agent's annotations, or None."""
        for k, v in self.annotations:
            if k == key:
                return v
        return None


DOWN_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
"""Taints the node lifecycle controller puts on a node whose kubelet stopped reporting."""


def node_is_down(node: NodeRecord | None) -> bool:
    """Whether a pod on `node` cannot stop by itself: the node is gone (None), its Ready condition is not True, or
    it carries an unreachable or not-ready taint. A pod there never runs its graceful exit (its kubelet does not
    answer), so waiting for it is time lost. Pure."""
    if node is None:
        return True
    ready = node.condition("Ready")
    if ready is not None and ready.status != "True":
        return True
    return any(t.key in DOWN_TAINTS for t in node.taints)
