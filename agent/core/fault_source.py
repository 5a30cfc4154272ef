"""Which fault source the agent reads: ClusterD's processed view or the per-node ConfigMaps, never both.

MindCluster's scheduler reads exactly one: ClusterD's ``cluster-info-*`` ConfigMaps when its plugin argument
``useClusterInfoManager`` is ``true`` (every shipped manifest: ``component/ascend-for-volcano/build/volcano-v1.*.yaml``;
``plugin/factory.go`` ``CheckUseCIMByConfig``), else the device plugin's and NodeD's per-node ConfigMaps
(``component/ascend-for-volcano/common/k8s/cmmgr.go`` ``InitCmInformer``). ClusterD's view is processed
(``component/clusterd/pkg/application/faultmanager/cmprocess/``): public faults merged in (also those that come only
over its gRPC API), codes silenced per job by the PodGroup annotations ``huawei.com/schedule.filter.*``, retryable
faults held back while a job recovers in place, unused ``PreSeparateNPU`` chips marked unhealthy, its own
isolations. Reading the raw view beside it acts on what ClusterD decided not to act on.

``kube.fault_source``: ``clusterd``, ``per-node``, or ``auto`` (default): ``clusterd`` when ClusterD's ConfigMaps
(label ``mx-consumer-volcano=true``, name ``cluster-info-*``, in ``kube.node_info_namespace``) exist when the agent
starts, else ``per-node``. Why ``auto`` and why once: a cluster that runs ClusterD has those ConfigMaps within
seconds of its start (it writes them after each change and on a period), and one that does not never has them, so
their presence is the evidence MindCluster's own manifests encode in ``useClusterInfoManager``; deciding once keeps
the watches and the fault state of one process consistent (switching sources mid-run would clear every fault of one
view and raise the other's again). A ClusterD installed after the agent started is reported (a warning, the gauge
``fault_agent_clusterd_unread``) until the agent is restarted. Pure: the caller lists the ConfigMaps.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

CLUSTERD_LABEL = "mx-consumer-volcano=true"
"""The label ClusterD puts on its ``cluster-info-*`` ConfigMaps
(``component/clusterd/pkg/common/constant/configmap.go``), the one MindCluster's scheduler selects them by."""


class FaultSource(enum.StrEnum):
    """The fault source in use."""

    PER_NODE = "per-node"
    CLUSTERD = "clusterd"


@dataclass(frozen=True, slots=True)
class SourceChoice:
    """What the agent reads and why.

    Attributes:
        setting: ``kube.fault_source`` as set (``auto``, ``per-node``, ``clusterd``).
        source: the source in use.
        clusterd_configmaps: names of ClusterD's ConfigMaps found at start, sorted; None when they could not be
            listed.
        reason: a sentence for the start-up log line.
        warning: "" or a sentence to log as a warning (ClusterD's ConfigMaps exist and are not read; none exist
            while only they are read; they could not be listed).
    """

    setting: str
    source: FaultSource
    clusterd_configmaps: tuple[str, ...] | None
    reason: str
    warning: str = ""

    @property
    def clusterd_unread(self) -> bool:
        """ClusterD's ConfigMaps exist and the agent does not read them."""
        return self.source is FaultSource.PER_NODE and bool(self.clusterd_configmaps)


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:4])
    return shown + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def choose_fault_source(setting: str, clusterd_configmaps: Sequence[str] | None, namespace: str) -> SourceChoice:
    """The source for `setting` given the ClusterD ConfigMaps found in `namespace` (None: the list failed).

    Raises:
        ValueError: `setting` is none of ``auto``, ``per-node``, ``clusterd`` (the settings model refuses it first).
    """
    found = tuple(sorted(clusterd_configmaps)) if clusterd_configmaps is not None else None
    where = f"{namespace}/cluster-info-* ({CLUSTERD_LABEL})"
    if setting == "clusterd":
        warning = ""
        if found is None:
            warning = f"ClusterD's ConfigMaps {where} could not be listed; reading them alone all the same"
        elif not found:
            warning = (
                f"no ClusterD ConfigMap {where} exists: with kube.fault_source clusterd the agent sees no chip, NodeD, "
                "switch or public fault until ClusterD writes them (is ClusterD running? per-node or auto reads the "
                "device plugin's and NodeD's ConfigMaps instead)"
            )
        return SourceChoice(setting, FaultSource.CLUSTERD, found, "kube.fault_source is clusterd", warning)
    if setting == "per-node":
        warning = ""
        if found:
            warning = (
                f"ClusterD's ConfigMaps exist ({_names(found)} in {namespace}) and are not read: kube.fault_source is "
                "per-node, so the agent acts on the raw per-node view, including faults ClusterD silenced, holds back "
                "while a job recovers in place, or isolated differently; MindCluster's scheduler reads only ClusterD's "
                "view where it runs (set kube.fault_source to clusterd or auto)"
            )
        return SourceChoice(setting, FaultSource.PER_NODE, found, "kube.fault_source is per-node", warning)
    if setting != "auto":
        raise ValueError(f"kube.fault_source {setting!r} is none of auto, per-node, clusterd")
    if found is None:
        return SourceChoice(
            setting, FaultSource.PER_NODE, None,
            "auto: ClusterD's ConfigMaps could not be listed, reading the per-node ConfigMaps",
            f"ClusterD's ConfigMaps {where} could not be listed at start: reading the per-node ConfigMaps; if ClusterD "
            "runs, restart the agent once the list works, or set kube.fault_source to clusterd",
        )  # fmt: skip
    if found:
        return SourceChoice(
            setting, FaultSource.CLUSTERD, found,
            f"auto: ClusterD's ConfigMaps found ({_names(found)} in {namespace}), reading them alone as MindCluster's "
            "scheduler does",
        )  # fmt: skip
    return SourceChoice(
        setting, FaultSource.PER_NODE, found, f"auto: no ClusterD ConfigMap {where}, reading the per-node ConfigMaps"
    )


def unread_warning(choice: SourceChoice, clusterd_configmaps: Sequence[str], namespace: str) -> str:
    """The warning for a later look at ClusterD's ConfigMaps (``clusterd_configmaps`` found now) while the agent
    reads `choice.source`: "" when there is nothing to say."""
    if choice.source is FaultSource.PER_NODE and clusterd_configmaps:
        return (
            f"ClusterD's ConfigMaps exist ({_names(sorted(clusterd_configmaps))} in {namespace}) and are not read: "
            f"the agent reads the per-node ConfigMaps ({choice.reason}); MindCluster's scheduler reads only "
            "ClusterD's view where it runs: restart the agent (kube.fault_source auto) or set kube.fault_source to "
            "clusterd"
        )
    return ""
