"""The circuit breaker's ConfigMap: read, write and reset the state the agent keeps there.

The ConfigMap is ``policy.breaker_configmap`` (default ``fault-agent-breaker``) in ``leader.namespace``; its data
is :meth:`agent.core.guards.CircuitBreaker.to_data` (``state``: ``open``/``closed``; for an open breaker
``tripped_at``, ``faulty_nodes``, ``watched_nodes``, ``reason``); a person's reset writes ``state: closed`` with
``reset_at``, ``reset_by`` and an optional ``reset_reason`` (``fault-agent breaker reset``, agent.cli.breaker).

Each function takes a ``CoreV1Api`` (the CLI's) or the writer's edge to one, and raises the typed errors of
agent.kube.errors either way (agent.actions.writes.base.ApiEdge).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client as k8s

from agent.actions.writes.base import ApiEdge, edge
from agent.kube.errors import KubeApiError
from agent.settings import Settings


async def read_breaker_state(core: k8s.CoreV1Api | ApiEdge, settings: Settings) -> dict[str, str] | None:
    """The breaker ConfigMap's data, or None when it does not exist.

    Raises:
        KubeError: any error other than 404.
    """
    api = edge(core)
    try:
        cm = await api.read_namespaced_config_map(settings.policy.breaker_configmap, settings.leader.namespace)
    except KubeApiError as e:
        if e.status == 404:
            return None
        raise
    data: dict[str, str] = dict(cm.data or {})
    return data


async def write_breaker_state(core: k8s.CoreV1Api | ApiEdge, settings: Settings, data: dict[str, str]) -> None:
    """Create or replace the breaker ConfigMap's data with `data` (keys not in `data` are removed).

    Raises:
        KubeError: the write failed (404 when the namespace does not exist).
    """
    name, ns = settings.policy.breaker_configmap, settings.leader.namespace
    body: Any = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/name": "fault-agent"}},
        "data": data,
    }
    api = edge(core)
    try:
        await api.replace_namespaced_config_map(name, ns, body)
    except KubeApiError as e:
        if e.status != 404:
            raise
        await api.create_namespaced_config_map(ns, body)


async def reset_breaker(
    core: k8s.CoreV1Api | ApiEdge, settings: Settings, *, by: str, now: datetime, reason: str = ""
) -> dict[str, str]:
    """Close the breaker: write ``state: closed`` with ``reset_at`` (RFC 3339), ``reset_by`` and, when given,
    ``reset_reason`` (the leader publishes them as ``breaker.reset``); returns the previous data ({} when there
    was none).

    Raises:
        KubeError: reading or writing the ConfigMap failed.
    """
    before = await read_breaker_state(core, settings) or {}
    data = {"state": "closed", "reset_at": now.astimezone(UTC).isoformat(), "reset_by": by}
    if reason:
        data["reset_reason"] = reason
    await write_breaker_state(core, settings, data)
    return before
