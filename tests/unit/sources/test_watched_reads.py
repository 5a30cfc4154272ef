"""What the agent lists and watches by default (deploy/README.md, "Least privilege reads"; issue 37, 10): the
device plugin's and NodeD's ConfigMaps by namespace and name prefix with **no** label selector (a ConfigMap
without MindCluster's ``mx-consumer-cim=true`` must not drop out of view with its faults), ClusterD's with
MindCluster's own selector, job records by label in the agent's namespace."""

from __future__ import annotations

from agent.core.fault_source import FaultSource
from agent.settings import KubeSettings
from agent.sources.watchers import resources


def test_default_reads_by_namespace_and_where_a_label_selector_applies() -> None:
    settings = KubeSettings.model_validate({"public_fault_namespaces": ["ops"]})

    def seen(source: FaultSource) -> set[tuple[str, str | None, str, str, str]]:
        return {
            (r.source, r.namespace, r.label_selector, r.name_prefix, r.field_selector)
            for r in resources(settings, records_namespace="fault-agent", fault_source=source)
            if r.kind == "ConfigMap"
        }

    common = {
        ("faultconfig", "kube-system", "", "", "metadata.name=mindx-dl-fault-config"),
        ("jobrecords", "fault-agent", "fault-agent.io/job-record=true", "", ""),
    }
    assert seen(FaultSource.PER_NODE) == common | {
        ("deviceinfo", "kube-system", "", "mindx-dl-deviceinfo-", ""),
        ("nodeinfo", "mindx-dl", "", "mindx-dl-nodeinfo-", ""),
        ("publicfault", "ops", "mc-consumer-publicfault=true", "", ""),
    }
    # ClusterD's view alone: it has merged the public faults (agent.core.fault_source)
    assert seen(FaultSource.CLUSTERD) == common | {
        ("clusterinfo", "mindx-dl", "mx-consumer-volcano=true", "cluster-info-", ""),
    }
