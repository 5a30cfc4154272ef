"""What the agent lists and watches by default (deploy/README.md, "Least privilege reads"; issue 37, 10): the
device plugin's and NodeD's ConfigMaps by namespace and name prefix with **no** label selector (a ConfigMap
without MindCluster's ``mx-consumer-cim=true`` must not drop out of view with its faults), ClusterD's with
MindCluster's own selector, job records by label in the agent's namespace."""

from __future__ import annotations

from agent.settings import KubeSettings
from agent.sources.watchers import resources


def test_default_reads_by_namespace_and_where_a_label_selector_applies() -> None:
    settings = KubeSettings.model_validate({"cluster_info_enabled": True, "public_fault_namespaces": ["ops"]})
    seen = {
        (r.source, r.namespace, r.label_selector, r.name_prefix, r.field_selector)
        for r in resources(settings, records_namespace="fault-agent")
        if r.kind == "ConfigMap"
    }
    assert seen == {
        ("deviceinfo", "kube-system", "", "mindx-dl-deviceinfo-", ""),
        ("nodeinfo", "mindx-dl", "", "mindx-dl-nodeinfo-", ""),
        ("faultconfig", "kube-system", "", "", "metadata.name=mindx-dl-fault-config"),
        ("clusterinfo", "mindx-dl", "mx-consumer-volcano=true", "cluster-info-", ""),
        ("publicfault", "ops", "mc-consumer-publicfault=true", "", ""),
        ("jobrecords", "fault-agent", "fault-agent.io/job-record=true", "", ""),
    }
