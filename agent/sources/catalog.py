"""The watched sources, each declared once: its API, its converter, its signal time, its detector's label.

Every other table of sources is read from :data:`CATALOG`: the state's stores (agent.sources.state), the watches
(agent.sources.watchers), the metrics' known label values (agent.sinks.metrics) and the detectors' labels
(agent.engine.detecting). A new source is one more :class:`Source` here, its store on
:class:`~agent.sources.state.ClusterState` and, when it reports faults, its detector in
:class:`~agent.engine.detecting.DetectPipeline` (tests/unit/sources/test_source_catalog.py checks that each table
follows this one).

Which namespaces each source is watched in, and when it is on, are settings (agent.sources.watchers
``resources``, ``CONFIGMAP_SOURCES``); the API coordinates of the job kinds are MindCluster's and Volcano's CRDs
(agent.core.cluster.JobKind).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.core.cluster import JobKind
from agent.sources.configmaps import convert_configmap, device_info_signal_time, node_info_signal_time
from agent.sources.dra import convert_resource_claim, convert_resource_slice
from agent.sources.jobs import JobConverter
from agent.sources.jobsets import JobSetConverter
from agent.sources.leases import convert_lease
from agent.sources.nodes import NodeConverter, node_signal_time
from agent.sources.podgroups import convert_podgroup
from agent.sources.pods import PodConverter, pod_signal_time

Converter = Callable[[dict[str, Any]], Any]
"""A raw object (the watch's JSON) → its slim record, or a Rejection. Never raises."""


@dataclass(frozen=True)
class ConverterOptions:
    """What the converters take from the settings.

    Attributes:
        npu_resource_names: ``kube.npu_resource_names``: the extended resources that are NPUs (nodes), also the
            pod annotations naming a pod's chips (pods).
        node_label_keys: ``kube.node_label_keys``: the node labels kept on node records.
        node_annotation_keys: node annotations kept on node records (the quarantine hold's key).
    """

    npu_resource_names: tuple[str, ...] = ()
    node_label_keys: tuple[str, ...] = ()
    node_annotation_keys: tuple[str, ...] = ()


def _configmaps(options: ConverterOptions) -> Converter:
    return convert_configmap


@dataclass(frozen=True)
class Source:
    """One watched source.

    Attributes:
        name: the source's name: the ``resource`` of recording lines (agent.kube.record), the key of its store
            in the state, the ``resource``/``source`` label of the watch metrics.
        kind: the Kubernetes kind of its objects.
        group: the API group ("" for the core group).
        version: the API version.
        plural: the resource's plural (its URL path segment).
        store: the :class:`~agent.sources.state.ClusterState` attribute holding its records by key.
        converter: builds its converter from the settings (:class:`ConverterOptions`).
        signal_time: its record → when the cluster signalled the change (detection lag is measured from it);
            None: the source carries no such time.
        detector: the ``source`` label its detector's output is counted under (fault_agent_faults_total,
            rejections); "" when no detector reads it.
        fault_kinds: the fault kinds (agent.core.faults.FaultKind values) its detector reports; empty when it
            reports none (only rejections, or nothing).
        agent_owned: the agent's own objects (its job records), not a signal from the cluster: its watch
            metrics are not created at start.
        namespaced: whether its objects live in namespaces (False: cluster-scoped).
    """

    name: str
    kind: str
    group: str
    version: str
    plural: str
    store: str
    converter: Callable[[ConverterOptions], Converter]
    signal_time: Callable[[Any], Any] | None = None
    detector: str = ""
    fault_kinds: tuple[str, ...] = ()
    agent_owned: bool = False
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``group/version``, or ``version`` for the core group (an object's ``apiVersion``)."""
        return f"{self.group}/{self.version}" if self.group else self.version


def _job_source(name: str, kind: JobKind) -> Source:
    return Source(
        name, kind.api_kind, kind.api_group, kind.api_version, kind.plural, name,
        lambda options: JobConverter(kind), detector="jobs",
    )  # fmt: skip


_HARDWARE = ("chip", "network", "node")

CATALOG: tuple[Source, ...] = (
    Source(
        "pods", "Pod", "", "v1", "pods", "pods",
        lambda options: PodConverter(options.npu_resource_names), pod_signal_time,
        detector="pod", fault_kinds=("business", "disruption"),
    ),
    Source(
        "nodes", "Node", "", "v1", "nodes", "nodes",
        lambda options: NodeConverter(options.node_label_keys, options.npu_resource_names,
                                      options.node_annotation_keys),
        node_signal_time, detector="node", fault_kinds=("node",), namespaced=False,
    ),
    Source(
        "deviceinfo", "ConfigMap", "", "v1", "configmaps", "device_info", _configmaps, device_info_signal_time,
        detector="device-plugin", fault_kinds=_HARDWARE,
    ),
    Source(
        "nodeinfo", "ConfigMap", "", "v1", "configmaps", "node_info", _configmaps, node_info_signal_time,
        detector="noded", fault_kinds=("node",),
    ),
    Source("faultconfig", "ConfigMap", "", "v1", "configmaps", "fault_config", _configmaps, detector="faultconfig"),
    Source(
        "clusterinfo", "ConfigMap", "", "v1", "configmaps", "cluster_info", _configmaps,
        detector="clusterd", fault_kinds=_HARDWARE,
    ),
    Source(
        "publicfault", "ConfigMap", "", "v1", "configmaps", "public_fault", _configmaps,
        detector="publicfault", fault_kinds=_HARDWARE,
    ),
    _job_source("vcjobs", JobKind.VOLCANO),
    _job_source("acjobs", JobKind.ASCEND),
    Source(
        "jobsets", JobKind.JOBSET.api_kind, JobKind.JOBSET.api_group, JobKind.JOBSET.api_version,
        JobKind.JOBSET.plural, "jobsets", lambda options: JobSetConverter(), detector="jobs",
    ),
    Source(
        "podgroups", "PodGroup", "scheduling.volcano.sh", "v1beta1", "podgroups", "podgroups",
        lambda options: convert_podgroup,
    ),
    Source(
        "jobrecords", "ConfigMap", "", "v1", "configmaps", "job_records", _configmaps, agent_owned=True,
    ),
    Source(
        "leases", "Lease", "coordination.k8s.io", "v1", "leases", "leases", lambda options: convert_lease,
        detector="progress", fault_kinds=("business",),
    ),
    Source(
        "resourceslices", "ResourceSlice", "resource.k8s.io", "v1", "resourceslices", "resource_slices",
        lambda options: convert_resource_slice, namespaced=False,
    ),
    Source(
        "resourceclaims", "ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", "resource_claims",
        lambda options: convert_resource_claim,
    ),
)  # fmt: skip
"""Every source the agent can watch, in the order the state lists its stores and the metrics their labels."""

BY_NAME: Mapping[str, Source] = {s.name: s for s in CATALOG}
""":data:`CATALOG` by :attr:`Source.name`."""

SOURCE_NAMES: tuple[str, ...] = tuple(s.name for s in CATALOG)
"""The sources' names, in :data:`CATALOG`'s order."""


def source(name: str) -> Source:
    """The source called `name`.

    Raises:
        KeyError: no source has that name (a wiring bug).
    """
    return BY_NAME[name]
