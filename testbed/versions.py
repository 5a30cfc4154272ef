"""Versions of the testbed's components, chosen so that Volcano builds from the module proxy against the same minor."""

KUBERNETES = "v1.34.4"
ETCD = "v3.6.16"
KWOK = "v0.8.0"
KAFKA = "4.1.1"
# Volcano v1.15 (the 1.35 pairing) cannot be built from the module proxy: it needs volcano.sh/apis v1.15, which
# the proxy does not serve. v1.14.1 builds with volcano.sh/apis v1.14.0 and pairs with Kubernetes 1.34.
VOLCANO = "v1.14.1"
VOLCANO_APIS = "v1.14.0"
# Tools around the cluster, for the deploy tests: Helm (the chart), and the Prometheus Operator's CRDs
# (ServiceMonitor, PrometheusRule) read from its module, which the module proxy serves at this version.
HELM = "v3.22.0"
PROMETHEUS_OPERATOR = "v0.85.0"
# JobSet (sigs.k8s.io/jobset): v0.10.1 is the newest release whose go.mod pairs with Kubernetes 1.34 (k8s.io/*
# v0.34.1, controller-runtime v0.22.1); v0.11.0 moved to v0.35. Its failure policy code is the same in both.
JOBSET = "v0.10.1"
