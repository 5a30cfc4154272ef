"""Typed builders for fault-tolerant training jobs: Volcano Job, AscendJob, JobSet and the rings-config ConfigMap (plus
the reset-config ConfigMap a ``pod-rescheduling: on`` or ``subHealthyStrategy: graceExit`` job needs).

Core types (ConfigMap, PodTemplateSpec, Container, …) are `kubernetes_asyncio` model classes; the CRDs
(`batch.volcano.sh/v1alpha1` Job, `mindxdl.gitee.com/v1` AscendJob) are plain dicts in wire format (camelCase
keys, as the apiserver takes them). The fields and labels are the ones MindCluster's integration guide sets
(see shared/DOMAIN.md §2): `ring-controller.atlas`, `fault-scheduling`, `fault-retry-times`, `framework`,
`tor-affinity`, a pod anti-affinity by job name, `host-arch` / `accelerator-type` node selectors, the
rings-config volume, NPU limits equal to requests, `XDL_IP` from `status.hostIP`, `restartPolicy: Never`.

Builders raise `BuildError` (a ValueError) for inputs that would make a job the cluster or the agent cannot use.

One module per job kind (``volcano``, ``ascend``, ``jobset``), the ConfigMaps beside a job (``configmaps``) and
what they share (``common``); callers import from here.
"""

from agent.platform.builders.ascend import (
    AscendJobSpec,
    AscendReplica,
    build_ascend_job,
    guide_ascend_job,
)
from agent.platform.builders.common import (
    ASCEND_API_VERSION,
    ASCEND_FRAMEWORKS,
    ASCEND_JOB_NAME_LABEL,
    ASCEND_KIND,
    ASCEND_REPLICA_TYPES,
    DEFAULT_NPU_RESOURCE,
    FRAMEWORK_LABEL,
    GRACE_OVER_TIME_LABEL,
    RING_CONTROLLER_LABEL,
    RINGS_CONFIG_INITIAL,
    RINGS_CONFIG_KEY,
    RINGS_CONFIG_MOUNT_PATH,
    RINGS_CONFIG_PREFIX,
    RINGS_CONFIG_VOLUME,
    SUB_HEALTHY_STRATEGIES,
    TOR_AFFINITY_LABEL,
    VOLCANO_API_VERSION,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_KIND,
    BuildError,
    FaultTolerance,
    TrainingContainer,
    is_dns1123_label,
    rings_config_name,
    to_wire,
)
from agent.platform.builders.configmaps import (
    build_reset_config,
    build_rings_config,
    needs_reset_config,
)
from agent.platform.builders.jobset import (
    EVICTION_RULE,
    JOBSET_API_VERSION,
    JOBSET_KIND,
    JobSetTrainingSpec,
    build_jobset,
    guide_jobset,
)
from agent.platform.builders.volcano import (
    VolcanoJobSpec,
    VolcanoTask,
    build_volcano_job,
    grace_volcano_job,
    guide_volcano_job,
)

__all__ = [
    "ASCEND_API_VERSION",
    "ASCEND_FRAMEWORKS",
    "ASCEND_JOB_NAME_LABEL",
    "ASCEND_KIND",
    "ASCEND_REPLICA_TYPES",
    "DEFAULT_NPU_RESOURCE",
    "EVICTION_RULE",
    "FRAMEWORK_LABEL",
    "GRACE_OVER_TIME_LABEL",
    "JOBSET_API_VERSION",
    "JOBSET_KIND",
    "RINGS_CONFIG_INITIAL",
    "RINGS_CONFIG_KEY",
    "RINGS_CONFIG_MOUNT_PATH",
    "RINGS_CONFIG_PREFIX",
    "RINGS_CONFIG_VOLUME",
    "RING_CONTROLLER_LABEL",
    "SUB_HEALTHY_STRATEGIES",
    "TOR_AFFINITY_LABEL",
    "VOLCANO_API_VERSION",
    "VOLCANO_JOB_NAME_LABEL",
    "VOLCANO_KIND",
    "AscendJobSpec",
    "AscendReplica",
    "BuildError",
    "FaultTolerance",
    "JobSetTrainingSpec",
    "TrainingContainer",
    "VolcanoJobSpec",
    "VolcanoTask",
    "build_ascend_job",
    "build_jobset",
    "build_reset_config",
    "build_rings_config",
    "build_volcano_job",
    "grace_volcano_job",
    "guide_ascend_job",
    "guide_jobset",
    "guide_volcano_job",
    "is_dns1123_label",
    "needs_reset_config",
    "rings_config_name",
    "to_wire",
]
