"""Is MindCluster's Volcano plugin running beside the agent? Read its ConfigMap at start and once a minute.

The plugin rewrites ``volcano-system/vcjob-fault-npu-cm`` (keys ``fault-node``, ``remain-retry-times``) at every
scheduling session close while its rescheduling is on; see agent.core.observe for the source paths and the rule
(:func:`agent.core.observe.plugin_evidence`). While the evidence holds and ``policy.mode`` is ``act``, the agent
logs a loud warning saying how to switch (once per change of the evidence) and sets
``fault_agent_mindcluster_plugin_active{agent_mode="act"}`` to 1 (alert FaultAgentTwoReschedulers). A read needs
``get`` on that ConfigMap: the ClusterRole's configmaps rule grants it (deploy/clusterrole.yaml). A failed read
(403, a timeout) is logged once per kind of failure and leaves the last evidence standing.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

import structlog
from kubernetes_asyncio import client as k8s

from agent.core.observe import (
    PLUGIN_CONFIGMAP,
    ConfigMapSeen,
    PluginEvidence,
    coexistence_warning,
    keys_of,
    plugin_evidence,
)
from agent.kube.errors import KubeApiError, KubeError, translated

log = structlog.get_logger(__name__)

CHECK_PERIOD_S = 60.0
"""Seconds between two reads of the plugin's ConfigMap."""


class PluginMetrics(Protocol):
    """The subset of agent.sinks.metrics.AgentMetrics the check reports to."""

    def mindcluster_plugin(self, active: bool, mode: str) -> None: ...


async def read_plugin_configmap(api: k8s.ApiClient, timeout_s: float) -> ConfigMapSeen | None:
    """One read of ``volcano-system/vcjob-fault-npu-cm``: its resourceVersion and data keys, None when absent.

    Raises:
        KubeApiError: any error but 404 (403: RBAC; the agent needs get on that ConfigMap).
        KubeConnectionError: the apiserver did not answer.
    """
    namespace, name = PLUGIN_CONFIGMAP
    try:
        with translated():
            cm: Any = await k8s.CoreV1Api(api).read_namespaced_config_map(name, namespace, _request_timeout=timeout_s)
    except KubeApiError as e:
        if e.status == 404:
            return None
        raise
    return ConfigMapSeen(str(cm.metadata.resource_version or ""), keys_of(cm.data))


class PluginCheck:
    """Follows the evidence and reports its changes (see the module docstring).

    Args:
        mode: ``policy.mode`` (``act`` or ``observe``).
        metrics: where the gauge is set.
    """

    def __init__(self, mode: str, metrics: PluginMetrics) -> None:
        self.mode = mode
        self.metrics = metrics
        self.first: ConfigMapSeen | None = None
        self.read_once = False
        self.evidence = PluginEvidence.ABSENT
        self._reported = False  # the gauge is set at the first read, whatever it finds
        self._failed: set[str] = set()

    @property
    def may_be_active(self) -> bool:
        """The plugin evidently runs, or the first read has not answered yet (no read and no failure): what the
        agent's own ``remain-retry-times`` entries wait for (agent.engine.bookkeeping). A failed read counts as
        an answer (the last evidence stands), so an agent without the read's RBAC still keeps its entries."""
        return self.evidence.active or not (self.read_once or self._failed)

    def seen(self, cm: ConfigMapSeen | None) -> PluginEvidence:
        """Take one read (None: the ConfigMap does not exist); log and set the gauge when the evidence changes."""
        if not self.read_once:
            self.first, self.read_once = cm, True
        evidence = plugin_evidence(self.first, cm)
        changed = evidence is not self.evidence or not self._reported
        self.evidence = evidence
        if changed:
            self._reported = True
            self.metrics.mindcluster_plugin(evidence.active, self.mode)
            warning = coexistence_warning(evidence, self.mode)
            if warning is not None:
                log.error(warning, evidence=evidence.value, setting="policy.mode", value="observe")
            elif evidence.active:
                log.info("MindCluster's Volcano plugin looks active; observe mode leaves the restarts to it",
                         evidence=evidence.value)  # fmt: skip
        return evidence

    def failed(self, error: KubeError) -> None:
        """A read failed: logged once per kind of failure (an HTTP status, or the connection error's type); the
        last evidence stands."""
        what = f"HTTP {error.status}" if error.status is not None else type(error.__cause__ or error).__name__
        if what not in self._failed:
            self._failed.add(what)
            log.warning("MindCluster plugin ConfigMap not read; coexistence check skipped", error=what,
                        configmap="/".join(PLUGIN_CONFIGMAP))  # fmt: skip

    async def run(self, api: k8s.ApiClient, stop: asyncio.Event, *, timeout_s: float) -> None:
        """Read at once, then every :data:`CHECK_PERIOD_S` until `stop`."""
        while not stop.is_set():
            try:
                self.seen(await read_plugin_configmap(api, timeout_s))
            except KubeError as e:  # no answer, or refused: the last evidence stands
                self.failed(e)
            except Exception:  # last resort of the plugin-check task: a bug must not stop the agent; read again later
                log.exception("MindCluster plugin ConfigMap check failed", configmap="/".join(PLUGIN_CONFIGMAP))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=CHECK_PERIOD_S)
