"""What `status` reads besides the jobs: the agent's job records, the breaker's ConfigMap and the leader's Lease
(each "unknown (reason)" when unreadable) and, with ``--training``, the recoveries topic."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from agent.core.goodput import JobGoodput
from agent.core.records import JOB_UID_LABEL, RECORD_LABEL
from agent.kube.errors import KubeApiError, kube_call
from agent.platform.status.render import (
    breaker_line,
    leader_line,
)


async def training_rows(args: argparse.Namespace, namespace: str | None) -> dict[tuple[str, str], JobGoodput] | str:
    """``--training``: effective training time per job of `namespace` (None: every namespace) from the agent's
    ``recovery.resumed`` events (agent.platform.goodput_cli.read_events, the ``kafka`` settings), keyed
    ``(namespace, name)``; or "unknown (reason)" when the topic cannot be read."""
    from agent.platform.goodput_cli import GoodputReadError, read_events
    from agent.settings import SettingsError, load_settings

    try:
        settings = load_settings(getattr(args, "config", None))
        result = await read_events(settings.kafka, settings.kafka.recoveries_topic, args.training_timeout)
    except (SettingsError, GoodputReadError) as e:
        return f"unknown ({e})"
    rows = result.fold.report(datetime.now(UTC), namespace=namespace)
    return {(r.namespace, r.name): r for r in rows}


async def job_records(api: Any, config: str | None) -> dict[str, dict[str, str]]:
    """The agent's job records (agent.core.records) in ``leader.namespace``: job UID -> data. Empty when the
    settings cannot be loaded or the list fails (the job views then fall back to the jobs' own annotations).

    Raises nothing: a 403 (no right to list ConfigMaps there) is not worth failing `status` for."""
    from kubernetes_asyncio.client import CoreV1Api

    from agent.settings import SettingsError, load_settings

    try:
        settings = load_settings(config)
        listed = await kube_call(
            CoreV1Api(api).list_namespaced_config_map(settings.leader.namespace, label_selector=f"{RECORD_LABEL}=true")
        )
    except (SettingsError, KubeApiError):
        return {}
    out: dict[str, dict[str, str]] = {}
    for cm in listed.items:
        uid = (cm.metadata.labels or {}).get(JOB_UID_LABEL)
        if uid:
            out[str(uid)] = {str(k): str(v) for k, v in (cm.data or {}).items()}
    return out


async def agent_state_lines(api: Any, config: str | None) -> list[tuple[str, str]]:
    """("breaker", text) and ("leader", text), read from the cluster; "unknown (reason)" when unreadable."""
    from kubernetes_asyncio.client import CoordinationV1Api, CoreV1Api

    from agent.settings import SettingsError, load_settings

    try:
        settings = load_settings(config)
    except SettingsError as e:
        reason = f"unknown (settings cannot be loaded: {e})"
        return [("breaker", reason), ("leader", reason)]
    ns = settings.leader.namespace
    cm_where = f"{ns}/{settings.policy.breaker_configmap}"
    lease_where = f"{ns}/{settings.leader.name}"

    def failed(e: KubeApiError, what: str) -> str:
        if e.status == 403:
            return f"unknown (forbidden to read {what}: HTTP 403)"
        return f"unknown (cannot read {what}: HTTP {e.status} {e.reason})"

    try:
        cm = await kube_call(CoreV1Api(api).read_namespaced_config_map(settings.policy.breaker_configmap, ns))
        breaker = breaker_line(dict(cm.data or {}), cm_where)
    except KubeApiError as e:
        breaker = breaker_line(None, cm_where) if e.status == 404 else failed(e, f"ConfigMap {cm_where}")
    try:
        lease = await kube_call(CoordinationV1Api(api).read_namespaced_lease(settings.leader.name, ns))
        spec = lease.spec
        leader = leader_line(
            spec.holder_identity if spec else None,
            spec.renew_time if spec else None,
            spec.lease_duration_seconds if spec else None,
            lease_where,
            datetime.now(UTC),
        )
    except KubeApiError as e:
        if e.status == 404:
            leader = f"unknown (no Lease {lease_where}: no agent has run leader election there; check leader.namespace)"
        else:
            leader = failed(e, f"Lease {lease_where}")
    return [("breaker", breaker), ("leader", leader)]
