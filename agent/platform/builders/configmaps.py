"""The ConfigMaps a job needs beside it: ``rings-config-<job>`` (the rank table the Ascend Operator fills) and
``reset-config-<job>`` (a ``pod-rescheduling: on`` or ``subHealthyStrategy: graceExit`` job's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio.client import (
    V1ConfigMap,
    V1ObjectMeta,
)

from agent.core.resetconfig import initial_reset_config, reset_config_reason
from agent.platform.builders.common import (
    RING_CONTROLLER_LABEL,
    RINGS_CONFIG_INITIAL,
    RINGS_CONFIG_KEY,
    BuildError,
    check_name,
    rings_config_name,
)


def build_rings_config(job_name: str, namespace: str, ring_controller: str) -> V1ConfigMap:
    """The ``rings-config-<job>`` ConfigMap: label `ring-controller.atlas`, key `hccl.json` = initializing.

    Raises:
        BuildError: invalid job name or namespace, empty ring controller.
    """
    check_name("job name", job_name)
    check_name("namespace", namespace)
    if not ring_controller:
        raise BuildError("ring_controller (label ring-controller.atlas) must not be empty")
    return V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=V1ObjectMeta(
            name=rings_config_name(job_name), namespace=namespace, labels={RING_CONTROLLER_LABEL: ring_controller}
        ),
        data={RINGS_CONFIG_KEY: RINGS_CONFIG_INITIAL},
    )


def build_reset_config(job_name: str, namespace: str) -> V1ConfigMap:
    """The ``reset-config-<job>`` ConfigMap created with a job whose labels need it
    (:func:`needs_reset_config`): label ``reset: "true"``, ``reset.json`` the zero ``TaskResetInfo`` as Go marshals
    it and its ``checkCode`` (agent.core.resetconfig ``initial_reset_config``; MindCluster plugin/type.go).

    Raises:
        BuildError: invalid job name or namespace.
    """
    check_name("job name", job_name)
    check_name("namespace", namespace)
    body = initial_reset_config(job_name, namespace)
    meta = body["metadata"]
    return V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=V1ObjectMeta(name=meta["name"], namespace=namespace, labels=meta["labels"]),
        data=body["data"],
    )


def needs_reset_config(job: Mapping[str, Any]) -> str | None:
    """Why the job (a built or read manifest) needs a ``reset-config-<job>`` ConfigMap, e.g.
    ``"pod-rescheduling=on"``, or None (agent.core.resetconfig ``reset_config_reason``)."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    return reset_config_reason({str(k): str(v) for k, v in labels.items()})
