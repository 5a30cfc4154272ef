"""Kubernetes edge: client construction, typed errors and the generic list+watch engine."""
