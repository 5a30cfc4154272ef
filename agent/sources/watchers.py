"""One source per signal: which collection to watch, how to slim its objects, and the wiring to the state.

:func:`build_watchers` returns one :class:`~agent.kube.watch.Watcher` per (source, namespace) and registers
each with the state's readiness flag. Sources: pods and jobs (per watched namespace, or all), nodes,
device-plugin ConfigMaps (``mindx-dl-deviceinfo-*``), NodeD ConfigMaps (``mindx-dl-nodeinfo-*``), the
fault-level override ConfigMap (``mindx-dl-fault-config``), ClusterD ``cluster-info-*`` instead of the per-node and
public-fault ConfigMaps (label ``mc-consumer-publicfault=true``) when the fault source is ClusterD's
(agent.core.fault_source), Volcano Jobs and AscendJobs, and optionally (``podgroup_info_enabled``) Volcano
PodGroups, (``progress_leases_enabled``) the training-progress heartbeat Leases (label
``fault-agent.io/progress=lease``, agent.sources.leases), and (``dra``) DRA ResourceSlices (cluster-wide) and
ResourceClaims (agent.sources.dra); and the agent's own job records (ConfigMaps labelled
``fault-agent.io/job-record=true`` in its namespace, agent.core.records) when a records namespace is given: the
engine decides nothing before their first list either, and a new leader resumes incidents from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.core.detect.deviceinfo import DEVICE_INFO_PREFIX
from agent.core.detect.nodeinfo import NODE_INFO_PREFIX
from agent.core.detect.publicfault import LABEL as PUBLIC_FAULT_LABEL
from agent.core.fault_source import CLUSTERD_LABEL, FaultSource
from agent.core.records import RECORD_LABEL
from agent.kube.watch import Change, Resource, Transport, Watcher, WatchObserver
from agent.settings import KubeSettings
from agent.sources.catalog import CATALOG, ConverterOptions, source
from agent.sources.configmaps import CLUSTER_INFO_PREFIX, FAULT_CONFIG_NAME
from agent.sources.leases import LEASE_SELECTOR
from agent.sources.pods import PodConverter, PodLines
from agent.sources.state import ClusterState


@dataclass(frozen=True)
class ConfigMapSource:
    """One ConfigMap source and the :class:`KubeSettings` fields that decide what it watches.

    :func:`resources` builds its watches from :data:`CONFIGMAP_SOURCES`, and ``fault-agent detect`` routes
    files with the same table, so the two cannot drift.

    Attributes:
        source: the watch source (``deviceinfo``, ``nodeinfo``, ``faultconfig``, ``clusterinfo``, ``publicfault``).
        fault_sources: the fault sources (``kube.fault_source`` as resolved) under which it is read.
        enabled_setting: the boolean KubeSettings field that turns the source on; "" for always on.
        namespace_setting: the KubeSettings field holding its namespace (a str) or namespaces (a list; empty
            means all namespaces).
        name_prefix: the name prefix it keeps ("" for any).
        name: the one name it reads (a field selector), "" for any.
        label_selector: its label selector, ``key=value[,key=value]``; "" for none.
    """

    source: str
    fault_sources: frozenset[FaultSource]
    enabled_setting: str
    namespace_setting: str
    name_prefix: str = ""
    name: str = ""
    label_selector: str = ""

    def enabled(self, settings: KubeSettings, fault_source: FaultSource | None = None) -> bool:
        """Whether `settings` turn this source on under `fault_source` (None: :func:`static_fault_source`)."""
        if (fault_source or static_fault_source(settings)) not in self.fault_sources:
            return False
        return not self.enabled_setting or bool(getattr(settings, self.enabled_setting))

    def why_off(self, settings: KubeSettings, fault_source: FaultSource | None = None) -> str:
        """Why :meth:`enabled` is False, naming the setting: "" when it is on."""
        used = fault_source or static_fault_source(settings)
        if used not in self.fault_sources:
            how = f"kube.fault_source {settings.fault_source}"
            if settings.fault_source == "auto":
                how += f" chose {used.value}"
            return f"{how}: run reads {self.source} only with fault source {'/'.join(sorted(self.fault_sources))}"
        if self.enabled_setting and not getattr(settings, self.enabled_setting):
            return f"kube.{self.enabled_setting} is false"
        return ""

    def namespaces(self, settings: KubeSettings) -> list[str | None]:
        """The namespaces watched under `settings`; ``[None]`` means all namespaces."""
        value = getattr(settings, self.namespace_setting)
        if isinstance(value, str):
            return [value]
        return list(value) or [None]

    def labels_match(self, labels: dict[str, str]) -> bool:
        """Whether `labels` satisfy :attr:`label_selector` (equality terms only, the only kind used here)."""
        for term in filter(None, self.label_selector.split(",")):
            key, _, value = term.partition("=")
            if labels.get(key) != value:
                return False
        return True


_PER_NODE = frozenset({FaultSource.PER_NODE})
_CLUSTERD = frozenset({FaultSource.CLUSTERD})

CONFIGMAP_SOURCES: tuple[ConfigMapSource, ...] = (
    ConfigMapSource("deviceinfo", _PER_NODE, "", "device_info_namespace", name_prefix=DEVICE_INFO_PREFIX),
    ConfigMapSource("nodeinfo", _PER_NODE, "", "node_info_namespace", name_prefix=NODE_INFO_PREFIX),
    ConfigMapSource("faultconfig", _PER_NODE | _CLUSTERD, "", "fault_config_namespace", name=FAULT_CONFIG_NAME),
    ConfigMapSource(
        "clusterinfo",
        _CLUSTERD,
        "",
        "node_info_namespace",
        name_prefix=CLUSTER_INFO_PREFIX,
        label_selector=CLUSTERD_LABEL,
    ),
    ConfigMapSource(
        "publicfault",
        _PER_NODE,
        "public_fault_enabled",
        "public_fault_namespaces",
        label_selector=f"{PUBLIC_FAULT_LABEL}=true",
    ),
)
"""The ConfigMap sources, in the order :func:`resources` lists their watches."""


NAMESPACE_SETTINGS: dict[str, str] = {
    **{s: "kube.namespaces" for s in ("pods", "vcjobs", "acjobs", "jobsets", "podgroups", "leases", "resourceclaims")},
    **{cm.source: f"kube.{cm.namespace_setting}" for cm in CONFIGMAP_SOURCES},
    "jobrecords": "leader.namespace",
}
"""Watch source → the setting naming the namespace(s) it is watched in (nodes: none, cluster-scoped), for the
start-up read check's messages (agent.sources.access_check)."""


def static_fault_source(settings: KubeSettings) -> FaultSource:
    """The fault source `settings` name without looking at the cluster: ``auto`` counts as per-node here (the
    answer where no ClusterD runs); ``fault-agent run`` resolves ``auto`` at start (agent.sources.fault_source)."""
    return FaultSource.CLUSTERD if settings.fault_source == "clusterd" else FaultSource.PER_NODE


def dra_watched(settings: KubeSettings, dra_served: bool | None = None) -> bool:
    """Whether ResourceSlices and ResourceClaims are watched: ``kube.dra`` on, or auto and the apiserver serves
    ``resource.k8s.io/v1`` (`dra_served`, found at start by agent.sources.dra_check; None: not looked, counts as
    served)."""
    return settings.dra == "on" or (settings.dra == "auto" and dra_served is not False)


def resources(
    settings: KubeSettings,
    records_namespace: str | None = None,
    fault_source: FaultSource | None = None,
    dra_served: bool | None = None,
) -> list[Resource]:
    """The collections to watch for these settings, one per (source, namespace); with `records_namespace` (the
    agent's own, ``leader.namespace``) also its job records there. `fault_source`: the fault source resolved at
    start (None: :func:`static_fault_source`). `dra_served`: see :func:`dra_watched`."""
    namespaces: list[str | None] = list(settings.namespaces) or [None]
    out: list[Resource] = []
    for ns in namespaces:
        out.append(_resource("pods", ns))
    out.append(_resource("nodes", None))
    for cm in CONFIGMAP_SOURCES:
        if cm.enabled(settings, fault_source):
            for cm_ns in cm.namespaces(settings):
                out.append(
                    _resource(
                        cm.source, cm_ns, label_selector=cm.label_selector, name_prefix=cm.name_prefix,
                        field_selector=f"metadata.name={cm.name}" if cm.name else "",
                    )
                )  # fmt: skip
    sel = settings.job_label_selector
    for ns in namespaces:
        out.append(_resource("vcjobs", ns, label_selector=sel))
        out.append(_resource("acjobs", ns, label_selector=sel))
        if settings.jobsets_enabled:
            out.append(_resource("jobsets", ns, label_selector=sel))
    if settings.podgroup_info_enabled:
        for ns in namespaces:
            out.append(_resource("podgroups", ns))
    if settings.progress_leases_enabled:
        for ns in namespaces:
            out.append(_resource("leases", ns, label_selector=LEASE_SELECTOR))
    if dra_watched(settings, dra_served):
        out.append(_resource("resourceslices", None))
        for ns in namespaces:
            out.append(_resource("resourceclaims", ns))
    if records_namespace is not None:
        out.append(_resource("jobrecords", records_namespace, label_selector=f"{RECORD_LABEL}=true"))
    return out


def _resource(
    name: str, namespace: str | None, *, label_selector: str = "", field_selector: str = "", name_prefix: str = ""
) -> Resource:
    """The watch of source `name` (agent.sources.catalog) in `namespace` (None: all, or cluster-scoped)."""
    src = source(name)
    return Resource(
        name, src.kind, src.group, src.version, src.plural, namespace,
        label_selector=label_selector, field_selector=field_selector, name_prefix=name_prefix,
    )  # fmt: skip


def build_watchers(
    settings: KubeSettings,
    transport: Transport,
    state: ClusterState,
    *,
    observer: WatchObserver | None = None,
    sink: Callable[[Change[Any]], None] | None = None,
    node_annotation_keys: tuple[str, ...] = (),
    tap: Callable[[Resource], Callable[[str, dict[str, Any]], None]] | None = None,
    records_namespace: str | None = None,
    fault_source: FaultSource | None = None,
    dra_served: bool | None = None,
) -> list[Watcher[Any]]:
    """Watchers for every source, each registered as expected by `state` (readiness).

    Args:
        sink: receives each change after `state` applied it (e.g. the detect pipeline); None for none.
        node_annotation_keys: node annotations kept on the node records (the quarantine hold's key).
        tap: resource → the raw-object hook of its watcher (``Recorder.tap`` of agent.kube.record); None for none.
        records_namespace: where the agent's job records are (``leader.namespace``); None: not watched (tools that
            only detect).
        fault_source: the fault source resolved at start (agent.sources.fault_source); None:
            :func:`static_fault_source`.
        dra_served: whether the apiserver serves ``resource.k8s.io/v1`` (:func:`dra_watched`).
    """
    options = ConverterOptions(
        tuple(settings.npu_resource_names), tuple(settings.node_label_keys), node_annotation_keys
    )
    converters = {src.name: src.converter(options) for src in CATALOG}
    if sink is None:
        apply: Callable[[Change[Any]], None] = state.apply
    else:
        forward = sink

        def apply(change: Change[Any]) -> None:
            state.apply(change)
            forward(change)

    watchers: list[Watcher[Any]] = []
    for res in resources(settings, records_namespace, fault_source, dra_served):
        convert = converters[res.source]
        state.expect(res.watcher_id)
        watchers.append(
            Watcher(
                transport,
                res,
                convert,
                state.store(res.source),
                apply,
                observer=observer,
                signal_time=source(res.source).signal_time,
                page_size=settings.list_page_size,
                watch_timeout_s=settings.watch_timeout_s,
                inactivity_s=settings.inactivity_deadline_s,
                backoff_initial_s=settings.backoff_initial_s,
                backoff_max_s=settings.backoff_max_s,
                tap=tap(res) if tap is not None else None,
                unchanged=convert.unchanged if isinstance(convert, PodConverter) else None,
                typed=PodLines(convert) if isinstance(convert, PodConverter) else None,
            )
        )
    return watchers
