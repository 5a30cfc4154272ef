"""The fault source at start, and a look once a minute for ClusterD's ConfigMaps the agent does not read.

:func:`resolve_fault_source` lists ClusterD's ``cluster-info-*`` ConfigMaps (label ``mx-consumer-volcano=true``,
``kube.node_info_namespace``; names only, one page) and resolves ``kube.fault_source`` with
:func:`agent.core.fault_source.choose_fault_source`; the caller builds its watches for that source. A failed list
is tried again for up to :data:`START_TRIES` attempts, then counts as "could not be listed". :class:`SourceCheck`
logs the choice (``fault source``, a warning when it has one), sets ``fault_agent_fault_source`` and
``fault_agent_clusterd_unread``, and while the per-node ConfigMaps are read looks again once a minute: a ClusterD
installed after the start is a loud warning (once per change) and the gauge at 1. A list needs ``list`` on
ConfigMaps in that namespace, which the watches need too (deploy/clusterrole.yaml).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

import structlog
from kubernetes_asyncio import client as k8s

from agent.core.fault_source import CLUSTERD_LABEL, FaultSource, SourceChoice, choose_fault_source, unread_warning
from agent.kube.errors import KubeError, translated
from agent.settings import KubeSettings
from agent.sources.configmaps import CLUSTER_INFO_PREFIX

log = structlog.get_logger(__name__)

CHECK_PERIOD_S = 60.0
"""Seconds between two looks for ClusterD's ConfigMaps while the per-node ConfigMaps are read."""

START_TRIES = 3
"""Lists tried at start before ClusterD's ConfigMaps count as "could not be listed" (1 s, 2 s apart)."""


def _what(e: KubeError) -> str:
    """A short name of a failed list: ``HTTP <status>``, or the type of the connection error."""
    return f"HTTP {e.status}" if e.status is not None else type(e.__cause__ or e).__name__


class SourceMetrics(Protocol):
    """The subset of agent.sinks.metrics.AgentMetrics the check reports to."""

    def fault_source(self, source: str) -> None: ...
    def clusterd_unread(self, unread: bool) -> None: ...


async def list_clusterd_configmaps(api: k8s.ApiClient, namespace: str, timeout_s: float) -> list[str]:
    """Names of ClusterD's ConfigMaps (``cluster-info-*`` labelled ``mx-consumer-volcano=true``) in `namespace`.

    Raises:
        KubeApiError: the list was refused (403: RBAC).
        KubeConnectionError: the apiserver did not answer.
    """
    with translated():
        got: Any = await k8s.CoreV1Api(api).list_namespaced_config_map(
            namespace, label_selector=CLUSTERD_LABEL, limit=100, _request_timeout=timeout_s
        )
    return sorted(
        str(cm.metadata.name) for cm in got.items or () if str(cm.metadata.name or "").startswith(CLUSTER_INFO_PREFIX)
    )


async def resolve_fault_source(
    api: k8s.ApiClient, kube: KubeSettings, *, sleep: Any = asyncio.sleep, tries: int = START_TRIES
) -> SourceChoice:
    """The fault source for `kube` on this cluster (module docstring); never raises for a failed list."""
    found: list[str] | None = None
    for attempt in range(tries):
        try:
            found = await list_clusterd_configmaps(api, kube.node_info_namespace, kube.request_timeout_s)
            break
        except KubeError as e:  # a failed list never stops the agent: it counts as "could not be listed"
            log.warning(
                "ClusterD's ConfigMaps not listed", namespace=kube.node_info_namespace, attempt=attempt + 1,
                error=_what(e),
            )  # fmt: skip
            if attempt + 1 < tries:
                await sleep(float(attempt + 1))
    return choose_fault_source(kube.fault_source, found, kube.node_info_namespace)


class SourceCheck:
    """Reports the choice and looks again for ClusterD's ConfigMaps (see the module docstring)."""

    def __init__(self, choice: SourceChoice, metrics: SourceMetrics, namespace: str) -> None:
        self.choice = choice
        self.metrics = metrics
        self.namespace = namespace
        self.unread = choice.clusterd_unread

    def report(self) -> None:
        """The start-up log line (and warning), and both gauges."""
        c = self.choice
        found = list(c.clusterd_configmaps) if c.clusterd_configmaps is not None else "not listed"
        log.info("fault source", source=c.source.value, setting=c.setting, reason=c.reason, clusterd_configmaps=found)
        if c.warning:
            log.warning("fault source: " + c.warning, source=c.source.value, setting=c.setting)
        self.metrics.fault_source(c.source.value)
        self.metrics.clusterd_unread(self.unread)

    def seen(self, names: list[str]) -> None:
        """One later look found `names`: warn once per change, set the gauge."""
        unread = self.choice.source is FaultSource.PER_NODE and bool(names)
        if unread and not self.unread:
            log.warning(unread_warning(self.choice, names, self.namespace), clusterd_configmaps=names)
        elif self.unread and not unread:
            log.info("ClusterD's ConfigMaps are gone; the per-node ConfigMaps are the only fault source")
        self.unread = unread
        self.metrics.clusterd_unread(unread)

    async def run(self, api: k8s.ApiClient, stop: asyncio.Event, timeout_s: float) -> None:
        """Look once every :data:`CHECK_PERIOD_S` until `stop` (only while the per-node ConfigMaps are read: with
        ClusterD's, its watch shows them). A failed list is logged once per kind of failure and changes nothing."""
        if self.choice.source is not FaultSource.PER_NODE:
            return
        failed: set[str] = set()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CHECK_PERIOD_S)
            if stop.is_set():
                return
            try:
                names = await list_clusterd_configmaps(api, self.namespace, timeout_s)
            except KubeError as e:  # changes nothing: logged once per kind of failure
                kind = _what(e)
                if kind not in failed:
                    failed.add(kind)
                    log.warning("ClusterD's ConfigMaps not listed", namespace=self.namespace, error=kind)
                continue
            except Exception:  # last resort of the fault-source-check task: a bug must not stop the agent
                log.exception("looking for ClusterD's ConfigMaps failed", namespace=self.namespace)
                continue
            failed.clear()
            self.seen(names)
