"""Versions of the testbed's components. Kubernetes 1.35 pairs with Volcano v1.15 (a later issue builds it)."""

KUBERNETES = "v1.35.4"
ETCD = "v3.6.16"
KWOK = "v0.8.0"
KAFKA = "4.1.1"
